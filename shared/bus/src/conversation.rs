//! Conversations as an agent sees them: role-relative message lists (seed 001), and the bounded
//! per-conversation caches an agent keeps and rebuilds by replaying its topic.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;

use lru::LruCache;
use mesh_docmem::{Docmem, Node};
use serde::{Deserialize, Serialize};

use crate::{BusError, BusRecord, ConversationBus, Delivered};

/// A message's role from one agent's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everyone else: users, other agents, tools.
    User,
    /// The agent itself.
    Assistant,
}

impl Role {
    /// Seed 001 `getRole`: my own messages are `assistant`, everyone else's (tools too) `user`.
    pub fn of(sender: &str, me: &str) -> Self {
        if sender == me { Self::Assistant } else { Self::User }
    }
}

/// One entry of a chat-completion message list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

/// The role-relative list of a conversation's message nodes (docmem order), as `me` sees it.
/// Nodes that are not conversation messages (no `text:agent:` context) are left out.
pub fn message_list(nodes: &[Node], me: &str) -> Vec<ChatMessage> {
    nodes
        .iter()
        .filter_map(|node| {
            let sender = node.context.agent_id()?;
            Some(ChatMessage { role: Role::of(sender, me), content: node.content.clone() })
        })
        .collect()
}

/// One cached message: its node, who sent it, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedMessage {
    pub node_id: String,
    pub sender: String,
    pub content: String,
}

/// The materialized view of one conversation, in bus (offset) order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConversationCache {
    messages: Vec<CachedMessage>,
    /// Every node already applied: a record seen twice changes nothing.
    node_ids: HashSet<String>,
}

impl ConversationCache {
    /// Applies one record whose node is `node` (`None` when the node is gone from docmem).
    /// Returns whether anything changed.
    pub fn apply(&mut self, record: &BusRecord, node: Option<&Node>) -> bool {
        match (record.action.as_str(), node) {
            ("delete", _) | (_, None) => {
                let before = self.messages.len();
                self.messages.retain(|m| m.node_id != record.node_id);
                before != self.messages.len()
            }
            ("edit", Some(node)) => match self.messages.iter_mut().find(|m| m.node_id == node.id) {
                Some(message) if message.content != node.content => {
                    message.content.clone_from(&node.content);
                    true
                }
                _ => false,
            },
            (_, Some(node)) => {
                let sender = node.context.agent_id().unwrap_or(&record.agent_id);
                self.append(&node.id, sender, &node.content)
            }
        }
    }

    /// Appends a message unless its node is there already; returns whether it was new.
    pub fn append(&mut self, node_id: &str, sender: &str, content: &str) -> bool {
        if !self.node_ids.insert(node_id.to_owned()) {
            return false;
        }
        self.messages.push(CachedMessage { node_id: node_id.into(), sender: sender.into(), content: content.into() });
        true
    }

    pub fn contains(&self, node_id: &str) -> bool {
        self.node_ids.contains(node_id)
    }

    /// The messages in bus order, with their nodes and senders (for agents that read more than
    /// the role-relative list: whose turn it is, which of their own messages came since).
    pub fn messages(&self) -> &[CachedMessage] {
        &self.messages
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The role-relative list, as `me` sees it.
    pub fn message_list(&self, me: &str) -> Vec<ChatMessage> {
        self.messages
            .iter()
            .map(|m| ChatMessage { role: Role::of(&m.sender, me), content: m.content.clone() })
            .collect()
    }

    /// A cache rebuilt from docmem, for a conversation evicted from (or never in) the cache:
    /// its messages in docmem order, which is the order they were appended in.
    pub async fn from_docmem(docmem: &Docmem, root_id: &str) -> Result<Self, BusError> {
        let mut cache = Self::default();
        for node in docmem.read_conversation(root_id).await? {
            if let Some(sender) = node.context.agent_id() {
                cache.node_ids.insert(node.id.clone());
                cache.messages.push(CachedMessage {
                    node_id: node.id,
                    sender: sender.to_owned(),
                    content: node.content,
                });
            }
        }
        Ok(cache)
    }
}

/// An agent's caches, at most `capacity` conversations, least recently used evicted first.
#[derive(Debug)]
pub struct Conversations {
    caches: LruCache<String, ConversationCache>,
}

impl Conversations {
    pub fn new(capacity: NonZeroUsize) -> Self {
        Self { caches: LruCache::new(capacity) }
    }

