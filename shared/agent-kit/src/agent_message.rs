//! The `send_agent_message` skill (seed 004's tool): an agent sends a message to another over
//! the link between them, into the link's conversation.
//!
//! It resolves the target by its registered name, finds the link in the agent's link cache,
//! checks it (the link must be enabled; when the graph is enforced, it must also allow this
//! direction — or the message must answer inside a conversation the target started over a
//! `one_way` link), then sends an A2A message through the agent's [`MeshCaller`] (so the call
//! context, the caller-side policy check, retries and call reports apply) with `contextId`
//! `link:{link_id}` and the seed's `InboundMessage` metadata (`link_id`, `from_agent_id`,
//! `relationship`: the sender's relationship to the receiver). The receiving agent's task store
//! keeps it as a task in that conversation, and its handler sees the link context
//! ([`crate::TaskInput::link`]). Finally the sender records it, with the answer, at the registry
//! (`POST /api/links/{id}/messages`), which keeps each link's history.
//!
//! Wrap a handler in [`WithAgentMessages`] to offer it: a task whose data part holds
//! `"skill": "send_agent_message"` is a message to send ([`SendAgentMessageInput`]).

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use mesh_client::{CallError, CallScope, CircuitReport, ClientError, MeshCaller, Target};
use mesh_graph::{Denial, LinkContext};
use mesh_protocol::a2a::v1::{AgentSkill, Message, Part, Role, SendMessageRequest, SendMessageResponse, TaskState};
use mesh_protocol::graph::{LinkRelationship, NewLinkMessage, OutcomeStatus};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::{AgentHandler, AgentReply, TaskInput};
use crate::error::AgentError;
use crate::graph::AgentGraph;

/// The skill's id, in cards and in the `skill` key of a task's data part.
pub const SEND_AGENT_MESSAGE_SKILL_ID: &str = "send_agent_message";
/// Attempts to record a sent message (or a receipt) at the registry, the first included.
const RECORD_ATTEMPTS_MAX: usize = 3;
/// First wait before recording again; it doubles each time, with jitter.
const RECORD_RETRY_DELAY_MIN_MS: u64 = 100;
const RECORD_RETRY_DELAY_MAX_MS: u64 = 1_000;

/// The parameters of a `send_agent_message` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendAgentMessageInput {
    /// Always `"send_agent_message"`.
    pub skill: String,
    /// The name the receiving agent is registered under.
    pub target: String,
    /// The message's text.
    pub message: String,
    /// Milliseconds the receiver gets to answer (default 30000, at most 300000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// What the skill answers: where the message went and how the receiver took it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentAgentMessage {
    pub link_id: String,
    pub context_id: String,
    pub to_agent_id: String,
    /// The sender's relationship to the receiver.
    pub relationship: LinkRelationship,
    /// The receiver's task, when it answered with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The receiver's answer, as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    pub status: OutcomeStatus,
    /// The message's id in the link's history at the registry; absent when it could not be recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

/// The skill as the card lists it.
pub fn send_agent_message_skill() -> AgentSkill {
    AgentSkill {
        id: SEND_AGENT_MESSAGE_SKILL_ID.into(),
        name: "Message a linked agent".into(),
        description: "Sends a message to another agent over the link between them, into the link's conversation \
                      (contextId link:{link_id}), and answers with the receiver's reply. Data part: \
                      {\"skill\":\"send_agent_message\", \"target\", \"message\", \"timeout_ms\"?}."
            .into(),
        tags: vec!["mesh".into(), "links".into()],
        examples: Vec::new(),
        input_modes: Vec::new(),
        output_modes: Vec::new(),
        security_requirements: None,
        security: None,
    }
}

