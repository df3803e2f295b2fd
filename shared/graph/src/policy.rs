//! The direction policy (issue #14): who may start a conversation with whom, and who may only
//! answer. A [`Policy`] is compiled once per policy document into maps keyed by caller then
//! target, so a check is two hash lookups on borrowed names and allocates only to explain a denial.
//!
//! Caller X may *start* a conversation with Y over an enabled link from X to Y (either direction
//! kind) or an enabled `two_way` link from Y to X. Over an enabled `one_way` link from Y to X, X
//! may only *answer*, inside a conversation (A2A `contextId`) that Y started with X.

use std::collections::HashMap;
use std::sync::Arc;

use mesh_protocol::graph::{GraphMode, GraphPolicy, Link, LinkDirection, OrgChart};

/// Most links a policy document may hold; a larger one is refused (the last good copy stays), so
/// a broken registry cannot make every agent hold an unbounded graph.
pub const GRAPH_LINKS_MAX: usize = 100_000;

/// Why a policy document cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyError {
    TooManyLinks { links: usize },
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooManyLinks { links } => {
                write!(f, "the policy holds {links} links, more than the {GRAPH_LINKS_MAX} an agent keeps")
            }
        }
    }
}

impl std::error::Error for PolicyError {}

/// What a link lets one agent do towards another.
#[derive(Debug, Clone)]
struct Grant {
    link_id: Arc<str>,
    /// The target cannot start a conversation back, only answer inside this one: the
    /// conversation must be remembered for its answers to be recognised.
    answer_only_back: bool,
}

/// Names by caller, then by target, looked up with borrowed `&str` keys.
type ByPair<T> = HashMap<String, HashMap<String, T>>;

fn get<'a, T>(map: &'a ByPair<T>, caller: &str, target: &str) -> Option<&'a T> {
    map.get(caller).and_then(|targets| targets.get(target))
}

fn put<T>(map: &mut ByPair<T>, caller: &str, target: &str, value: T) {
    map.entry(caller.to_owned()).or_default().insert(target.to_owned(), value);
}

/// One policy document, compiled for checks.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    mode: GraphMode,
    links: usize,
    starts: ByPair<Grant>,
    /// `replies[x][y]`: a `one_way` link from y to x lets x answer y in conversations y started.
    replies: ByPair<Arc<str>>,
    /// Disabled links between two agents, either way, to name them in a denial.
    disabled: ByPair<Arc<str>>,
    by_id: HashMap<String, Link>,
}

/// Why a call is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowance {
    /// The graph is open: no link is needed.
    Open,
    /// No agent makes the call (a user, or a client outside the mesh): links govern agents only.
    NotFromAgent,
    /// The caller starts (or continues) a conversation over this link.
    Start {
        link_id: Arc<str>,
        /// The target may only answer inside conversations the caller started: the caller's
        /// conversation must be remembered on both sides.
        answer_only_back: bool,
    },
    /// The caller answers inside a conversation the target started over this `one_way` link.
    Answer { link_id: Arc<str> },
}

/// Why no link lets the call through, beyond there being none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DenialReason {
    NoLink,
    /// A link between the two exists but is disabled.
    Disabled {
        link_id: String,
    },
    /// A `one_way` link from the target lets the caller answer, but this conversation (if any)
    /// is not one the target started.
    AnswerOnly {
        link_id: String,
    },
}

/// A refused call, naming the missing link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub caller: String,
    pub target: String,
    pub reason: DenialReason,
}

impl Denial {
    /// The mesh error code of a denied call.
    pub const ERROR_CODE: &'static str = "LINK_DENIED";
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (caller, target) = (&self.caller, &self.target);
        write!(f, "no enabled link lets {caller} call {target}")?;
        match &self.reason {
            DenialReason::NoLink => write!(f, " (no link {caller} -> {target} exists)"),
            DenialReason::Disabled { link_id } => write!(f, " (link {link_id} between them is disabled)"),
            DenialReason::AnswerOnly { link_id } => write!(
                f,
                " (the one_way link {link_id} from {target} lets {caller} answer only inside a conversation {target} started)"
            ),
        }
    }
}

impl std::error::Error for Denial {}

/// The outcome of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allowed(Allowance),
    Denied(Denial),
}

