//! The mesh's own tools: `call_agent` (seed 000), `list_agents` and `send_agent_message` (seed
//! 004). They go through the agent's [`MeshCaller`] (the kit's `call_agent` and
//! `send_agent_message`), so the call chain, the depth limit, cycle refusal, deadlines, circuit
//! breakers and the link policy hold for a model exactly as for any agent; a refusal comes back
//! as a tool error saying what happened.

use std::sync::Arc;

use mesh_agent_kit::AgentError;
use mesh_agent_kit::agent_message::{SEND_AGENT_MESSAGE_SKILL_ID, SendAgentMessageInput, send_agent_message};
use mesh_agent_kit::call_agent::{CALL_AGENT_SKILL_ID, CallAgentInput, call_agent};
use mesh_agent_kit::graph::AgentGraph;
use mesh_client::{CallScope, MeshCaller};
use mesh_protocol::call::AGENT_CALL_TIMEOUT_MS_MAX;
use mesh_protocol::registry::AgentSummary;
use mesh_protocol::seed::ResponseStatus;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{TOOL_LIST_ENTRIES_MAX, Tool};
use crate::model::ToolSpec;

/// Longest message a model may send another agent.
const MESSAGE_CHARS_MAX: u64 = 32_000;
/// Longest request `list_agents` searches by: the registry searches at most 2,000 characters.
const REQUEST_CHARS_MAX: u64 = 2_000;

/// What the mesh tools share: the agent's caller and its part of the graph.
#[derive(Debug, Clone)]
pub struct MeshTools {
    pub caller: Arc<MeshCaller>,
    pub graph: Arc<AgentGraph>,
}

/// A refusal or failure of the kit, as the model reads it.
fn refused(tool: &str, error: AgentError) -> String {
    match error {
        AgentError::Call { code, message } => format!("{tool} was refused or failed ({code}): {message}"),
        other => format!("{tool} failed: {other}"),
    }
}

/// `call_agent`: seed 000's schema; `agent_id` names an agent, or else a capability.
#[derive(Debug)]
pub struct CallAgentTool(pub MeshTools);

#[derive(Debug, Deserialize)]
struct CallAgentArgs {
    agent_id: String,
    message: String,
    timeout_ms: Option<u64>,
}

#[async_trait::async_trait]
impl Tool for CallAgentTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: CALL_AGENT_SKILL_ID.into(),
            description: "Call another agent and wait for their response".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "agent_id": {"type": "string", "minLength": 1, "maxLength": 200,
                        "description": "The ID of the agent to call: its registered name, or a capability one of the agents offers"},
                    "message": {"type": "string", "minLength": 1, "maxLength": MESSAGE_CHARS_MAX,
                        "description": "The message to send to the agent"},
                    "timeout_ms": {"type": "integer", "minimum": 1,
                        "description": format!("Optional timeout in milliseconds (default: 30000, max: {AGENT_CALL_TIMEOUT_MS_MAX})")}
                },
                "required": ["agent_id", "message"],
                "additionalProperties": false
            }),
        }
    }

    async fn run(&self, scope: &CallScope, arguments: Value) -> Result<String, String> {
        let args: CallAgentArgs = serde_json::from_value(arguments).map_err(|e| e.to_string())?;
        let input = |agent_id: Option<String>, capability: Option<String>| CallAgentInput {
            skill: CALL_AGENT_SKILL_ID.into(),
            agent_id,
            capability,
            message: args.message.clone(),
            data: None,
            // The caller caps it at the maximum and at what this turn has left.
            timeout_ms: args.timeout_ms,
            // The turn's handoff context (its scope's) is passed on as it is, this agent added.
            handoff: None,
        };
        let caller = &self.0.caller;
        let answered = match call_agent(caller, scope, input(Some(args.agent_id.clone()), None)).await {
            // Not a registered name: a capability, as seed 000's agent_id may be.
            Err(AgentError::Call { code, .. }) if code == "AGENT_NOT_FOUND" => {
                call_agent(caller, scope, input(None, Some(args.agent_id.clone()))).await.map_err(
                    |error| match error {
                        AgentError::Call { code, .. } if code == "AGENT_NOT_FOUND" => format!(
                            "no agent is registered as {:?}, and none offers it as a capability: list_agents shows \
                         who there is",
                            args.agent_id
                        ),
                        other => refused(CALL_AGENT_SKILL_ID, other),
                    },
                )?
            }
            other => other.map_err(|error| refused(CALL_AGENT_SKILL_ID, error))?,
        };
        let parts: Vec<_> = answered.messages.into_iter().flat_map(|m| m.parts).collect();
        let status = match answered.status {
            ResponseStatus::Success => "SUCCESS",
            ResponseStatus::Partial => "PARTIAL",
        };
        let confidence = answered
            .confidence_level
            .map(|c| format!(", confidence {}", json!(c).as_str().unwrap_or_default()))
            .unwrap_or_default();
        Ok(format!(
            "{} answered ({status}{confidence}):\n{}",
            args.agent_id,
            mesh_agent_kit::plain_text(&parts, &answered.warnings)
        ))
    }
}

