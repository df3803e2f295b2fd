//! The link context an agent message carries (seed 004's `InboundMessage` metadata): which link,
//! which agent sent it, and what the sender is to its receiver.

use mesh_protocol::graph::{Link, LinkRelationship, OutcomeStatus, link_context_id};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Metadata keys of an agent message, as seed 004's `InboundMessage` names them.
pub const LINK_ID_METADATA_KEY: &str = "link_id";
pub const FROM_AGENT_METADATA_KEY: &str = "from_agent_id";
pub const RELATIONSHIP_METADATA_KEY: &str = "relationship";

/// Who sent an agent message and what the sender is to its receiver (the sender's end of the
/// link: a message from a link's `to` agent carries the reversed relationship).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkContext {
    pub link_id: String,
    pub from_agent_id: String,
    pub relationship: LinkRelationship,
}

impl LinkContext {
    /// The context `sender` speaks in over `link`; `None` when `sender` is not one of its ends.
    pub fn of_sender(link: &Link, sender: &str) -> Option<Self> {
        let relationship = link.relationship_of(sender)?;
        Some(Self { link_id: link.id.clone(), from_agent_id: sender.to_owned(), relationship })
    }

    /// The conversation (A2A `contextId`) this message belongs to: `link:{link_id}`.
    pub fn context_id(&self) -> String {
        link_context_id(&self.link_id)
    }

    /// Writes the three keys into message metadata.
    pub fn write_metadata(&self, metadata: &mut Map<String, Value>) {
        metadata.insert(LINK_ID_METADATA_KEY.into(), Value::String(self.link_id.clone()));
        metadata.insert(FROM_AGENT_METADATA_KEY.into(), Value::String(self.from_agent_id.clone()));
        metadata.insert(RELATIONSHIP_METADATA_KEY.into(), Value::String(self.relationship.as_str().into()));
    }

    /// The link context of a message in conversation `context_id` with `metadata`, when the
    /// metadata names one whose conversation that is; `None` for any other message.
    pub fn from_metadata(context_id: Option<&str>, metadata: Option<&Map<String, Value>>) -> Option<Self> {
        let metadata = metadata?;
        let text = |key: &str| metadata.get(key).and_then(Value::as_str);
        let relationship = LinkRelationship::deserialize(metadata.get(RELATIONSHIP_METADATA_KEY)?).ok()?;
        let context = Self {
            link_id: text(LINK_ID_METADATA_KEY)?.to_owned(),
            from_agent_id: text(FROM_AGENT_METADATA_KEY)?.to_owned(),
            relationship,
        };
        (context_id == Some(context.context_id().as_str())).then_some(context)
    }
}

/// What the receiving agent of a link message reports to the registry once it has processed it
/// (`POST /api/links/{id}/receipts`); the registry publishes `agent_message_received` from it, so
/// the event says the message was processed, not only that its sender sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LinkReceipt {
    /// The agent that sent the message.
    pub from_agent_id: String,
    /// The agent that processed it, which posts the receipt.
    pub to_agent_id: String,
    /// The link's conversation, `link:{id}`.
    pub context_id: String,
    /// The A2A `messageId` of the message processed.
    pub message_id: String,
    /// The receiver's task that processed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// How the processing ended.
    pub status: OutcomeStatus,
    /// The tenant of the call that carried the message (`None`: the default tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

#[cfg(test)]
mod tests {
    use mesh_protocol::graph::{LinkDirection, LinkSource};
    use serde_json::json;

    use super::*;

    #[test]
    fn the_relationship_is_the_senders() {
        let link = Link {
            id: "l1".into(),
            from_agent_id: "boss".into(),
            to_agent_id: "worker".into(),
            direction: LinkDirection::TwoWay,
            relationship: LinkRelationship::Superior,
            enabled: true,
            source: LinkSource::Config,
            created_at: String::new(),
            updated_at: String::new(),
        };
        assert_eq!(LinkContext::of_sender(&link, "boss").unwrap().relationship, LinkRelationship::Superior);
        assert_eq!(LinkContext::of_sender(&link, "worker").unwrap().relationship, LinkRelationship::Subordinate);
        assert_eq!(LinkContext::of_sender(&link, "other"), None);
    }

    #[test]
    fn link_context_round_trips_only_in_its_conversation() {
        let context =
            LinkContext { link_id: "l1".into(), from_agent_id: "a".into(), relationship: LinkRelationship::Peer };
        let mut metadata = Map::new();
        context.write_metadata(&mut metadata);
        assert_eq!(
            Value::Object(metadata.clone()),
            json!({"link_id": "l1", "from_agent_id": "a", "relationship": "peer"})
        );
        assert_eq!(LinkContext::from_metadata(Some("link:l1"), Some(&metadata)), Some(context));
        assert_eq!(LinkContext::from_metadata(Some("link:l2"), Some(&metadata)), None);
        assert_eq!(LinkContext::from_metadata(None, Some(&metadata)), None);
        assert_eq!(LinkContext::from_metadata(Some("link:l1"), None), None);
    }
}
