use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::BusError;

/// The record format's version (seed 001 `version`).
pub const RECORD_VERSION: &str = "1.0.0";
/// The sender of tool results: framework output, seen as `user` by every agent.
pub const TOOL_AGENT_ID: &str = "tool";
/// A record opening a conversation.
pub const ACTION_CREATE: &str = "create";
/// A record adding a message to a conversation.
pub const ACTION_APPEND: &str = "append";

/// One record on an agent's topic (seed 001 `ConversationMessage`). It points at a docmem node;
/// the message itself lives there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BusRecord {
    pub version: String,
    pub conversation_id: String,
    /// Always the sender's agent id (`tool` for tool results).
    pub agent_id: String,
    /// ISO 8601.
    pub timestamp: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The conversation's docmem root.
    pub docmem_node_id: String,
    /// The node of this message.
    pub node_id: String,
    /// `create`, `append`, `edit`, `delete`, `tool_invoke`, `tool_result`, `system_message`, ...
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The W3C trace context (`traceparent`, `tracestate`, `baggage`) of the work that produced
    /// the record, so the turn it starts continues that trace; empty with tracing off. In the
    /// record itself, so both backends carry it alike.
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    pub headers: HashMap<String, String>,
}

impl BusRecord {
    /// A record of a message node `node_id` in the conversation rooted at `root_id` (whose id is
    /// the conversation id, so that the A2A `contextId`, the conversation and its root agree),
    /// carrying the current trace context.
    pub fn message(agent_id: &str, root_id: &str, node_id: &str, action: &str) -> Self {
        Self {
            version: RECORD_VERSION.into(),
            conversation_id: root_id.into(),
            agent_id: agent_id.into(),
            timestamp: mesh_docmem::now_timestamp(),
            correlation_id: None,
            docmem_node_id: root_id.into(),
            node_id: node_id.into(),
            action: action.into(),
            command: None,
            headers: mesh_telemetry::current_fields(),
        }
    }

    pub fn to_json(&self) -> Result<String, BusError> {
        serde_json::to_string(self).map_err(|e| BusError::InvalidRecord(e.to_string()))
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, BusError> {
        serde_json::from_slice(bytes).map_err(|e| BusError::InvalidRecord(e.to_string()))
    }
}

/// A record as read back, with where it sits in its topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub record: BusRecord,
}

/// An agent's id: `{agent-type}-{instance-id}`, e.g. `orchestrator-1`.
pub fn agent_id(agent_type: &str, instance_id: &str) -> String {
    let slug: String =
        agent_type
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c.to_ascii_lowercase() } else { '-' }
            })
            .collect();
    format!("{slug}-{instance_id}")
}

/// The topic an agent owns: named like the agent itself, `{agent-type}-{instance-id}`.
pub fn agent_topic(agent_id: &str) -> String {
    agent_id.to_owned()
}

/// The consumer group of an agent: `agent-{agent_id}`.
pub fn consumer_group(agent_id: &str) -> String {
    format!("agent-{agent_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_seed() {
        let id = agent_id("Orchestrator", "1");
        assert_eq!((id.as_str(), agent_topic(&id).as_str()), ("orchestrator-1", "orchestrator-1"));
        assert_eq!(consumer_group("conv-456"), "agent-conv-456");
    }

    #[test]
    fn records_carry_the_seed_fields_and_no_content() {
        let record = BusRecord::message("ui-123", "root", "n1", ACTION_CREATE);
        let json: serde_json::Value = serde_json::from_str(&record.to_json().unwrap()).unwrap();
        let mut keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["action", "agent_id", "conversation_id", "docmem_node_id", "node_id", "timestamp", "version"]
        );
        assert_eq!(BusRecord::from_json(record.to_json().unwrap().as_bytes()).unwrap(), record);
        assert!(matches!(BusRecord::from_json(b"{}"), Err(BusError::InvalidRecord(_))));
    }
}