/// `list_agents`: the agents the registry knows (for a capability), with their skills; or, given
/// a request in words, the agents whose skills best fit it, best first (the registry's search
/// over agent cards).
#[derive(Debug)]
pub struct ListAgentsTool(pub MeshTools);

#[derive(Debug, Deserialize)]
struct ListAgentsArgs {
    capability: Option<String>,
    request: Option<String>,
}

#[async_trait::async_trait]
impl Tool for ListAgentsTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list_agents".into(),
            description: "List the agents of the mesh that offer a capability (all agents without one), with their \
                          skills and health; or, given a request in words, the agents whose skills best fit it, \
                          best first"
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "capability": {"type": "string", "minLength": 1, "maxLength": 200,
                        "description": "A capability (skill id), e.g. search"},
                    "request": {"type": "string", "minLength": 1, "maxLength": REQUEST_CHARS_MAX,
                        "description": "What needs doing, in words, e.g. convert 100 USD to EUR"}
                },
                "additionalProperties": false
            }),
        }
    }

    async fn run(&self, scope: &CallScope, arguments: Value) -> Result<String, String> {
        let args: ListAgentsArgs = serde_json::from_value(arguments).map_err(|e| e.to_string())?;
        if let Some(request) = &args.request {
            return self.matching(scope, request).await;
        }
        let discovery = self.0.caller.discovery();
        let agents: Vec<AgentSummary> = match &args.capability {
            Some(capability) => {
                let (healthy, others) = discovery.listed(capability).await.map_err(|e| e.to_string())?;
                healthy.into_iter().chain(others).collect()
            }
            None => {
                let list = self.0.graph.registry().agents().await.map_err(|e| format!("the registry: {e}"))?;
                list.agents
                    .into_iter()
                    .map(|a| AgentSummary {
                        name: a.name,
                        url: a.url,
                        health_status: a.health_status,
                        process_endpoint: a.process_endpoint,
                        agent_card_url: a.agent_card_url,
                    })
                    .collect()
            }
        };
        if agents.is_empty() {
            return Ok(match &args.capability {
                Some(capability) => format!("no agent offers {capability:?}"),
                None => "no agent is registered".into(),
            });
        }
        let mut lines = Vec::new();
        for agent in agents.iter().take(TOOL_LIST_ENTRIES_MAX) {
            let health = json!(agent.health_status);
            let skills = match discovery.card(agent).await {
                Ok(card) => {
                    card.skills.iter().map(|s| format!("{} ({})", s.id, s.description)).collect::<Vec<_>>().join("; ")
                }
                Err(error) => format!("card unavailable: {error}"),
            };
            lines.push(format!("- {} [{}]: {skills}", agent.name, health.as_str().unwrap_or_default()));
        }
        if agents.len() > TOOL_LIST_ENTRIES_MAX {
            lines.push(format!("... and {} more", agents.len() - TOOL_LIST_ENTRIES_MAX));
        }
        Ok(lines.join("\n"))
    }
}

