//! The push notification config operations (`CreateTaskPushNotificationConfig`, `Get...`,
//! `ListTaskPushNotificationConfigs`, `Delete...`), over the task store, for both bindings in
//! both versions. Each answers `PushNotificationNotSupported` when the agent delivers none, and
//! `TaskNotFound` for a task the tenant does not have (or a config it does not have).

use mesh_protocol::a2a::v1::{
    GetTaskRequest, ListTaskPushNotificationConfigsRequest, ListTaskPushNotificationConfigsResponse,
    TaskPushNotificationConfig, TaskPushNotificationConfigRequest,
};
use mesh_tasks::TaskError;

use crate::engine::{TaskEngine, TaskHandler};
use crate::push::PushDelivery;

impl<H: TaskHandler> TaskEngine<H> {
    /// The delivery, once the tenant's task is known to exist.
    async fn push_for_task(&self, tenant: &str, task_id: &str) -> Result<&PushDelivery, TaskError> {
        let push = self.push_delivery().ok_or(TaskError::PushNotSupported)?;
        let request = GetTaskRequest { tenant: None, id: task_id.to_owned(), history_length: Some(0) };
        self.get(tenant, &request).await?;
        Ok(push)
    }

    /// Stores a webhook of a task (its URL checked first) and returns it as stored, its id the
    /// task's when none was given; a config of the same id is replaced.
    pub async fn create_push_config(
        &self,
        tenant: &str,
        config: &TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, TaskError> {
        let task_id = config.task_id.as_deref().filter(|id| !id.is_empty()).ok_or_else(|| {
            TaskError::InvalidParams("taskId is required: the task the push notification config is for".into())
        })?;
        let push = self.push_for_task(tenant, task_id).await?;
        push.vet(config).await?;
        let stored = push.store().put_push_config(tenant, task_id, config).await?;
        self.note_webhooks(tenant, task_id);
        Ok(stored)
    }

    pub async fn push_config(
        &self,
        tenant: &str,
        request: &TaskPushNotificationConfigRequest,
    ) -> Result<TaskPushNotificationConfig, TaskError> {
        let push = self.push_for_task(tenant, &request.task_id).await?;
        let configs = push.store().push_configs(tenant, &request.task_id).await?;
        configs
            .into_iter()
            .find(|config| config.id.as_deref() == Some(request.id.as_str()))
            .ok_or_else(|| TaskError::PushConfigNotFound { task_id: request.task_id.clone(), id: request.id.clone() })
    }

    /// Every webhook of the task, on one page: a task has at most
    /// [`mesh_tasks::PUSH_CONFIGS_PER_TASK_MAX`] of them.
    pub async fn push_configs(
        &self,
        tenant: &str,
        request: &ListTaskPushNotificationConfigsRequest,
    ) -> Result<ListTaskPushNotificationConfigsResponse, TaskError> {
        let push = self.push_for_task(tenant, &request.task_id).await?;
        let configs = push.store().push_configs(tenant, &request.task_id).await?;
        Ok(ListTaskPushNotificationConfigsResponse { configs, next_page_token: String::new() })
    }

    /// Deletes a webhook and its pending notifications; idempotent, as the spec requires.
    pub async fn delete_push_config(
        &self,
        tenant: &str,
        request: &TaskPushNotificationConfigRequest,
    ) -> Result<(), TaskError> {
        let push = self.push_for_task(tenant, &request.task_id).await?;
        push.store().delete_push_config(tenant, &request.task_id, &request.id).await
    }
}
