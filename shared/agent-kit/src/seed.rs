//! The seed task format and the A2A task model meet here: an [`AgentHandler`] (which answers a
//! seed task) runs as a [`TaskHandler`], and a seed `POST /tasks/send` call is recorded as an
//! A2A task, so both land in one task model and one store.

use std::sync::Arc;

use mesh_bus::{ConversationJoin, JoinedTurn};
use mesh_protocol::a2a::v1::{self, Artifact, JsonObject, Task, TaskState, TaskStatus};
use mesh_protocol::graph::OutcomeStatus;
use mesh_protocol::handoff::Handoff;
use mesh_protocol::seed::{self, ResponseStatus};
use serde_json::{Value, json};

use crate::agent::{AgentHandler, AgentReply, TaskInput};
use mesh_a2a_server::{TaskEvents, TaskHandler, Turn};
use mesh_server::ErrorResponse;

use crate::error::AgentError;
use crate::graph::{AgentGraph, inbound_link, receipt_of};

/// Name of the artifact holding a seed handler's reply.
const REPLY_ARTIFACT_NAME: &str = "result";

/// Runs a seed [`AgentHandler`] as an A2A task handler: the message's text and data become the
/// task input, the reply one artifact, and a handler error a failed task whose status message
/// carries the mesh error body.
#[derive(Debug)]
pub struct SeedTasks<H> {
    handler: Arc<H>,
    /// With the conversation bus: turns whose `contextId` is a conversation on the agent's topic
    /// take their history from it and are written to it.
    join: Option<ConversationJoin>,
    /// With a registry: a processed link message is reported to it.
    graph: Option<Arc<AgentGraph>>,
}

impl<H> SeedTasks<H> {
    pub fn new(handler: Arc<H>, join: Option<ConversationJoin>, graph: Option<Arc<AgentGraph>>) -> Self {
        Self { handler, join, graph }
    }
}

/// The sender of an HTTP turn in a bus conversation when no agent called: an A2A client.
pub const A2A_CLIENT_SENDER: &str = "a2a-client";

impl<H: AgentHandler> TaskHandler for SeedTasks<H> {
    async fn run(&self, turn: Turn, events: TaskEvents) {
        if events.status(TaskState::Working, None).await.is_err() {
            return;
        }
        let no_metadata = JsonObject::new();
        // Seed 003's handoff, in the message's metadata: malformed is refused before the
        // message joins any conversation, oversized trimmed.
        let handoff = match Handoff::from_metadata(turn.message.metadata.as_ref().unwrap_or(&no_metadata)) {
            Ok(handoff) => handoff,
            Err(error) => return fail(&events, AgentError::InvalidInput(error.to_string())).await,
        };
        let joined = match self.joined_turn(&turn).await {
            Ok(joined) => joined,
            Err(error) => {
                let error =
                    AgentError::Unavailable(format!("the conversation {} is unavailable: {error}", turn.context_id));
                return fail(&events, error).await;
            }
        };
        let messages = match &joined {
            Some(joined) => joined.messages.iter().cloned().map(crate::bus::seed_message).collect(),
            None => {
                let mut history = turn.previous.map(|task| task.history).unwrap_or_default();
                history.push(turn.message.clone());
                history.iter().map(seed_message).collect()
            }
        };
        let link = inbound_link(&turn.message, &turn.call);
        let receiver = turn.call.agent().to_owned();
        let input = TaskInput {
            task_id: turn.task_id,
            request_id: None,
            text: text_of(&turn.message.parts),
            data: data_of(&turn.message.parts),
            messages,
            link: link.clone(),
            call: turn.call.with_handoff(handoff),
        };
        let outcome = tokio::select! {
            outcome = self.handler.handle(input) => outcome,
            // Canceled: the task is already marked so; stop working on it.
            () = turn.cancellation.cancelled() => return,
        };
        if let (Some(graph), Some(link)) = (&self.graph, &link) {
            let status = match &outcome {
                Ok(_) => OutcomeStatus::Success,
                Err(AgentError::Timeout(_)) => OutcomeStatus::Timeout,
                Err(_) => OutcomeStatus::Error,
            };
            let receipt = receipt_of(link, &receiver, &turn.message.message_id, events.task_id(), &turn.tenant, status);
            graph.report_receipt(link, receipt);
        }
        if let (Some(join), Some(joined)) = (&self.join, &joined) {
            // The answer joins the conversation as a bus answer would: a failure is an answer too.
            let text = match &outcome {
                Ok(reply) => crate::bus::plain_text(&reply.parts, &reply.warnings),
                Err(error) => format!("error: {error}"),
            };
            if let Err(error) = join.finish(joined, &text).await {
                let error = AgentError::Unavailable(format!(
                    "the answer could not be written to the conversation {}: {error}",
                    joined.conversation_id()
                ));
                return fail(&events, error).await;
            }
        }
        match outcome {
            Ok(reply) => {
                if events.artifact(reply_artifact(&reply, events.task_id()), false, true).await.is_ok() {
                    let _ = events.status(TaskState::Completed, None).await;
                }
            }
            Err(error) => fail(&events, error).await,
        }
    }
}