impl Policy {
    /// The policy of `document`; links to oneself are ignored (the registry refuses them).
    pub fn new(document: &GraphPolicy) -> Result<Self, PolicyError> {
        if document.links.len() > GRAPH_LINKS_MAX {
            return Err(PolicyError::TooManyLinks { links: document.links.len() });
        }
        let mut policy = Self {
            mode: document.mode,
            links: document.links.len(),
            by_id: document.links.iter().map(|link| (link.id.clone(), link.clone())).collect(),
            ..Self::default()
        };
        let usable = || document.links.iter().filter(|l| l.from_agent_id != l.to_agent_id);
        for link in usable().filter(|l| !l.enabled) {
            let id: Arc<str> = Arc::from(link.id.as_str());
            put(&mut policy.disabled, &link.from_agent_id, &link.to_agent_id, id.clone());
            put(&mut policy.disabled, &link.to_agent_id, &link.from_agent_id, id);
        }
        // Links in their own direction first, so a link from X to Y names X -> Y even when a
        // two_way link from Y to X allows the same.
        let enabled: Vec<&Link> = usable().filter(|l| l.enabled).collect();
        for link in &enabled {
            let grant = Grant { link_id: Arc::from(link.id.as_str()), answer_only_back: false };
            put(&mut policy.starts, &link.from_agent_id, &link.to_agent_id, grant);
        }
        for link in enabled.iter().filter(|l| l.direction == LinkDirection::TwoWay) {
            let (back, forth) = (&link.to_agent_id, &link.from_agent_id);
            if get(&policy.starts, back, forth).is_none() {
                put(
                    &mut policy.starts,
                    back,
                    forth,
                    Grant { link_id: Arc::from(link.id.as_str()), answer_only_back: false },
                );
            }
        }
        for link in enabled.iter().filter(|l| l.direction == LinkDirection::OneWay) {
            put(&mut policy.replies, &link.to_agent_id, &link.from_agent_id, Arc::from(link.id.as_str()));
        }
        let reachable_back: Vec<(String, String)> = policy
            .starts
            .iter()
            .flat_map(|(caller, targets)| targets.keys().map(move |target| (caller.clone(), target.clone())))
            .filter(|(caller, target)| get(&policy.starts, target, caller).is_none())
            .collect();
        for (caller, target) in reachable_back {
            if let Some(grant) = policy.starts.get_mut(&caller).and_then(|t| t.get_mut(&target)) {
                grant.answer_only_back = true;
            }
        }
        Ok(policy)
    }

    /// An empty policy in `mode`: what an agent holds before the registry has answered once.
    pub fn empty(mode: GraphMode) -> Self {
        Self { mode, ..Self::default() }
    }

    pub fn mode(&self) -> GraphMode {
        self.mode
    }

    /// Links in the document, disabled ones included.
    pub fn links(&self) -> usize {
        self.links
    }

    /// May `caller` call `target` in conversation `context_id`? `caller` is `None` for a call no
    /// agent makes. `started(context)` tells whether `target` started that conversation with
    /// `caller`; it is asked only when an answer-only link is the one way through.
    pub fn check(
        &self,
        caller: Option<&str>,
        target: &str,
        context_id: Option<&str>,
        started: impl FnOnce(&str) -> bool,
    ) -> Decision {
        if self.mode == GraphMode::Open {
            return Decision::Allowed(Allowance::Open);
        }
        let Some(caller) = caller else {
            return Decision::Allowed(Allowance::NotFromAgent);
        };
        if let Some(grant) = get(&self.starts, caller, target) {
            return Decision::Allowed(Allowance::Start {
                link_id: grant.link_id.clone(),
                answer_only_back: grant.answer_only_back,
            });
        }
        if let Some(link_id) = get(&self.replies, caller, target) {
            if context_id.is_some_and(started) {
                return Decision::Allowed(Allowance::Answer { link_id: link_id.clone() });
            }
            return self.denied(caller, target, DenialReason::AnswerOnly { link_id: link_id.to_string() });
        }
        let reason = match get(&self.disabled, caller, target) {
            Some(link_id) => DenialReason::Disabled { link_id: link_id.to_string() },
            None => DenialReason::NoLink,
        };
        self.denied(caller, target, reason)
    }

