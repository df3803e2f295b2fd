//! A2A 0.3 JSON, and conversions to and from the 1.0 model in [`super::v1`].
//!
//! 0.3 differs from 1.0 in spelling more than in meaning: objects carry a `"kind"` discriminator
//! (`"task"`, `"message"`, `"status-update"`, `"artifact-update"`, and `"text"` / `"data"` /
//! `"file"` on parts), states are kebab-case (`"input-required"`), roles lowercase, files nest
//! under `"file"`, and unions (task | message | event) are told apart by `kind` instead of by a
//! wrapping key. The server keeps one model (1.0) and renders 0.3 at the edge, so the
//! conversions are lossless wherever 0.3 can express the 1.0 value. What 0.3 cannot express:
//! - `filename` / `mediaType` on text and data parts are dropped;
//! - a non-object `data` value is wrapped as `{"value": ..}` with metadata
//!   `"data_part_compat": true` (the SDK's convention) and unwrapped on the way back;
//! - 0.3 `final` does not exist in 1.0: it is derived from the state (terminal or interrupted,
//!   the states at which a 1.0 stream closes);
//! - `tenant` has no 0.3 equivalent and is dropped.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::v1::{self, JsonObject};

/// Key the SDK puts in a 0.3 data part's metadata when it wrapped a non-object 1.0 `data` value.
pub const DATA_PART_COMPAT_KEY: &str = "data_part_compat";

/// `"kind": "task"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskKind {
    #[default]
    #[serde(rename = "task")]
    Task,
}

/// `"kind": "message"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MessageKind {
    #[default]
    #[serde(rename = "message")]
    Message,
}

/// `"kind": "status-update"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum StatusUpdateKind {
    #[default]
    #[serde(rename = "status-update")]
    StatusUpdate,
}

/// `"kind": "artifact-update"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArtifactUpdateKind {
    #[default]
    #[serde(rename = "artifact-update")]
    ArtifactUpdate,
}

/// Lifecycle state of a [`Task`], kebab-case on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Canceled,
    Failed,
    Rejected,
    AuthRequired,
    Unknown,
}

/// Sender of a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Agent,
}

/// Where a file part's content is: inline (base64) or behind a URI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileSource {
    Bytes(String),
    Uri(String),
}

/// The `file` object of a file part (0.3 `FileWithBytes` | `FileWithUri`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileContent {
    #[serde(flatten)]
    pub source: FileSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// One piece of content, discriminated by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Part {
    Text {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<JsonObject>,
    },
    /// 0.3 data is always a JSON object.
    Data {
        data: JsonObject,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<JsonObject>,
    },
    File {
        file: FileContent,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<JsonObject>,
    },
}

/// One unit of communication.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Tolerated when absent: the SDK accepts a message without `kind`.
    #[serde(default)]
    pub kind: MessageKind,
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub role: Role,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_task_ids: Option<Vec<String>>,
}

/// An output of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Vec<String>>,
}

/// Current status of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// The unit of work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    #[serde(default)]
    pub kind: TaskKind,
    pub id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Streaming event: the task's status changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    #[serde(default)]
    pub kind: StatusUpdateKind,
    pub task_id: String,
    pub context_id: String,
    pub status: TaskStatus,
    /// The last event of this stream.
    pub r#final: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Streaming event: an artifact was produced or extended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    #[serde(default)]
    pub kind: ArtifactUpdateKind,
    pub task_id: String,
    pub context_id: String,
    pub artifact: Artifact,
    /// `Option` because the SDK writes an explicit `false`, which must survive a round trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_chunk: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Result of `message/send`: a task or a message, told apart by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SendMessageResult {
    Task(Task),
    Message(Message),
}

/// One event of `message/stream` / `tasks/resubscribe`, told apart by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StreamEvent {
    Task(Task),
    Message(Message),
    StatusUpdate(TaskStatusUpdateEvent),
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// Credentials the agent presents to a push-notification webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushNotificationAuthenticationInfo {
    /// Accepted schemes; 1.0 keeps one.
    pub schemes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
}