impl<H> SeedTasks<H> {
    /// The turn in the bus conversation the message's `contextId` names, when it names one.
    async fn joined_turn(&self, turn: &Turn) -> Result<Option<JoinedTurn>, mesh_bus::BusError> {
        let Some(join) = &self.join else { return Ok(None) };
        let sender = turn.call.context().chain.last().map_or(A2A_CLIENT_SENDER, String::as_str);
        let text = crate::bus::plain_text(&turn.message.parts.iter().filter_map(seed_part).collect::<Vec<_>>(), &[]);
        join.begin(&turn.tenant, &turn.context_id, sender, &turn.message.message_id, &text).await
    }
}

/// Fails the task with the mesh error body in its status message.
async fn fail(events: &TaskEvents, error: AgentError) {
    let body = ErrorResponse::from(error).body;
    let mut message = events.agent_message(&body.error_message);
    message.parts.push(v1::Part::data(json!(body)));
    let _ = events.status_with(TaskState::Failed, Some(message)).await;
}

/// Text parts joined by newlines.
fn text_of(parts: &[v1::Part]) -> String {
    parts.iter().filter_map(v1::Part::as_text).collect::<Vec<_>>().join("\n")
}

/// Data parts that are JSON objects, merged (later keys win).
fn data_of(parts: &[v1::Part]) -> serde_json::Map<String, Value> {
    parts.iter().filter_map(|p| p.as_data().and_then(Value::as_object)).flat_map(|o| o.clone()).collect()
}

fn seed_message(message: &v1::Message) -> seed::Message {
    let role = match message.role {
        v1::Role::User => seed::Role::User,
        v1::Role::Agent => seed::Role::Agent,
    };
    seed::Message { role, parts: message.parts.iter().filter_map(seed_part).collect() }
}

fn seed_part(part: &v1::Part) -> Option<seed::Part> {
    match (part.as_text(), part.as_data()) {
        (Some(text), _) => Some(seed::Part::Text { text: text.to_owned() }),
        (_, Some(data)) => Some(seed::Part::Data { data: data.clone() }),
        // Files have no seed form; seed handlers never asked for them.
        _ => None,
    }
}

fn a2a_part(part: &seed::Part) -> v1::Part {
    match part {
        seed::Part::Text { text } => v1::Part::text(text.clone()),
        seed::Part::Data { data } => v1::Part::data(data.clone()),
    }
}

