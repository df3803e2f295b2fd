//! The `call_agent` skill (seed 000's tool): any agent built on the kit can call another, by
//! name or by capability through the registry, with a message and an optional timeout, and get
//! its answer. It goes through the same [`MeshCaller`] path as every other agent-to-agent call
//! (the orchestrator's included), so the call context, deadlines, the bulkhead, retries and
//! circuit breakers apply.
//!
//! Every call carries seed 003's handoff context ([`Handoff`], in the task's metadata under
//! [`mesh_protocol::handoff::HANDOFF_METADATA_KEY`]): the one the calling agent received, with the
//! calling agent added to the prior agents and what the request adds (`handoff`: its output,
//! constraints), and the session (the conversation, else the correlation id) when none was
//! known. The callee's handler finds it on [`TaskInput::call`] ([`CallScope::handoff`]).
//!
//! Wrap a handler in [`WithCallAgent`] to offer it: a task whose data part holds
//! `"skill": "call_agent"` is a call request ([`CallAgentInput`]); any other task goes to the
//! wrapped handler.

use std::sync::Arc;

use mesh_client::{CallError, CallScope, CircuitReport, MeshCaller, Target};
use mesh_protocol::a2a::v1::AgentSkill;
use mesh_protocol::handoff::Handoff;
use mesh_protocol::seed::{Part, ResponseStatus, TaskRequest, TaskResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::{AgentHandler, AgentReply, TaskInput};
use crate::error::AgentError;

/// The skill's id, in cards and in the `skill` key of a task's data part.
pub const CALL_AGENT_SKILL_ID: &str = "call_agent";

/// The parameters of a `call_agent` request: exactly one of `agent_id` and `capability`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallAgentInput {
    /// Always `"call_agent"`.
    pub skill: String,
    /// The name the target agent is registered under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Any agent offering this capability (round-robin among the healthy ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    /// The text the target gets.
    pub message: String,
    /// A data part for the target, if any (which may itself be a `call_agent` request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Milliseconds the target gets (default 30000, at most 300000, never more than this call has left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// What the calling agent adds to the handoff context it passes on (seed 003).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Handoff>,
}

/// The skill as the card lists it.
pub fn call_agent_skill() -> AgentSkill {
    AgentSkill {
        id: CALL_AGENT_SKILL_ID.into(),
        name: "Call another agent".into(),
        description: "Sends a message to another agent of the mesh, by name (agent_id) or by capability, and \
                      answers with its reply. Data part: {\"skill\":\"call_agent\", \"agent_id\"|\"capability\", \
                      \"message\", \"data\"?, \"timeout_ms\"?, \"handoff\"?}."
            .into(),
        tags: vec!["mesh".into(), "delegation".into()],
        examples: Vec::new(),
        input_modes: Vec::new(),
        output_modes: Vec::new(),
        security_requirements: None,
        security: None,
    }
}

/// Calls the agent `input` names on behalf of the call `scope` handles, and returns its answer.
pub async fn call_agent(
    caller: &MeshCaller,
    scope: &CallScope,
    input: CallAgentInput,
) -> Result<TaskResponse, AgentError> {
    if input.skill != CALL_AGENT_SKILL_ID {
        return Err(AgentError::InvalidInput(format!("skill must be {CALL_AGENT_SKILL_ID:?}, not {:?}", input.skill)));
    }
    let target = match (input.agent_id, input.capability) {
        (Some(name), None) if !name.trim().is_empty() => Target::Agent(name),
        (None, Some(capability)) if !capability.trim().is_empty() => Target::capability(capability),
        _ => {
            return Err(AgentError::InvalidInput(
                "call_agent needs exactly one of agent_id and capability, not empty".into(),
            ));
        }
    };
    if input.message.trim().is_empty() {
        return Err(AgentError::InvalidInput("call_agent needs a message".into()));
    }
    let context = scope.context();
    let mut added = input.handoff.unwrap_or_default();
    added.session_id =
        added.session_id.or_else(|| context.context_id.clone()).or_else(|| context.correlation_id.clone());
    let handoff = scope.handoff().cloned().unwrap_or_default().passed_on(scope.agent(), added);
    let mut task = TaskRequest::from_text(None, input.message, input.data);
    handoff.write_metadata(&mut task.metadata);
    let answered = caller.call(scope, &target, &task, input.timeout_ms).await.map_err(AgentError::from)?;
    Ok(answered.response)
}

impl From<CallError> for AgentError {
    fn from(error: CallError) -> Self {
        AgentError::Call { code: error.error_code().to_owned(), message: error.to_string() }
    }
}

/// A handler that also answers `call_agent` requests.
#[derive(Debug)]
pub struct WithCallAgent<H> {
    inner: H,
    caller: Arc<MeshCaller>,
}

impl<H> WithCallAgent<H> {
    pub fn new(inner: H, caller: Arc<MeshCaller>) -> Self {
        Self { inner, caller }
    }
}

impl<H: AgentHandler> AgentHandler for WithCallAgent<H> {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        if task.data.get("skill").and_then(Value::as_str) != Some(CALL_AGENT_SKILL_ID) {
            return self.inner.handle(task).await;
        }
        let input: CallAgentInput = serde_json::from_value(Value::Object(task.data))
            .map_err(|e| AgentError::InvalidInput(format!("invalid call_agent request: {e}")))?;
        let response = call_agent(&self.caller, &task.call, input).await?;
        let mut warnings = response.warnings;
        if response.status == ResponseStatus::Partial && warnings.is_empty() {
            warnings.push("the called agent answered partially".into());
        }
        let parts: Vec<Part> = response.messages.into_iter().flat_map(|m| m.parts).collect();
        Ok(AgentReply { parts, warnings, confidence: response.confidence_level })
    }

    fn circuits(&self) -> Vec<CircuitReport> {
        self.caller.circuits()
    }
}