    pub fn len(&self) -> usize {
        self.caches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.caches.is_empty()
    }

    pub fn get(&mut self, conversation_id: &str) -> Option<&mut ConversationCache> {
        self.caches.get_mut(conversation_id)
    }

    pub fn peek(&self, conversation_id: &str) -> Option<&ConversationCache> {
        self.caches.peek(conversation_id)
    }

    pub fn insert(&mut self, conversation_id: String, cache: ConversationCache) {
        self.caches.put(conversation_id, cache);
    }

    /// Rebuilds every cache by replaying `topic` from the beginning (seed 001: consume the topic,
    /// fetch each node, rebuild in offset order), keeping only conversations `keep` accepts.
    /// Nodes are fetched from docmem many at a time, not one query per record. Returns the
    /// number of records replayed.
    pub async fn rebuild(
        &mut self,
        bus: &dyn ConversationBus,
        docmem: &Docmem,
        topic: &str,
        keep: &(dyn Fn(&BusRecord) -> bool + Sync),
    ) -> Result<usize, BusError> {
        let mut replay = bus.replay(topic).await?;
        let mut replayed = 0;
        while let Some(batch) = replay.next_batch().await? {
            replayed += batch.len();
            let batch: Vec<Delivered> = batch.into_iter().filter(|d| keep(&d.record)).collect();
            self.apply_batch(docmem, &batch).await?;
        }
        Ok(replayed)
    }

    /// Applies records in order, fetching their nodes in one go.
    pub async fn apply_batch(&mut self, docmem: &Docmem, batch: &[Delivered]) -> Result<(), BusError> {
        let ids: Vec<String> = batch.iter().map(|d| d.record.node_id.clone()).collect();
        let nodes: HashMap<String, Node> =
            docmem.get_many(&ids).await?.into_iter().map(|n| (n.id.clone(), n)).collect();
        for delivered in batch {
            let record = &delivered.record;
            let cache = self.caches.get_or_insert_mut(record.conversation_id.clone(), ConversationCache::default);
            cache.apply(record, nodes.get(&record.node_id));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_docmem::Context;

    fn node(id: &str, sender: &str, content: &str) -> Node {
        Node {
            id: id.into(),
            root_id: "root".into(),
            parent_id: Some("root".into()),
            position: 0,
            context: Context::agent_text(sender),
            content: content.into(),
            version: 1,
            created_at: String::new(),
            updated_at: String::new(),
            tenant: String::new(),
        }
    }

    #[test]
    fn roles_are_relative_to_the_reader() {
        let nodes = [node("n1", "ui-123", "Hello"), node("n2", "conv-456", "Hi"), node("n3", "tool", "total 48")];
        let roles: Vec<Role> = message_list(&nodes, "conv-456").iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
        let roles: Vec<Role> = message_list(&nodes, "ui-123").iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::Assistant, Role::User, Role::User]);
        assert_eq!(
            serde_json::to_value(ChatMessage { role: Role::User, content: "x".into() }).unwrap()["role"],
            "user"
        );
    }

    #[test]
    fn a_record_applied_twice_changes_nothing_and_edits_and_deletes_apply() {
        let mut cache = ConversationCache::default();
        let record = BusRecord::message("ui-1", "root", "n1", crate::ACTION_APPEND);
        assert!(cache.apply(&record, Some(&node("n1", "ui-1", "a"))));
        assert!(!cache.apply(&record, Some(&node("n1", "ui-1", "a"))));
        let edit = BusRecord { action: "edit".into(), ..record.clone() };
        assert!(cache.apply(&edit, Some(&node("n1", "ui-1", "b"))));
        assert_eq!(cache.message_list("me")[0].content, "b");
        let delete = BusRecord { action: "delete".into(), ..record };
        assert!(cache.apply(&delete, None));
        assert!(cache.is_empty());
    }

    #[test]
    fn the_cache_keeps_the_most_recent_conversations() {
        let mut conversations = Conversations::new(NonZeroUsize::new(2).unwrap());
        for id in ["a", "b", "c"] {
            conversations.insert(id.into(), ConversationCache::default());
        }
        assert_eq!(conversations.len(), 2);
        assert!(conversations.peek("a").is_none() && conversations.peek("c").is_some());
    }
}