/// Sends `input` on behalf of the call `scope` handles, over the link the graph knows between
/// this agent and the target, and records it at the registry.
pub async fn send_agent_message(
    caller: &MeshCaller,
    graph: &AgentGraph,
    scope: &CallScope,
    input: SendAgentMessageInput,
) -> Result<SentAgentMessage, AgentError> {
    if input.skill != SEND_AGENT_MESSAGE_SKILL_ID {
        return Err(AgentError::InvalidInput(format!(
            "skill must be {SEND_AGENT_MESSAGE_SKILL_ID:?}, not {:?}",
            input.skill
        )));
    }
    if input.target.trim().is_empty() || input.message.trim().is_empty() {
        return Err(AgentError::InvalidInput("send_agent_message needs a target and a message".into()));
    }
    let me = scope.agent();
    let policy = graph.links().policy();
    let link = policy.link_for(me, &input.target).ok_or_else(|| AgentError::Call {
        code: "LINK_NOT_FOUND".into(),
        message: format!("no link joins {me} and {}", input.target),
    })?;
    if !link.enabled {
        return Err(AgentError::Call {
            code: Denial::ERROR_CODE.into(),
            message: format!("no enabled link lets {me} call {} (link {} is disabled)", input.target, link.id),
        });
    }
    let sender = LinkContext::of_sender(link, me)
        .ok_or_else(|| AgentError::Internal(format!("link {} does not join {me}", link.id)))?;
    let context_id = sender.context_id();
    let mut message = Message::text(Role::User, uuid::Uuid::new_v4().to_string(), input.message.clone());
    message.context_id = Some(context_id.clone());
    let mut metadata = serde_json::Map::new();
    sender.write_metadata(&mut metadata);
    message.metadata = Some(metadata);
    let request = SendMessageRequest { tenant: None, message, configuration: None, metadata: None };
    // The caller checks the link again (in enforced mode) before anything leaves.
    let target = Target::Agent(input.target.clone());
    let (task_id, reply, status) = match caller.send_message(scope, &target, &request, input.timeout_ms).await {
        Ok(answered) => answer_of(&answered.response),
        Err(error @ CallError::Failed { attempts: 1.., .. }) => {
            let status = if error.is_timeout() { OutcomeStatus::Timeout } else { OutcomeStatus::Error };
            (None, Some(error.to_string()), status)
        }
        // Refused before sending: nothing went over the link, so nothing is recorded.
        Err(error) => return Err(error.into()),
    };
    let record = NewLinkMessage {
        from_agent_id: me.to_owned(),
        to_agent_id: input.target.clone(),
        context_id: context_id.clone(),
        task_id: task_id.clone(),
        text: input.message,
        reply: reply.clone(),
        status,
        // The history is the tenant's whose call this is: its users, and no other tenant's, read it.
        tenant: scope.context().tenant.clone(),
    };
    let recorded = record_message(graph, &sender.link_id, &record).await;
    Ok(SentAgentMessage {
        link_id: sender.link_id,
        context_id,
        to_agent_id: input.target,
        relationship: sender.relationship,
        task_id,
        reply,
        status,
        message_id: recorded.map(|message| message.id),
    })
}

/// Records the message at the registry, retrying what time can fix; `None` when it could not.
async fn record_message(
    graph: &AgentGraph,
    link_id: &str,
    record: &NewLinkMessage,
) -> Option<mesh_protocol::graph::LinkMessage> {
    let registry = graph.registry();
    at_registry(link_id, "the registry did not record the agent message", || {
        registry.record_link_message(link_id, record)
    })
    .await
}

/// Runs `call` at the registry, retrying what time can fix (no answer, 5xx, 429) with backoff;
/// `None`, logged with `failure`, when it could not.
pub(crate) async fn at_registry<T, F, Fut>(link_id: &str, failure: &str, call: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(RECORD_RETRY_DELAY_MIN_MS))
        .with_max_delay(Duration::from_millis(RECORD_RETRY_DELAY_MAX_MS))
        .with_jitter()
        .with_max_times(RECORD_ATTEMPTS_MAX - 1);
    call.retry(backoff)
        .when(|error| match error {
            ClientError::Transport { .. } => true,
            ClientError::Status { status, .. } => *status >= 500 || *status == 429,
            ClientError::Decode { .. } | ClientError::InvalidUrl { .. } | ClientError::InvalidCredential => false,
        })
        .await
        .inspect_err(|error| tracing::warn!(link = link_id, %error, "{failure}"))
        .ok()
}

/// The receiver's task id, its answer as text, and how it ended.
fn answer_of(response: &SendMessageResponse) -> (Option<String>, Option<String>, OutcomeStatus) {
    match response {
        SendMessageResponse::Message(message) => (None, text_of(&message.parts), OutcomeStatus::Success),
        SendMessageResponse::Task(task) => {
            let status = match task.status.state {
                TaskState::Completed => OutcomeStatus::Success,
                TaskState::Failed | TaskState::Rejected | TaskState::Canceled => OutcomeStatus::Error,
                _ => OutcomeStatus::Partial,
            };
            let parts: Vec<Part> = task
                .artifacts
                .iter()
                .flat_map(|a| a.parts.iter().cloned())
                .chain(task.status.message.iter().flat_map(|m| m.parts.iter().cloned()))
                .collect();
            (Some(task.id.clone()), text_of(&parts), status)
        }
    }
}