    /// The link with this id, enabled or not.
    pub fn link(&self, id: &str) -> Option<&Link> {
        self.by_id.get(id)
    }

    /// The links `agent` is an end of, enabled or not, in no particular order.
    pub fn links_of<'a>(&'a self, agent: &'a str) -> impl Iterator<Item = &'a Link> + 'a {
        self.by_id.values().filter(move |link| link.from_agent_id == agent || link.to_agent_id == agent)
    }

    /// `agent`'s place in the organisation (seed 004): its superiors, subordinates and peers over
    /// its enabled links, each list sorted.
    pub fn org_chart(&self, agent: &str) -> OrgChart {
        OrgChart::of(agent, self.links_of(agent))
    }

    /// The link a call from `caller` to `target` goes over, whatever the mode: the one letting
    /// it start, else the one letting it answer, else a disabled one between them.
    pub fn link_for(&self, caller: &str, target: &str) -> Option<&Link> {
        let id = get(&self.starts, caller, target)
            .map(|grant| &grant.link_id)
            .or_else(|| get(&self.replies, caller, target))
            .or_else(|| get(&self.disabled, caller, target))?;
        self.by_id.get(id.as_ref())
    }

    fn denied(&self, caller: &str, target: &str, reason: DenialReason) -> Decision {
        Decision::Denied(Denial { caller: caller.to_owned(), target: target.to_owned(), reason })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use mesh_protocol::graph::{LinkRelationship, LinkSource};

    use super::*;

    /// A peer link, as the registry would serve it.
    pub(crate) fn link(id: &str, from: &str, to: &str, direction: LinkDirection, enabled: bool) -> Link {
        Link {
            id: id.into(),
            from_agent_id: from.into(),
            to_agent_id: to.into(),
            direction,
            relationship: LinkRelationship::Peer,
            enabled,
            source: LinkSource::Api,
            created_at: "2026-11-24T00:00:00Z".into(),
            updated_at: "2026-11-24T00:00:00Z".into(),
        }
    }

    fn enforced(links: Vec<Link>) -> Policy {
        Policy::new(&GraphPolicy { mode: GraphMode::Enforced, links }).unwrap()
    }

    fn never(_: &str) -> bool {
        panic!("no conversation should be looked up")
    }

    fn denial(decision: Decision) -> Denial {
        match decision {
            Decision::Denied(denial) => denial,
            Decision::Allowed(allowance) => panic!("allowed: {allowance:?}"),
        }
    }

    #[test]
    fn open_mode_allows_everything_without_links() {
        let policy = Policy::new(&GraphPolicy { mode: GraphMode::Open, links: Vec::new() }).unwrap();
        assert_eq!(policy.check(Some("a"), "b", None, never), Decision::Allowed(Allowance::Open));
        assert_eq!(
            Policy::empty(GraphMode::Open).check(Some("a"), "b", None, never),
            Decision::Allowed(Allowance::Open)
        );
    }

    #[test]
    fn enforced_mode_without_a_link_denies_naming_it() {
        let denial = denial(enforced(Vec::new()).check(Some("a"), "b", None, never));
        assert_eq!(denial.reason, DenialReason::NoLink);
        assert_eq!(denial.to_string(), "no enabled link lets a call b (no link a -> b exists)");
    }

    #[test]
    fn a_call_from_no_agent_is_not_governed() {
        assert_eq!(enforced(Vec::new()).check(None, "b", None, never), Decision::Allowed(Allowance::NotFromAgent));
    }

    #[test]
    fn two_way_links_allow_both_ways() {
        let policy = enforced(vec![link("l1", "a", "b", LinkDirection::TwoWay, true)]);
        for (caller, target) in [("a", "b"), ("b", "a")] {
            assert_eq!(
                policy.check(Some(caller), target, None, never),
                Decision::Allowed(Allowance::Start { link_id: "l1".into(), answer_only_back: false }),
                "{caller} -> {target}"
            );
        }
    }

    #[test]
    fn one_way_allows_forward_and_only_answers_back() {
        let policy = enforced(vec![link("l1", "boss", "worker", LinkDirection::OneWay, true)]);
        assert_eq!(
            policy.check(Some("boss"), "worker", Some("c1"), never),
            Decision::Allowed(Allowance::Start { link_id: "l1".into(), answer_only_back: true })
        );
        // The reverse may not start: without a conversation, or in one the boss did not start.
        let started = |context: &str| context == "c1";
        let no_context = denial(policy.check(Some("worker"), "boss", None, started));
        assert_eq!(no_context.reason, DenialReason::AnswerOnly { link_id: "l1".into() });
        assert!(no_context.to_string().contains("answer only inside a conversation boss started"), "{no_context}");
        assert_eq!(denial(policy.check(Some("worker"), "boss", Some("c2"), started)).reason, no_context.reason);
        // ... but answers inside the one the boss started.
        assert_eq!(
            policy.check(Some("worker"), "boss", Some("c1"), started),
            Decision::Allowed(Allowance::Answer { link_id: "l1".into() })
        );
    }

    #[test]
    fn a_disabled_link_denies_naming_it() {
        let policy = enforced(vec![link("l1", "a", "b", LinkDirection::TwoWay, false)]);
        for (caller, target) in [("a", "b"), ("b", "a")] {
            let denial = denial(policy.check(Some(caller), target, None, never));
            assert_eq!(denial.reason, DenialReason::Disabled { link_id: "l1".into() });
            assert!(denial.to_string().starts_with(&format!("no enabled link lets {caller} call {target}")));
        }
        // A disabled one_way link gives no answer rights either.
        let policy = enforced(vec![link("l2", "a", "b", LinkDirection::OneWay, false)]);
        assert_eq!(
            denial(policy.check(Some("b"), "a", Some("c"), |_| true)).reason,
            DenialReason::Disabled { link_id: "l2".into() }
        );
    }

    #[test]
    fn the_link_for_a_call_prefers_the_one_it_may_start_on() {
        let policy = enforced(vec![
            link("forth", "a", "b", LinkDirection::OneWay, true),
            link("off", "a", "c", LinkDirection::TwoWay, false),
        ]);
        assert_eq!(policy.link_for("a", "b").map(|l| l.id.as_str()), Some("forth"));
        assert_eq!(policy.link_for("b", "a").map(|l| l.id.as_str()), Some("forth"), "the answer link");
        assert_eq!(policy.link_for("c", "a").map(|l| l.id.as_str()), Some("off"));
        assert!(policy.link_for("b", "c").is_none());
    }

    #[test]
    fn an_unknown_caller_is_denied() {
        let policy = enforced(vec![link("l1", "a", "b", LinkDirection::TwoWay, true)]);
        assert_eq!(denial(policy.check(Some("stranger"), "b", None, never)).reason, DenialReason::NoLink);
        assert_eq!(denial(policy.check(Some("a"), "stranger", None, never)).caller, "a");
    }

    #[test]
    fn a_link_each_way_lets_both_start() {
        let policy = enforced(vec![
            link("l1", "a", "b", LinkDirection::OneWay, true),
            link("l2", "b", "a", LinkDirection::OneWay, true),
        ]);
        assert_eq!(
            policy.check(Some("b"), "a", None, never),
            Decision::Allowed(Allowance::Start { link_id: "l2".into(), answer_only_back: false })
        );
        // A two_way link back does not take the name of a link in the call's own direction.
        let policy = enforced(vec![
            link("l1", "a", "b", LinkDirection::TwoWay, true),
            link("l2", "b", "a", LinkDirection::OneWay, true),
        ]);
        assert_eq!(
            policy.check(Some("b"), "a", None, never),
            Decision::Allowed(Allowance::Start { link_id: "l2".into(), answer_only_back: false })
        );
    }

    #[test]
    fn oversized_documents_and_self_links() {
        let links = vec![link("x", "a", "b", LinkDirection::TwoWay, true); GRAPH_LINKS_MAX + 1];
        let error = Policy::new(&GraphPolicy { mode: GraphMode::Enforced, links }).unwrap_err();
        assert_eq!(error, PolicyError::TooManyLinks { links: GRAPH_LINKS_MAX + 1 });
        let policy = enforced(vec![link("self", "a", "a", LinkDirection::TwoWay, true)]);
        assert_eq!(denial(policy.check(Some("a"), "a", None, never)).reason, DenialReason::NoLink);
    }
}