/// A webhook the agent calls with task updates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushNotificationConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<PushNotificationAuthenticationInfo>,
}

/// How a `message/send` request wants to be served.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageSendConfiguration {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_output_modes: Vec<String>,
    /// Wait for a terminal or interrupted state; 1.0 inverts it as `returnImmediately`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notification_config: Option<PushNotificationConfig>,
}

/// Params of `message/send` and `message/stream`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageSendParams {
    pub message: Message,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<MessageSendConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Params of `tasks/get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskQueryParams {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Params of `tasks/cancel` and `tasks/resubscribe`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskIdParams {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Params and result of `tasks/pushNotificationConfig/set` and `get`: a webhook of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPushNotificationConfig {
    pub task_id: String,
    pub push_notification_config: PushNotificationConfig,
}

/// Params of `tasks/pushNotificationConfig/get` (without a config id: the one named as the task)
/// and `tasks/pushNotificationConfig/delete` (which needs one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushNotificationConfigParams {
    /// The task's id.
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notification_config_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// An entry of the 0.3 card's `additionalInterfaces`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    /// One of [`super::binding`].
    pub transport: String,
    pub url: String,
}

impl From<TaskState> for v1::TaskState {
    fn from(state: TaskState) -> Self {
        match state {
            TaskState::Submitted => Self::Submitted,
            TaskState::Working => Self::Working,
            TaskState::InputRequired => Self::InputRequired,
            TaskState::Completed => Self::Completed,
            TaskState::Canceled => Self::Canceled,
            TaskState::Failed => Self::Failed,
            TaskState::Rejected => Self::Rejected,
            TaskState::AuthRequired => Self::AuthRequired,
            TaskState::Unknown => Self::Unspecified,
        }
    }
}

impl From<v1::TaskState> for TaskState {
    fn from(state: v1::TaskState) -> Self {
        match state {
            v1::TaskState::Submitted => Self::Submitted,
            v1::TaskState::Working => Self::Working,
            v1::TaskState::InputRequired => Self::InputRequired,
            v1::TaskState::Completed => Self::Completed,
            v1::TaskState::Canceled => Self::Canceled,
            v1::TaskState::Failed => Self::Failed,
            v1::TaskState::Rejected => Self::Rejected,
            v1::TaskState::AuthRequired => Self::AuthRequired,
            v1::TaskState::Unspecified => Self::Unknown,
        }
    }
}

impl From<Role> for v1::Role {
    fn from(role: Role) -> Self {
        match role {
            Role::User => Self::User,
            Role::Agent => Self::Agent,
        }
    }
}

impl From<v1::Role> for Role {
    fn from(role: v1::Role) -> Self {
        match role {
            v1::Role::User => Self::User,
            v1::Role::Agent => Self::Agent,
        }
    }
}

/// 1.0 uses `""` and absence interchangeably for `filename` / `mediaType`; 0.3 gets absence.
fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|value| !value.is_empty())
}

impl From<Part> for v1::Part {
    fn from(part: Part) -> Self {
        let (content, metadata, filename, media_type) = match part {
            Part::Text { text, metadata } => (v1::PartContent::Text(text), metadata, None, None),
            Part::Data { data, metadata } => {
                let (data, metadata) = unwrap_compat_data(data, metadata);
                (v1::PartContent::Data(data), metadata, None, None)
            }
            Part::File { file, metadata } => {
                let content = match file.source {
                    FileSource::Bytes(bytes) => v1::PartContent::Raw(bytes),
                    FileSource::Uri(uri) => v1::PartContent::Url(uri),
                };
                (content, metadata, file.name, file.mime_type)
            }
        };
        Self { content, metadata, filename, media_type }
    }
}

/// Undoes the `{"value": ..}` wrapping of [`wrap_compat_data`] when the metadata flag says so.
fn unwrap_compat_data(mut data: JsonObject, metadata: Option<JsonObject>) -> (Value, Option<JsonObject>) {
    let Some(mut metadata) = metadata else {
        return (Value::Object(data), None);
    };
    if metadata.get(DATA_PART_COMPAT_KEY) != Some(&Value::Bool(true)) {
        return (Value::Object(data), Some(metadata));
    }
    metadata.remove(DATA_PART_COMPAT_KEY);
    let value = data.remove("value").unwrap_or(Value::Null);
    (value, Some(metadata).filter(|metadata| !metadata.is_empty()))
}

/// 0.3 data must be an object: anything else is wrapped and flagged so it can be unwrapped.
fn wrap_compat_data(data: Value, metadata: Option<JsonObject>) -> (JsonObject, Option<JsonObject>) {
    match data {
        Value::Object(object) => (object, metadata),
        other => {
            let mut metadata = metadata.unwrap_or_default();
            metadata.insert(DATA_PART_COMPAT_KEY.to_owned(), Value::Bool(true));
            (JsonObject::from_iter([("value".to_owned(), other)]), Some(metadata))
        }
    }
}

impl From<v1::Part> for Part {
    fn from(part: v1::Part) -> Self {
        let metadata = part.metadata;
        let source = match part.content {
            v1::PartContent::Text(text) => return Self::Text { text, metadata },
            v1::PartContent::Data(data) => {
                let (data, metadata) = wrap_compat_data(data, metadata);
                return Self::Data { data, metadata };
            }
            v1::PartContent::Raw(bytes) => FileSource::Bytes(bytes),
            v1::PartContent::Url(uri) => FileSource::Uri(uri),
        };
        Self::File {
            file: FileContent { source, name: non_empty(part.filename), mime_type: non_empty(part.media_type) },
            metadata,
        }
    }
}

fn convert_all<T: Into<U>, U>(items: Vec<T>) -> Vec<U> {
    items.into_iter().map(Into::into).collect()
}

impl From<Message> for v1::Message {
    fn from(message: Message) -> Self {
        Self {
            message_id: message.message_id,
            context_id: message.context_id,
            task_id: message.task_id,
            role: message.role.into(),
            parts: convert_all(message.parts),
            metadata: message.metadata,
            extensions: message.extensions,
            reference_task_ids: message.reference_task_ids,
        }
    }
}

impl From<v1::Message> for Message {
    fn from(message: v1::Message) -> Self {
        Self {
            kind: MessageKind::Message,
            message_id: message.message_id,
            context_id: message.context_id,
            task_id: message.task_id,
            role: message.role.into(),
            parts: convert_all(message.parts),
            metadata: message.metadata,
            extensions: message.extensions,
            reference_task_ids: message.reference_task_ids,
        }
    }
}

impl From<Artifact> for v1::Artifact {
    fn from(artifact: Artifact) -> Self {
        Self {
            artifact_id: artifact.artifact_id,
            name: artifact.name,
            description: artifact.description,
            parts: convert_all(artifact.parts),
            metadata: artifact.metadata,
            extensions: artifact.extensions,
        }
    }
}

impl From<v1::Artifact> for Artifact {
    fn from(artifact: v1::Artifact) -> Self {
        Self {
            artifact_id: artifact.artifact_id,
            name: artifact.name,
            description: artifact.description,
            parts: convert_all(artifact.parts),
            metadata: artifact.metadata,
            extensions: artifact.extensions,
        }
    }
}

impl From<TaskStatus> for v1::TaskStatus {
    fn from(status: TaskStatus) -> Self {
        Self { state: status.state.into(), message: status.message.map(Into::into), timestamp: status.timestamp }
    }
}

impl From<v1::TaskStatus> for TaskStatus {
    fn from(status: v1::TaskStatus) -> Self {
        Self { state: status.state.into(), message: status.message.map(Into::into), timestamp: status.timestamp }
    }
}

impl From<Task> for v1::Task {
    fn from(task: Task) -> Self {
        Self {
            id: task.id,
            context_id: task.context_id,
            status: task.status.into(),
            artifacts: convert_all(task.artifacts),
            history: convert_all(task.history),
            metadata: task.metadata,
        }
    }
}

impl From<v1::Task> for Task {
    fn from(task: v1::Task) -> Self {
        Self {
            kind: TaskKind::Task,
            id: task.id,
            context_id: task.context_id,
            status: task.status.into(),
            artifacts: convert_all(task.artifacts),
            history: convert_all(task.history),
            metadata: task.metadata,
        }
    }
}

impl From<TaskStatusUpdateEvent> for v1::TaskStatusUpdateEvent {
    fn from(event: TaskStatusUpdateEvent) -> Self {
        Self {
            task_id: event.task_id,
            context_id: event.context_id,
            status: event.status.into(),
            metadata: event.metadata,
        }
    }
}

impl From<v1::TaskStatusUpdateEvent> for TaskStatusUpdateEvent {
    fn from(event: v1::TaskStatusUpdateEvent) -> Self {
        let state = event.status.state;
        Self {
            kind: StatusUpdateKind::StatusUpdate,
            task_id: event.task_id,
            context_id: event.context_id,
            status: event.status.into(),
            r#final: state.is_terminal() || state.is_interrupted(),
            metadata: event.metadata,
        }
    }
}

impl From<TaskArtifactUpdateEvent> for v1::TaskArtifactUpdateEvent {
    fn from(event: TaskArtifactUpdateEvent) -> Self {
        Self {
            task_id: event.task_id,
            context_id: event.context_id,
            artifact: event.artifact.into(),
            append: event.append.unwrap_or(false),
            last_chunk: event.last_chunk.unwrap_or(false),
            metadata: event.metadata,
        }
    }
}

impl From<v1::TaskArtifactUpdateEvent> for TaskArtifactUpdateEvent {
    /// Writes `append` / `lastChunk` explicitly, as the SDK's 0.3 handler does.
    fn from(event: v1::TaskArtifactUpdateEvent) -> Self {
        Self {
            kind: ArtifactUpdateKind::ArtifactUpdate,
            task_id: event.task_id,
            context_id: event.context_id,
            artifact: event.artifact.into(),
            append: Some(event.append),
            last_chunk: Some(event.last_chunk),
            metadata: event.metadata,
        }
    }
}

impl From<SendMessageResult> for v1::SendMessageResponse {
    fn from(result: SendMessageResult) -> Self {
        match result {
            SendMessageResult::Task(task) => Self::Task(task.into()),
            SendMessageResult::Message(message) => Self::Message(message.into()),
        }
    }
}

impl From<v1::SendMessageResponse> for SendMessageResult {
    fn from(response: v1::SendMessageResponse) -> Self {
        match response {
            v1::SendMessageResponse::Task(task) => Self::Task(task.into()),
            v1::SendMessageResponse::Message(message) => Self::Message(message.into()),
        }
    }
}

impl From<StreamEvent> for v1::StreamResponse {
    fn from(event: StreamEvent) -> Self {
        match event {
            StreamEvent::Task(task) => Self::Task(task.into()),
            StreamEvent::Message(message) => Self::Message(message.into()),
            StreamEvent::StatusUpdate(update) => Self::StatusUpdate(update.into()),
            StreamEvent::ArtifactUpdate(update) => Self::ArtifactUpdate(update.into()),
        }
    }
}

impl From<v1::StreamResponse> for StreamEvent {
    fn from(response: v1::StreamResponse) -> Self {
        match response {
            v1::StreamResponse::Task(task) => Self::Task(task.into()),
            v1::StreamResponse::Message(message) => Self::Message(message.into()),
            v1::StreamResponse::StatusUpdate(update) => Self::StatusUpdate(update.into()),
            v1::StreamResponse::ArtifactUpdate(update) => Self::ArtifactUpdate(update.into()),
        }
    }
}

impl From<PushNotificationConfig> for v1::TaskPushNotificationConfig {
    /// Keeps the first of the 0.3 `schemes`, as 1.0 names a single scheme.
    fn from(config: PushNotificationConfig) -> Self {
        Self {
            tenant: None,
            id: config.id,
            task_id: None,
            url: config.url,
            token: config.token,
            authentication: config.authentication.and_then(|auth| {
                let scheme = auth.schemes.into_iter().next()?;
                Some(v1::AuthenticationInfo { scheme, credentials: auth.credentials })
            }),
        }
    }
}

impl From<v1::TaskPushNotificationConfig> for PushNotificationConfig {
    fn from(config: v1::TaskPushNotificationConfig) -> Self {
        Self {
            id: config.id,
            url: config.url,
            token: config.token,
            authentication: config.authentication.map(|auth| PushNotificationAuthenticationInfo {
                schemes: vec![auth.scheme],
                credentials: auth.credentials,
            }),
        }
    }
}

impl From<TaskPushNotificationConfig> for v1::TaskPushNotificationConfig {
    fn from(config: TaskPushNotificationConfig) -> Self {
        Self { task_id: Some(config.task_id), ..config.push_notification_config.into() }
    }
}

impl From<v1::TaskPushNotificationConfig> for TaskPushNotificationConfig {
    fn from(config: v1::TaskPushNotificationConfig) -> Self {
        Self { task_id: config.task_id.clone().unwrap_or_default(), push_notification_config: config.into() }
    }
}

impl From<MessageSendConfiguration> for v1::SendMessageConfiguration {
    fn from(config: MessageSendConfiguration) -> Self {
        Self {
            accepted_output_modes: config.accepted_output_modes,
            task_push_notification_config: config.push_notification_config.map(Into::into),
            history_length: unlimited_when_zero(config.history_length),
            return_immediately: config.blocking == Some(false),
        }
    }
}

impl From<v1::SendMessageConfiguration> for MessageSendConfiguration {
    fn from(config: v1::SendMessageConfiguration) -> Self {
        Self {
            accepted_output_modes: config.accepted_output_modes,
            blocking: Some(!config.return_immediately),
            history_length: config.history_length,
            push_notification_config: config.task_push_notification_config.map(Into::into),
        }
    }
}

impl From<MessageSendParams> for v1::SendMessageRequest {
    fn from(params: MessageSendParams) -> Self {
        Self {
            tenant: None,
            message: params.message.into(),
            configuration: params.configuration.map(Into::into),
            metadata: params.metadata,
        }
    }
}

impl From<v1::SendMessageRequest> for MessageSendParams {
    fn from(request: v1::SendMessageRequest) -> Self {
        Self {
            message: request.message.into(),
            configuration: request.configuration.map(Into::into),
            metadata: request.metadata,
        }
    }
}

impl From<TaskQueryParams> for v1::GetTaskRequest {
    /// Drops `metadata`, which 1.0 `GetTask` does not have.
    fn from(params: TaskQueryParams) -> Self {
        Self { tenant: None, id: params.id, history_length: unlimited_when_zero(params.history_length) }
    }
}

/// A 0.3 `historyLength` of 0 means no limit (as the 0.3 SDKs read it), where 1.0's means none.
fn unlimited_when_zero(history_length: Option<i32>) -> Option<i32> {
    history_length.filter(|&n| n != 0)
}

impl From<TaskIdParams> for v1::CancelTaskRequest {
    fn from(params: TaskIdParams) -> Self {
        Self { tenant: None, id: params.id, metadata: params.metadata }
    }
}

impl From<TaskIdParams> for v1::SubscribeToTaskRequest {
    /// Drops `metadata`, which 1.0 `SubscribeToTask` does not have.
    fn from(params: TaskIdParams) -> Self {
        Self { tenant: None, id: params.id }
    }
}