/// Text parts as they are and data parts as JSON, one per line; `None` when there are none.
fn text_of(parts: &[Part]) -> Option<String> {
    let lines: Vec<String> = parts
        .iter()
        .filter_map(|part| part.as_text().map(str::to_owned).or_else(|| part.as_data().map(Value::to_string)))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// A handler that also sends `send_agent_message` requests.
#[derive(Debug)]
pub struct WithAgentMessages<H> {
    inner: H,
    caller: Arc<MeshCaller>,
    graph: Arc<AgentGraph>,
}

impl<H> WithAgentMessages<H> {
    /// `caller` should be `graph`'s ([`AgentGraph::caller`]), so the message is checked and reported.
    pub fn new(inner: H, caller: Arc<MeshCaller>, graph: Arc<AgentGraph>) -> Self {
        Self { inner, caller, graph }
    }
}

impl<H: AgentHandler> AgentHandler for WithAgentMessages<H> {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        if task.data.get("skill").and_then(Value::as_str) != Some(SEND_AGENT_MESSAGE_SKILL_ID) {
            return self.inner.handle(task).await;
        }
        let input: SendAgentMessageInput = serde_json::from_value(Value::Object(task.data))
            .map_err(|e| AgentError::InvalidInput(format!("invalid send_agent_message request: {e}")))?;
        let sent = send_agent_message(&self.caller, &self.graph, &task.call, input).await?;
        let mut warnings = Vec::new();
        if sent.status != OutcomeStatus::Success {
            warnings.push(format!("the message was delivered but ended {}", sent.status.as_str()));
        }
        if sent.message_id.is_none() {
            warnings.push("the registry did not record the message in the link's history".into());
        }
        let data = serde_json::to_value(&sent).map_err(|e| AgentError::Internal(e.to_string()))?;
        Ok(AgentReply { warnings, ..AgentReply::data(data) })
    }

    fn circuits(&self) -> Vec<CircuitReport> {
        self.inner.circuits()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use mesh_client::TransportError;
    use mesh_protocol::a2a::v1::{Artifact, Task, TaskStatus};
    use serde_json::json;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_registry_is_asked_again_only_for_what_time_can_fix_and_at_most_so_often() {
        fn status(status: u16) -> ClientError {
            ClientError::Status { url: "http://registry/links".into(), status, body: None }
        }
        fn unreachable() -> ClientError {
            let source = TransportError::Connect("connection refused".into());
            ClientError::Transport { url: "http://registry/links".into(), source }
        }
        /// Makes the failure the registry answers each time it is asked.
        type Failure = fn() -> ClientError;
        let cases: [(&str, Failure, usize); 4] = [
            ("503", || status(503), RECORD_ATTEMPTS_MAX),
            ("429", || status(429), RECORD_ATTEMPTS_MAX),
            ("no answer", unreachable, RECORD_ATTEMPTS_MAX),
            ("400", || status(400), 1),
        ];
        for (what, error, asked) in cases {
            let calls = AtomicUsize::new(0);
            let answer: Option<()> = at_registry("l1", "not recorded", || {
                calls.fetch_add(1, Ordering::SeqCst);
                std::future::ready(Err(error()))
            })
            .await;
            assert_eq!((answer, calls.load(Ordering::SeqCst)), (None, asked), "{what}");
        }
        // An answer after a failure is the answer.
        let calls = AtomicUsize::new(0);
        let answer = at_registry("l1", "not recorded", || {
            let call = calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(if call == 0 { Err(status(502)) } else { Ok(call) })
        })
        .await;
        assert_eq!(answer, Some(1));
    }

    #[test]
    fn an_answer_reads_as_text_with_its_outcome() {
        let mut task = Task {
            id: "t1".into(),
            context_id: "link:l1".into(),
            status: TaskStatus { state: TaskState::Completed, message: None, timestamp: None },
            artifacts: vec![Artifact {
                artifact_id: "a".into(),
                name: None,
                description: None,
                parts: vec![Part::text("on it"), Part::data(json!({"eta_s": 5}))],
                metadata: None,
                extensions: None,
            }],
            history: Vec::new(),
            metadata: None,
        };
        let answer = answer_of(&SendMessageResponse::Task(task.clone()));
        assert_eq!(answer, (Some("t1".into()), Some("on it\n{\"eta_s\":5}".into()), OutcomeStatus::Success));
        task.status.state = TaskState::Failed;
        task.artifacts.clear();
        assert_eq!(answer_of(&SendMessageResponse::Task(task)), (Some("t1".into()), None, OutcomeStatus::Error));
        let message = Message::text(Role::Agent, "m", "hi");
        assert_eq!(
            answer_of(&SendMessageResponse::Message(message)),
            (None, Some("hi".into()), OutcomeStatus::Success)
        );
    }
}
