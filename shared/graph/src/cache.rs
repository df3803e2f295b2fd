//! An agent's link cache: the last good policy document from the registry, read lock-free on
//! every call, and the record of one-way conversations. What feeds it (the registry poll) lives
//! with the HTTP client; this holds no I/O.
//!
//! Before its first load the cache holds an empty policy in the mode the agent was configured
//! to assume (`open` by default, so a mesh without a registry policy behaves as before; an agent
//! that must never call unchecked assumes `enforced`, which denies every agent-to-agent call
//! until links arrive). Once loaded, a failing registry changes nothing: the last good copy
//! stays in force, enforcement included (fail closed once enforcement is known).

use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use serde::Serialize;

use crate::conversations::Conversations;
use crate::policy::{Allowance, Decision, Policy, PolicyError};
use mesh_protocol::graph::{GraphMode, GraphPolicy};

/// Where the cache stands with its feed, for `/health`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FeedState {
    /// A policy document has been loaded at least once.
    pub loaded: bool,
    /// The `ETag` of the loaded document, sent back as `If-None-Match`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Documents loaded since start.
    pub loads: u64,
    /// Polls that failed since start (the registry down, a bad document).
    pub failures: u64,
    /// Why the last poll failed, until one succeeds again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The link cache and conversation record of one agent; share it (`Arc`) between the admission
/// layer and the caller.
#[derive(Debug)]
pub struct LinkCache {
    policy: ArcSwap<Policy>,
    conversations: Conversations,
    feed: Mutex<FeedState>,
}

/// The cache's state as `/health` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheReport {
    pub mode: GraphMode,
    pub links: usize,
    pub conversations: usize,
    #[serde(flatten)]
    pub feed: FeedState,
}