impl ListAgentsTool {
    /// The agents whose skills best fit `request`, as the tenant of the call sees them.
    async fn matching(&self, scope: &CallScope, request: &str) -> Result<String, String> {
        let tenant = scope.context().tenant.as_deref();
        let found = self
            .0
            .graph
            .registry()
            .search(request, TOOL_LIST_ENTRIES_MAX, tenant)
            .await
            .map_err(|e| format!("the registry: {e}"))?;
        if found.agents.is_empty() {
            return Ok(format!("no agent has a skill matching {request:?}"));
        }
        let lines: Vec<String> = found
            .agents
            .iter()
            .map(|agent| {
                let health = json!(agent.record.health_status);
                let skills: Vec<String> =
                    agent.matched_skills.iter().map(|s| format!("{} ({})", s.skill.id, s.skill.description)).collect();
                format!("- {} [{}]: {}", agent.record.name, health.as_str().unwrap_or_default(), skills.join("; "))
            })
            .collect();
        Ok(lines.join("\n"))
    }
}

/// `send_agent_message`: seed 004's schema, offered only while an enabled link lets this agent
/// start a conversation with another.
#[derive(Debug)]
pub struct SendAgentMessageTool(pub MeshTools);

#[derive(Debug, Deserialize)]
struct SendAgentMessageArgs {
    target: String,
    message: String,
}

#[async_trait::async_trait]
impl Tool for SendAgentMessageTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: SEND_AGENT_MESSAGE_SKILL_ID.into(),
            description: "Send a message to a linked agent (your superiors, subordinates or peers) over the link's \
                          internal channel, and get its reply"
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "target": {"type": "string", "minLength": 1, "maxLength": 200,
                        "description": "The name of the linked agent"},
                    "message": {"type": "string", "minLength": 1, "maxLength": MESSAGE_CHARS_MAX,
                        "description": "The message"}
                },
                "required": ["target", "message"],
                "additionalProperties": false
            }),
        }
    }

    fn offered(&self, agent: &str) -> bool {
        let policy = self.0.graph.links().policy();
        policy.links_of(agent).any(|link| {
            let other = if link.from_agent_id == agent { &link.to_agent_id } else { &link.from_agent_id };
            link.allows_start(agent, other)
        })
    }

    async fn run(&self, scope: &CallScope, arguments: Value) -> Result<String, String> {
        let args: SendAgentMessageArgs = serde_json::from_value(arguments).map_err(|e| e.to_string())?;
        let me = scope.agent();
        // The link's existence, its flag and its direction, whatever mode the graph is in.
        let policy = self.0.graph.links().policy();
        let link = policy.links_of(me).find(|link| link.joins(me, &args.target)).ok_or_else(|| {
            format!("no link joins you and {:?}: message only the agents of your organisation", args.target)
        })?;
        if !link.enabled {
            return Err(format!("the link {} between you and {} is disabled", link.id, args.target));
        }
        if !link.allows_start(me, &args.target) {
            return Err(format!(
                "the link {} is one way from {} to you: {} may start conversations with you, not you with it",
                link.id, args.target, args.target
            ));
        }
        let input = SendAgentMessageInput {
            skill: SEND_AGENT_MESSAGE_SKILL_ID.into(),
            target: args.target.clone(),
            message: args.message,
            timeout_ms: None,
        };
        let sent = send_agent_message(&self.0.caller, &self.0.graph, scope, input)
            .await
            .map_err(|error| refused(SEND_AGENT_MESSAGE_SKILL_ID, error))?;
        Ok(format!(
            "{} answered on link {} ({}):\n{}",
            sent.to_agent_id,
            sent.link_id,
            sent.status.as_str(),
            sent.reply.unwrap_or_else(|| "(no reply text)".into())
        ))
    }
}
