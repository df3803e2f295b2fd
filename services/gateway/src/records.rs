//! What the gateway remembers of the calls it relayed, each in a bounded map (least recently
//! used entries go first):
//!
//! - [`Ownership`]: the tenant of every task and conversation created through it, so another
//!   tenant's reads, cancels, subscriptions and follow-up messages are answered "not found";
//! - [`Forwards`]: the call chain of every conversation it forwarded to an agent, so that when
//!   that agent calls another through the gateway in the same conversation (its message carries
//!   the same `contextId`) without forwarding the `x-mesh-*` headers, the chain is known.

use std::num::NonZeroUsize;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use lru::LruCache;

/// The tenant of each task and conversation, per agent.
#[derive(Debug)]
pub struct Ownership {
    /// `(agent, task or conversation id)` → tenant.
    owners: Mutex<LruCache<(String, String), String>>,
}

/// Whether a caller may address a task or conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// Created through the gateway for this tenant.
    Same,
    /// Created for another tenant.
    Other,
    /// Not known here: not created through the gateway, or forgotten since.
    Unknown,
}

impl Ownership {
    pub fn new(entries_max: usize) -> Self {
        Self { owners: Mutex::new(LruCache::new(NonZeroUsize::new(entries_max.max(1)).unwrap_or(NonZeroUsize::MIN))) }
    }

    /// Records that `id` (a task or a conversation of `agent`) belongs to `tenant`, unless it
    /// belongs to another already (the first owner keeps it).
    pub fn record(&self, agent: &str, id: &str, tenant: &str) {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (agent.to_owned(), id.to_owned());
        if owners.get(&key).is_none() {
            owners.put(key, tenant.to_owned());
        }
    }

    pub fn owner(&self, agent: &str, id: &str, tenant: &str) -> Owner {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        match owners.get(&(agent.to_owned(), id.to_owned())) {
            Some(owner) if owner == tenant => Owner::Same,
            Some(_) => Owner::Other,
            None => Owner::Unknown,
        }
    }
}

/// A call the gateway forwarded to an agent, as the calls that agent makes in the same
/// conversation inherit it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forwarded {
    /// The chain the agent was called with (its callers, oldest first).
    pub chain: Vec<String>,
    pub tenant: String,
    /// When the agent's caller stops waiting.
    pub deadline: Option<Instant>,
    pub correlation_id: Option<String>,
}

/// The chains of the conversations forwarded to each agent.
#[derive(Debug)]
pub struct Forwards {
    /// `(agent, conversation)` → the call forwarded to it.
    calls: Mutex<LruCache<(String, String), Forwarded>>,
}

impl Forwards {
    pub fn new(entries_max: usize) -> Self {
        Self { calls: Mutex::new(LruCache::new(NonZeroUsize::new(entries_max.max(1)).unwrap_or(NonZeroUsize::MIN))) }
    }

    pub fn record(&self, agent: &str, context_id: &str, call: Forwarded) {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.put((agent.to_owned(), context_id.to_owned()), call);
    }

    /// The call forwarded to `agent` in conversation `context_id`, if the gateway made one.
    pub fn of(&self, agent: &str, context_id: &str) -> Option<Forwarded> {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.get(&(agent.to_owned(), context_id.to_owned())).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_tenant_keeps_a_task_and_the_map_stays_bounded() {
        let ownership = Ownership::new(2);
        ownership.record("echo", "t1", "acme");
        ownership.record("echo", "t1", "globex");
        assert_eq!(ownership.owner("echo", "t1", "acme"), Owner::Same);
        assert_eq!(ownership.owner("echo", "t1", "globex"), Owner::Other);
        assert_eq!(ownership.owner("other", "t1", "acme"), Owner::Unknown, "task ids are per agent");
        ownership.record("echo", "t2", "acme");
        ownership.record("echo", "t3", "acme");
        assert_eq!(ownership.owner("echo", "t1", "acme"), Owner::Unknown, "the oldest went first");
    }

    #[test]
    fn a_forward_is_found_by_agent_and_conversation_only() {
        let forwards = Forwards::new(8);
        let call = Forwarded { chain: vec!["a".into()], tenant: "acme".into(), deadline: None, correlation_id: None };
        forwards.record("b", "c1", call.clone());
        assert_eq!(forwards.of("b", "c1"), Some(call));
        assert_eq!(forwards.of("a", "c1"), None, "another agent cannot claim b's chain");
        assert_eq!(forwards.of("b", "c2"), None);
    }
}