impl LinkCache {
    /// An empty cache assuming `mode_until_loaded` until the first load, remembering at most
    /// `conversations_max` one-way conversations.
    pub fn new(mode_until_loaded: GraphMode, conversations_max: usize) -> Self {
        Self {
            policy: ArcSwap::from_pointee(Policy::empty(mode_until_loaded)),
            conversations: Conversations::new(conversations_max),
            feed: Mutex::new(FeedState::default()),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    pub fn mode(&self) -> GraphMode {
        self.policy.load().mode()
    }

    /// Puts `document` (tagged `etag`) in force; a document that cannot be used is refused and
    /// the last good copy stays.
    pub fn load(&self, document: &GraphPolicy, etag: Option<String>) -> Result<(), PolicyError> {
        let policy = Policy::new(document).inspect_err(|error| self.failed(error.to_string()))?;
        self.policy.store(Arc::new(policy));
        let mut feed = self.feed.lock().unwrap_or_else(PoisonError::into_inner);
        feed.loaded = true;
        feed.etag = etag;
        feed.loads += 1;
        feed.last_error = None;
        Ok(())
    }

    /// The feed found the document unchanged (`304`): the copy in force is current.
    pub fn unchanged(&self) {
        self.feed.lock().unwrap_or_else(PoisonError::into_inner).last_error = None;
    }

    /// A poll failed; the copy in force stays.
    pub fn failed(&self, error: String) {
        let mut feed = self.feed.lock().unwrap_or_else(PoisonError::into_inner);
        feed.failures += 1;
        feed.last_error = Some(error);
    }

    /// The `ETag` to send as `If-None-Match`.
    pub fn etag(&self) -> Option<String> {
        self.feed.lock().unwrap_or_else(PoisonError::into_inner).etag.clone()
    }

    /// The check where a call is admitted: `caller` (`None` for no agent) calls `me`, in
    /// conversation `context_id`.
    pub fn admit(&self, caller: Option<&str>, me: &str, context_id: Option<&str>) -> Decision {
        self.decide(caller, me, caller, context_id)
    }

    /// The check before sending: `me` calls `target` in conversation `context_id`.
    pub fn permit(&self, me: &str, target: &str, context_id: Option<&str>) -> Decision {
        self.decide(Some(me), target, Some(target), context_id)
    }

    /// Checks `caller -> target`, where `peer` is the other agent from this one's side; a
    /// conversation started over a one-way link is remembered with `peer`, so that the answers
    /// inside it (checked here with the same `peer`) are recognised.
    fn decide(&self, caller: Option<&str>, target: &str, peer: Option<&str>, context_id: Option<&str>) -> Decision {
        let policy = self.policy.load();
        let decision = policy.check(caller, target, context_id, |context| {
            peer.is_some_and(|peer| self.conversations.contains(peer, context))
        });
        if let (Decision::Allowed(Allowance::Start { answer_only_back: true, .. }), Some(peer), Some(context)) =
            (&decision, peer, context_id)
        {
            self.conversations.record(peer, context);
        }
        decision
    }

    pub fn report(&self) -> CacheReport {
        let policy = self.policy.load();
        CacheReport {
            mode: policy.mode(),
            links: policy.links(),
            conversations: self.conversations.len(),
            feed: self.feed.lock().unwrap_or_else(PoisonError::into_inner).clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use mesh_protocol::graph::LinkDirection;

    use super::*;
    use crate::policy::DenialReason;
    use crate::policy::tests::link;

    fn one_way(from: &str, to: &str) -> GraphPolicy {
        GraphPolicy { mode: GraphMode::Enforced, links: vec![link("l1", from, to, LinkDirection::OneWay, true)] }
    }

    fn is_allowed(decision: &Decision) -> bool {
        matches!(decision, Decision::Allowed(_))
    }

    #[test]
    fn before_the_first_load_the_configured_mode_holds() {
        assert!(is_allowed(&LinkCache::new(GraphMode::Open, 10).permit("a", "b", None)));
        let closed = LinkCache::new(GraphMode::Enforced, 10);
        assert!(!is_allowed(&closed.permit("a", "b", None)));
        assert!(is_allowed(&closed.admit(None, "b", None)), "users are not agents");
        assert!(!closed.report().feed.loaded);
    }

    #[test]
    fn an_answer_is_recognised_on_both_sides_of_a_one_way_link() {
        let (boss, worker) = (LinkCache::new(GraphMode::Open, 10), LinkCache::new(GraphMode::Open, 10));
        for cache in [&boss, &worker] {
            cache.load(&one_way("boss", "worker"), Some("\"v1\"".into())).unwrap();
        }
        // The worker cannot start ...
        assert!(!is_allowed(&worker.permit("worker", "boss", Some("c1"))));
        // ... the boss starts c1: its caller remembers it, and so does the worker on admission.
        assert!(is_allowed(&boss.permit("boss", "worker", Some("c1"))));
        assert!(is_allowed(&worker.admit(Some("boss"), "worker", Some("c1"))));
        // The worker answers in c1: allowed when sent, and when the boss admits it.
        assert_eq!(
            worker.permit("worker", "boss", Some("c1")),
            Decision::Allowed(Allowance::Answer { link_id: "l1".into() })
        );
        assert!(is_allowed(&boss.admit(Some("worker"), "boss", Some("c1"))));
        // Not in another conversation.
        let Decision::Denied(denial) = boss.admit(Some("worker"), "boss", Some("c2")) else { panic!("allowed") };
        assert_eq!(denial.reason, DenialReason::AnswerOnly { link_id: "l1".into() });
        let report = boss.report();
        assert_eq!((report.mode, report.links, report.conversations), (GraphMode::Enforced, 1, 1));
        assert_eq!(report.feed.etag.as_deref(), Some("\"v1\""));
    }

    #[test]
    fn a_failed_poll_keeps_the_last_good_copy() {
        let cache = LinkCache::new(GraphMode::Open, 10);
        cache.load(&one_way("boss", "worker"), None).unwrap();
        cache.failed("registry down".into());
        assert_eq!(cache.mode(), GraphMode::Enforced);
        assert!(!is_allowed(&cache.permit("worker", "boss", None)), "still enforced");
        let report = cache.report();
        assert_eq!((report.feed.failures, report.feed.last_error.as_deref()), (1, Some("registry down")));
        cache.unchanged();
        assert_eq!(cache.report().feed.last_error, None);
    }
}
