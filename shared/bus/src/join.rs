//! HTTP turns in bus conversations: an A2A message whose `contextId` is a conversation living on
//! an agent's topic joins that conversation, so its HTTP and bus turns share one history. The
//! handler sees the conversation so far (role-relative, as on the bus); the message and the
//! answer become docmem nodes and records on the conversation's topic, exactly as a bus turn
//! leaves them, so a replay and every other participant see the HTTP turn too.

use std::sync::Arc;

use mesh_docmem::{Context, Docmem, DocmemError, NewChild, Node};

use crate::{
    ACTION_APPEND, ACTION_CREATE, BusError, BusRecord, ChatMessage, ConversationBus, Role, answer_node_id, message_list,
};

/// Root context of a conversation that lives on an agent's topic: `conversation:topic:{topic}`.
const ROOT_CONTEXT_TYPE: &str = "conversation";
const ROOT_CONTEXT_NAME: &str = "topic";
/// Fixed namespace of the node ids of joined HTTP messages (UUID v5 of the conversation and the
/// A2A `messageId`), so a retried request writes its message once.
const JOINED_MESSAGE_ID_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6d65_7368_2d68_7474_702d_6a6f_696e_6564);

/// The root context of a conversation that lives on `topic`.
pub fn conversation_root_context(topic: &str) -> Context {
    Context { kind: ROOT_CONTEXT_TYPE.into(), name: ROOT_CONTEXT_NAME.into(), value: topic.into() }
}

/// The topic a conversation root lives on, when it is one.
pub fn conversation_topic(root: &Node) -> Option<&str> {
    (root.parent_id.is_none() && root.context.kind == ROOT_CONTEXT_TYPE && root.context.name == ROOT_CONTEXT_NAME)
        .then_some(root.context.value.as_str())
}

/// Joins HTTP turns to the conversations on one agent's topic.
#[derive(Debug, Clone)]
pub struct ConversationJoin {
    bus: Arc<dyn ConversationBus>,
    docmem: Docmem,
    agent_id: String,
    topic: String,
}

/// An HTTP turn inside a bus conversation, between reading the history and answering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedTurn {
    conversation_id: String,
    sender: String,
    message_node_id: String,
    text: String,
    /// The conversation as the answering agent sees it, the new message last.
    pub messages: Vec<ChatMessage>,
}

impl JoinedTurn {
    pub fn conversation_id(&self) -> &str {
        &self.conversation_id
    }

    /// The docmem node the message is written as.
    pub fn message_node_id(&self) -> &str {
        &self.message_node_id
    }
}

impl ConversationJoin {
    /// Joins turns to the conversations on `topic`, answered as `agent_id`.
    pub fn new(bus: Arc<dyn ConversationBus>, docmem: Docmem, agent_id: &str, topic: &str) -> Self {
        Self { bus, docmem, agent_id: agent_id.to_owned(), topic: topic.to_owned() }
    }

    /// The turn that the message `message_id` (its plain text `text`, sent by `sender` acting in
    /// `tenant`) makes in the conversation `context_id`, with the history so far; `None` when
    /// `context_id` is no conversation of that tenant on this agent's topic (an A2A context of its
    /// own). Another tenant's conversation is not joined, nor is its history read: that it exists
    /// shows nowhere. Nothing is written yet.
    pub async fn begin(
        &self,
        tenant: &str,
        context_id: &str,
        sender: &str,
        message_id: &str,
        text: &str,
    ) -> Result<Option<JoinedTurn>, BusError> {
        let root = match self.docmem.get(context_id).await {
            Ok(root) => root,
            Err(DocmemError::NotFound(_)) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        if conversation_topic(&root) != Some(self.topic.as_str()) || root.tenant != tenant {
            return Ok(None);
        }
        let message_node_id =
            uuid::Uuid::new_v5(&JOINED_MESSAGE_ID_NAMESPACE, format!("{}\n{message_id}", root.id).as_bytes())
                .to_string();
        let history = self.docmem.read_conversation(&root.id).await?;
        let mut messages = message_list(&history, &self.agent_id);
        messages.push(ChatMessage { role: Role::of(sender, &self.agent_id), content: text.to_owned() });
        Ok(Some(JoinedTurn {
            conversation_id: root.id,
            sender: sender.to_owned(),
            message_node_id,
            text: text.to_owned(),
            messages,
        }))
    }

    /// Writes the turn's message and `answer` to docmem in one transaction, then their records
    /// to the topic. The answer's node id is the one a bus participant would give it, so the
    /// agent's own participant, reading the message's record, finds it answered.
    pub async fn finish(&self, turn: &JoinedTurn, answer: &str) -> Result<(), BusError> {
        let answer_id = answer_node_id(&self.agent_id, &turn.message_node_id);
        let children = [
            NewChild {
                id: turn.message_node_id.clone(),
                parent_id: turn.conversation_id.clone(),
                context: Context::agent_text(&turn.sender),
                content: turn.text.clone(),
            },
            NewChild {
                id: answer_id.clone(),
                parent_id: turn.conversation_id.clone(),
                context: Context::agent_text(&self.agent_id),
                content: answer.to_owned(),
            },
        ];
        let nodes = self.docmem.append_many(&children).await?;
        let action = if nodes.first().is_some_and(|n| n.position == 0) { ACTION_CREATE } else { ACTION_APPEND };
        let message = BusRecord::message(&turn.sender, &turn.conversation_id, &turn.message_node_id, action);
        let mut reply = BusRecord::message(&self.agent_id, &turn.conversation_id, &answer_id, ACTION_APPEND);
        reply.correlation_id = Some(turn.message_node_id.clone());
        self.bus.produce_many(&self.topic, &[message, reply]).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_root_with_a_topic_context_is_a_conversation_on_a_topic() {
        let mut root = Node {
            id: "c1".into(),
            root_id: "c1".into(),
            parent_id: None,
            position: 0,
            context: conversation_root_context("orchestrator-1"),
            content: String::new(),
            version: 1,
            created_at: String::new(),
            updated_at: String::new(),
            tenant: String::new(),
        };
        assert_eq!(conversation_topic(&root), Some("orchestrator-1"));
        assert_eq!(root.context.to_string(), "conversation:topic:orchestrator-1");
        root.parent_id = Some("other".into());
        assert_eq!(conversation_topic(&root), None);
        root.parent_id = None;
        root.context = Context::agent_text("orchestrator-1");
        assert_eq!(conversation_topic(&root), None);
    }
}