/// The reply as an artifact; a partial reply says so in the artifact's metadata (seed 003).
fn reply_artifact(reply: &AgentReply, task_id: &str) -> Artifact {
    let metadata = (!reply.warnings.is_empty()).then(|| {
        let mut metadata = JsonObject::new();
        metadata.insert("status".into(), json!(ResponseStatus::Partial));
        metadata.insert("warnings".into(), json!(reply.warnings));
        metadata
    });
    Artifact {
        artifact_id: format!("{task_id}-{REPLY_ARTIFACT_NAME}"),
        name: Some(REPLY_ARTIFACT_NAME.to_owned()),
        description: None,
        parts: reply.parts.iter().map(a2a_part).collect(),
        metadata,
        extensions: None,
    }
}

/// A seed call as an A2A task in the conversation `context_id`: the request's messages as
/// history, then the reply as an artifact (completed) or the error body in the status message
/// (failed); `working` while there is no outcome yet.
pub(crate) fn seed_task(
    task_id: &str,
    context_id: &str,
    messages: &[seed::Message],
    outcome: Option<Result<&AgentReply, &ErrorResponse>>,
) -> Task {
    let context_id = context_id.to_owned();
    let history = messages
        .iter()
        .map(|message| {
            let role = match message.role {
                seed::Role::User | seed::Role::System => v1::Role::User,
                seed::Role::Agent | seed::Role::Assistant => v1::Role::Agent,
            };
            let mut a2a = v1::Message::text(role, uuid::Uuid::new_v4().to_string(), "");
            a2a.parts = message.parts.iter().map(a2a_part).collect();
            a2a.task_id = Some(task_id.to_owned());
            a2a.context_id = Some(context_id.clone());
            a2a
        })
        .collect();
    let (state, artifacts, message) = match outcome {
        None => (TaskState::Working, Vec::new(), None),
        Some(Ok(reply)) => (TaskState::Completed, vec![reply_artifact(reply, task_id)], None),
        Some(Err(error)) => {
            let mut message =
                v1::Message::text(v1::Role::Agent, uuid::Uuid::new_v4().to_string(), &error.body.error_message);
            message.parts.push(v1::Part::data(json!(error.body)));
            (TaskState::Failed, Vec::new(), Some(message))
        }
    };
    Task {
        id: task_id.to_owned(),
        context_id,
        status: TaskStatus { state, message, timestamp: Some(mesh_tasks::model::now_timestamp()) },
        artifacts,
        history,
        metadata: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_parts_become_task_input() {
        let parts = vec![
            v1::Part::text("robots"),
            v1::Part::data(json!({"top_k": 5})),
            v1::Part::text("soccer"),
            v1::Part::data(json!({"top_k": 3, "modality": "video"})),
        ];
        assert_eq!(text_of(&parts), "robots\nsoccer");
        assert_eq!(Value::Object(data_of(&parts)), json!({"top_k": 3, "modality": "video"}));
    }

    #[test]
    fn a_partial_reply_is_marked_on_its_artifact() {
        let reply = AgentReply { warnings: vec!["planner down".into()], ..AgentReply::data(json!({"a": 1})) };
        let artifact = reply_artifact(&reply, "t1");
        let metadata = Value::Object(artifact.metadata.unwrap());
        assert_eq!(metadata, json!({"status": "PARTIAL", "warnings": ["planner down"]}));
        assert!(reply_artifact(&AgentReply::data(json!(1)), "t1").metadata.is_none());
    }

    #[test]
    fn a_failed_seed_call_keeps_its_error_body() {
        let error = ErrorResponse::new(axum::http::StatusCode::BAD_REQUEST, "TASK_INVALID", "no query");
        let messages = [seed::Message { role: seed::Role::User, parts: vec![seed::Part::Text { text: "q".into() }] }];
        let task = seed_task("t9", "link:l1", &messages, Some(Err(&error)));
        assert_eq!(task.context_id, "link:l1");
        assert_eq!(task.status.state, TaskState::Failed);
        let message = task.status.message.unwrap();
        assert_eq!(message.parts[0].as_text(), Some("no query"));
        assert_eq!(message.parts[1].as_data().unwrap()["error_code"], "TASK_INVALID");
        assert_eq!(task.history[0].task_id.as_deref(), Some("t9"));
    }
}
