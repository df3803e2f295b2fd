//! The conversations over `one_way` links that their source started, remembered so the target's
//! answers inside them are recognised (issue #14's reply rule). Both ends keep a record: the
//! source when it sends, the target when it admits the call. Bounded: past its capacity the
//! oldest conversation is forgotten, after which answers in it are refused like a new start.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Conversations an agent remembers by default.
pub const CONVERSATIONS_MAX_DEFAULT: usize = 10_000;

#[derive(Debug, Default)]
struct Record {
    /// Peers by conversation (`contextId`); few peers share one conversation.
    peers: HashMap<String, Vec<String>>,
    /// `(context, peer)` pairs oldest first, for forgetting in order.
    order: VecDeque<(String, String)>,
}

/// A bounded record of `(peer, contextId)` pairs: conversations this agent shares with a peer
/// over a `one_way` link, which the link's source started.
#[derive(Debug)]
pub struct Conversations {
    record: Mutex<Record>,
    capacity: usize,
}

impl Conversations {
    /// A record of at most `capacity` conversations (at least one).
    pub fn new(capacity: usize) -> Self {
        Self { record: Mutex::new(Record::default()), capacity: capacity.max(1) }
    }

    fn lock(&self) -> MutexGuard<'_, Record> {
        // Every update leaves the record consistent, so a panicking holder cannot corrupt it.
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers that this agent and `peer` share conversation `context`.
    pub fn record(&self, peer: &str, context: &str) {
        let mut record = self.lock();
        let peers = record.peers.entry(context.to_owned()).or_default();
        if peers.iter().any(|p| p == peer) {
            return;
        }
        peers.push(peer.to_owned());
        record.order.push_back((context.to_owned(), peer.to_owned()));
        while record.order.len() > self.capacity {
            let Some((context, peer)) = record.order.pop_front() else { break };
            if let Some(peers) = record.peers.get_mut(&context) {
                peers.retain(|p| *p != peer);
                if peers.is_empty() {
                    record.peers.remove(&context);
                }
            }
        }
    }

    /// Whether this agent and `peer` share conversation `context`.
    pub fn contains(&self, peer: &str, context: &str) -> bool {
        self.lock().peers.get(context).is_some_and(|peers| peers.iter().any(|p| p == peer))
    }

    /// Pairs remembered now.
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_pairs_not_contexts_alone() {
        let conversations = Conversations::new(10);
        conversations.record("boss", "c1");
        conversations.record("boss", "c1");
        assert!(conversations.contains("boss", "c1"));
        assert!(!conversations.contains("other", "c1"));
        assert!(!conversations.contains("boss", "c2"));
        assert_eq!(conversations.len(), 1);
    }

    #[test]
    fn forgets_the_oldest_past_its_capacity() {
        let conversations = Conversations::new(2);
        for context in ["c1", "c2", "c3"] {
            conversations.record("boss", context);
        }
        assert_eq!(conversations.len(), 2);
        assert!(!conversations.contains("boss", "c1"));
        assert!(conversations.contains("boss", "c2") && conversations.contains("boss", "c3"));
    }
}
