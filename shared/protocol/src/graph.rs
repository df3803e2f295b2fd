//! The communication graph (seed 004): links between agents, the topology, the policy feed the
//! agents cache, link messages, and the registry's live events (`GET /api/events`).

use serde::{Deserialize, Serialize};

use crate::registry::HealthStatus;

/// Who may start conversations over a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LinkDirection {
    /// Only `from_agent_id` starts conversations; `to_agent_id` answers inside them.
    OneWay,
    /// Either agent starts conversations.
    #[default]
    TwoWay,
}

impl LinkDirection {
    /// The wire word, as stored and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OneWay => "one_way",
            Self::TwoWay => "two_way",
        }
    }
}

/// How the link frames the conversation, read from `from_agent_id`'s side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LinkRelationship {
    /// Equals: neither has authority over the other.
    #[default]
    Peer,
    /// `from_agent_id` is the superior of `to_agent_id`.
    Superior,
    /// `from_agent_id` reports to `to_agent_id`.
    Subordinate,
}

impl LinkRelationship {
    /// The wire word, as stored and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Peer => "peer",
            Self::Superior => "superior",
            Self::Subordinate => "subordinate",
        }
    }

    /// The same relationship read from the other end of the link.
    pub fn reversed(self) -> Self {
        match self {
            Self::Peer => Self::Peer,
            Self::Superior => Self::Subordinate,
            Self::Subordinate => Self::Superior,
        }
    }
}

/// Where a link was defined: the registry's configuration wins over the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LinkSource {
    /// A `[[links]]` entry of the registry's TOML, synced at start and on reload.
    Config,
    /// Created through `POST /api/links`.
    #[default]
    Api,
}

impl LinkSource {
    /// The wire word, as stored and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Api => "api",
        }
    }
}

/// Whether agents check calls against the links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GraphMode {
    /// Every call is allowed; links only describe the organisation.
    #[default]
    Open,
    /// A call needs an enabled link allowing it (see [`Link::allows_start`]).
    Enforced,
}

/// A directed, policy-governed channel between two agents (seed 004's `AgentLink`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Link {
    pub id: String,
    pub from_agent_id: String,
    pub to_agent_id: String,
    pub direction: LinkDirection,
    pub relationship: LinkRelationship,
    pub enabled: bool,
    pub source: LinkSource,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

impl Link {
    /// The conversation (A2A `contextId`) of the link's internal channel.
    pub fn context_id(&self) -> String {
        link_context_id(&self.id)
    }

    /// Whether `caller` may start a conversation with `callee` over this link.
    pub fn allows_start(&self, caller: &str, callee: &str) -> bool {
        self.enabled
            && ((self.from_agent_id == caller && self.to_agent_id == callee)
                || (self.direction == LinkDirection::TwoWay
                    && self.from_agent_id == callee
                    && self.to_agent_id == caller))
    }

    /// Whether the link joins `a` and `b`, in either direction.
    pub fn joins(&self, a: &str, b: &str) -> bool {
        (self.from_agent_id == a && self.to_agent_id == b) || (self.from_agent_id == b && self.to_agent_id == a)
    }

    /// The relationship of `agent`'s end to the other end; `None` when `agent` is not on the link.
    pub fn relationship_of(&self, agent: &str) -> Option<LinkRelationship> {
        if self.from_agent_id == agent {
            Some(self.relationship)
        } else if self.to_agent_id == agent {
            Some(self.relationship.reversed())
        } else {
            None
        }
    }
}

/// Prefix of the A2A `contextId` of a link's internal channel (`link:{link_id}`).
pub const LINK_CONTEXT_PREFIX: &str = "link:";

pub fn link_context_id(link_id: &str) -> String {
    format!("{LINK_CONTEXT_PREFIX}{link_id}")
}

/// Body of `POST /api/links`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewLink {
    pub from_agent_id: String,
    pub to_agent_id: String,
    #[serde(default)]
    pub direction: LinkDirection,
    #[serde(default)]
    pub relationship: LinkRelationship,
    #[serde(default = "link_enabled_default")]
    pub enabled: bool,
}

/// A link is enabled unless it says otherwise (the API's and the configuration's default).
pub fn link_enabled_default() -> bool {
    true
}

/// Body of `PUT /api/links/{id}`: the properties to change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LinkUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<LinkDirection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relationship: Option<LinkRelationship>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `GET /api/links` and `GET /api/agents/{id}/links`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LinkList {
    /// Set when the list is one agent's links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    pub links: Vec<Link>,
}

/// `GET /api/policy`: what agents cache to check their calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GraphPolicy {
    pub mode: GraphMode,
    pub links: Vec<Link>,
}

/// An agent in `GET /api/topology`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopologyAgent {
    pub id: String,
    pub name: String,
    pub url: String,
    pub health_status: HealthStatus,
    pub capabilities: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_health_check: Option<String>,
}

/// A link in `GET /api/topology`, in the seed's short form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopologyLink {
    pub id: String,
    pub from: String,
    pub to: String,
    pub direction: LinkDirection,
    pub relationship: LinkRelationship,
    pub enabled: bool,
}

/// `GET /api/topology`: the whole graph, for the dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Topology {
    pub mode: GraphMode,
    pub agents: Vec<TopologyAgent>,
    pub links: Vec<TopologyLink>,
}

/// `GET /api/agents/{id}/org`: an agent's place in the organisation, from its enabled links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OrgChart {
    pub agent_id: String,
    pub superiors: Vec<String>,
    pub subordinates: Vec<String>,
    pub peers: Vec<String>,
}

impl OrgChart {
    /// `agent`'s place from `links`: each enabled link it is an end of, read from its end (a
    /// `superior` link from `agent` makes the other end a subordinate, one towards `agent` a
    /// superior); every list sorted, each name once.
    pub fn of<'a>(agent: &str, links: impl IntoIterator<Item = &'a Link>) -> Self {
        let mut chart =
            Self { agent_id: agent.to_owned(), superiors: Vec::new(), subordinates: Vec::new(), peers: Vec::new() };
        for link in links.into_iter().filter(|l| l.enabled) {
            let other = if link.from_agent_id == agent { &link.to_agent_id } else { &link.from_agent_id };
            let list = match link.relationship_of(agent) {
                Some(LinkRelationship::Superior) => &mut chart.subordinates,
                Some(LinkRelationship::Subordinate) => &mut chart.superiors,
                Some(LinkRelationship::Peer) => &mut chart.peers,
                None => continue,
            };
            if !list.contains(other) {
                list.push(other.clone());
            }
        }
        for list in [&mut chart.superiors, &mut chart.subordinates, &mut chart.peers] {
            list.sort();
        }
        chart
    }
}

/// How a call or a message over a link ended (seed 003's statuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum OutcomeStatus {
    Success,
    Partial,
    Error,
    Timeout,
}

impl OutcomeStatus {
    /// The wire word, as stored and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "SUCCESS",
            Self::Partial => "PARTIAL",
            Self::Error => "ERROR",
            Self::Timeout => "TIMEOUT",
        }
    }
}

/// Body of `POST /api/links/{id}/messages`: a message the sending agent delivered over the link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewLinkMessage {
    pub from_agent_id: String,
    pub to_agent_id: String,
    /// The A2A `contextId` it was sent in (`link:{link_id}`).
    pub context_id: String,
    /// The receiver's task, when it answered with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub text: String,
    /// The receiver's answer, as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    pub status: OutcomeStatus,
    /// The tenant of the call the message was sent for (the user's, carried on); the registry
    /// records it only when the sender's credential may act for it. Absent: the credential's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// A message in a link's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LinkMessage {
    pub id: String,
    pub link_id: String,
    pub from_agent_id: String,
    pub to_agent_id: String,
    /// The sender's relationship to the receiver over this link.
    pub relationship: LinkRelationship,
    pub context_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    pub status: OutcomeStatus,
    /// RFC 3339.
    pub sent_at: String,
    /// The tenant it was sent for (`""`: the default tenant): only its users, admins and the
    /// agents acting for it read it.
    #[serde(default)]
    pub tenant: String,
}

/// `GET /api/links/{id}/messages`, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LinkMessages {
    pub link_id: String,
    pub messages: Vec<LinkMessage>,
}

/// One call an agent made, as it reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CallReport {
    pub from: String,
    pub to: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    pub status: OutcomeStatus,
    pub latency_ms: u64,
    /// RFC 3339 time the call ended; the registry's clock when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The tenant the call was made for, as [`NewLinkMessage::tenant`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// Body of `POST /api/events/calls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CallReports {
    pub calls: Vec<CallReport>,
}

/// Answer to `POST /api/events/calls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallReportsAccepted {
    pub accepted: usize,
}

/// `GET /api/events/stats`: how the event stream is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventStats {
    /// Streams open now.
    pub subscribers: usize,
    /// Events live readers skipped because they fell a whole buffer behind, since start.
    pub missed_by_readers: u64,
    /// Events published since start.
    pub published: u64,
}

/// An event of `GET /api/events`; its `id` orders events and resumes a stream (`Last-Event-ID`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MeshEvent {
    pub id: u64,
    /// RFC 3339.
    pub at: String,
    #[serde(flatten)]
    pub body: EventBody,
}

/// What happened; `kind` names it (also the SSE `event:` field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventBody {
    AgentRegistered {
        agent_id: String,
        url: String,
    },
    AgentDeregistered {
        agent_id: String,
        url: String,
    },
    HealthChanged {
        agent_id: String,
        from: HealthStatus,
        to: HealthStatus,
    },
    LinkCreated {
        link: Link,
    },
    LinkUpdated {
        link: Link,
    },
    LinkDeleted {
        link_id: String,
        from_agent_id: String,
        to_agent_id: String,
    },
    AgentMessageSent {
        link_id: String,
        from_agent_id: String,
        to_agent_id: String,
        context_id: String,
        message_id: String,
        /// The message's tenant: only readers who may read its history see the event.
        #[serde(default)]
        tenant: String,
    },
    AgentMessageReceived {
        link_id: String,
        from_agent_id: String,
        to_agent_id: String,
        context_id: String,
        message_id: String,
        /// The message's tenant: only readers who may read its history see the event.
        #[serde(default)]
        tenant: String,
    },
    Call {
        from: String,
        to: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        capability: Option<String>,
        status: OutcomeStatus,
        latency_ms: u64,
        /// The tenant the call was made for: only readers acting for it see the event.
        #[serde(default)]
        tenant: String,
    },
    /// Events are missing before the next one: the stream resumed past what is still buffered,
    /// or a slow reader fell a whole buffer behind. `missed` counts them; it is absent when the
    /// registry restarted meanwhile and cannot know. A reader should reload its state.
    Gap {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        missed: Option<u64>,
    },
}

impl EventBody {
    /// The `kind` tag, for the SSE `event:` field.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::AgentRegistered { .. } => "agent_registered",
            Self::AgentDeregistered { .. } => "agent_deregistered",
            Self::HealthChanged { .. } => "health_changed",
            Self::LinkCreated { .. } => "link_created",
            Self::LinkUpdated { .. } => "link_updated",
            Self::LinkDeleted { .. } => "link_deleted",
            Self::AgentMessageSent { .. } => "agent_message_sent",
            Self::AgentMessageReceived { .. } => "agent_message_received",
            Self::Call { .. } => "call",
            Self::Gap { .. } => "gap",
        }
    }

    /// The tenant whose work the event tells of; `None` for what every reader of the graph may
    /// know (registrations, health, links, gaps).
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Self::AgentMessageSent { tenant, .. }
            | Self::AgentMessageReceived { tenant, .. }
            | Self::Call { tenant, .. } => Some(tenant),
            Self::AgentRegistered { .. }
            | Self::AgentDeregistered { .. }
            | Self::HealthChanged { .. }
            | Self::LinkCreated { .. }
            | Self::LinkUpdated { .. }
            | Self::LinkDeleted { .. }
            | Self::Gap { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn link(from: &str, to: &str, direction: LinkDirection, relationship: LinkRelationship) -> Link {
        Link {
            id: "l1".into(),
            from_agent_id: from.into(),
            to_agent_id: to.into(),
            direction,
            relationship,
            enabled: true,
            source: LinkSource::Api,
            created_at: "2026-01-01T00:00:00Z".into(),
            updated_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn stored_words_are_the_wire_words() {
        for d in [LinkDirection::OneWay, LinkDirection::TwoWay] {
            assert_eq!(serde_json::to_value(d).unwrap(), json!(d.as_str()));
        }
        for r in [LinkRelationship::Peer, LinkRelationship::Superior, LinkRelationship::Subordinate] {
            assert_eq!(serde_json::to_value(r).unwrap(), json!(r.as_str()));
        }
        for s in [LinkSource::Config, LinkSource::Api] {
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
        }
        for o in [OutcomeStatus::Success, OutcomeStatus::Partial, OutcomeStatus::Error, OutcomeStatus::Timeout] {
            assert_eq!(serde_json::to_value(o).unwrap(), json!(o.as_str()));
        }
    }

    #[test]
    fn a_one_way_link_lets_only_its_source_start() {
        let one_way = link("a", "b", LinkDirection::OneWay, LinkRelationship::Peer);
        assert!(one_way.allows_start("a", "b"));
        assert!(!one_way.allows_start("b", "a"));
        let two_way = link("a", "b", LinkDirection::TwoWay, LinkRelationship::Peer);
        assert!(two_way.allows_start("a", "b") && two_way.allows_start("b", "a"));
        assert!(!two_way.allows_start("a", "c"));
        let disabled = Link { enabled: false, ..two_way };
        assert!(!disabled.allows_start("a", "b"));
    }

    #[test]
    fn a_link_joins_its_two_ends_either_way_round_and_nothing_else() {
        for direction in [LinkDirection::OneWay, LinkDirection::TwoWay] {
            let l = link("a", "b", direction, LinkRelationship::Peer);
            assert!(l.joins("a", "b") && l.joins("b", "a"), "{direction:?}");
            for (x, y) in [("a", "c"), ("c", "b"), ("b", "c"), ("c", "a"), ("a", "a"), ("b", "b"), ("c", "d")] {
                assert!(!l.joins(x, y), "{direction:?} link a-b does not join {x} and {y}");
            }
        }
        let disabled = Link { enabled: false, ..link("a", "b", LinkDirection::OneWay, LinkRelationship::Peer) };
        assert!(disabled.joins("b", "a"), "a disabled link still joins its ends");
    }

    #[test]
    fn relationship_reads_the_other_way_round_from_the_target() {
        let l = link("boss", "worker", LinkDirection::TwoWay, LinkRelationship::Superior);
        assert_eq!(l.relationship_of("boss"), Some(LinkRelationship::Superior));
        assert_eq!(l.relationship_of("worker"), Some(LinkRelationship::Subordinate));
        assert_eq!(l.relationship_of("other"), None);
        assert_eq!(l.context_id(), "link:l1");
    }

    #[test]
    fn an_org_chart_reads_each_enabled_link_from_the_agents_end_once() {
        let links = [
            link("boss", "lead", LinkDirection::OneWay, LinkRelationship::Superior),
            link("lead", "dev", LinkDirection::TwoWay, LinkRelationship::Superior),
            link("qa", "lead", LinkDirection::TwoWay, LinkRelationship::Subordinate),
            link("lead", "pm", LinkDirection::TwoWay, LinkRelationship::Peer),
            // The same pair twice: the name is listed once.
            link("dev", "lead", LinkDirection::OneWay, LinkRelationship::Subordinate),
            Link { enabled: false, ..link("lead", "ops", LinkDirection::TwoWay, LinkRelationship::Peer) },
            link("boss", "pm", LinkDirection::TwoWay, LinkRelationship::Superior),
        ];
        assert_eq!(
            OrgChart::of("lead", &links),
            OrgChart {
                agent_id: "lead".into(),
                superiors: vec!["boss".into()],
                subordinates: vec!["dev".into(), "qa".into()],
                peers: vec!["pm".into()],
            }
        );
        assert_eq!(
            OrgChart::of("boss", &links),
            OrgChart {
                agent_id: "boss".into(),
                superiors: vec![],
                subordinates: vec!["lead".into(), "pm".into()],
                peers: vec![],
            }
        );
    }

    #[test]
    fn events_carry_their_kind_flat_beside_id_and_time() {
        let event = MeshEvent {
            id: 7,
            at: "2026-01-01T00:00:00Z".into(),
            body: EventBody::Call {
                from: "orchestrator".into(),
                to: "search".into(),
                capability: Some("search".into()),
                status: OutcomeStatus::Success,
                latency_ms: 12,
                tenant: "acme".into(),
            },
        };
        let value = serde_json::to_value(&event).unwrap();
        assert_eq!(
            value,
            json!({"id":7,"at":"2026-01-01T00:00:00Z","kind":"call","from":"orchestrator","to":"search",
                   "capability":"search","status":"SUCCESS","latency_ms":12,"tenant":"acme"})
        );
        assert_eq!((event.body.kind(), event.body.tenant()), ("call", Some("acme")));
        assert_eq!(EventBody::Gap { missed: None }.tenant(), None, "a gap is every reader's");
        assert_eq!(serde_json::from_value::<MeshEvent>(value).unwrap(), event);
    }

    #[test]
    fn new_links_default_to_an_enabled_two_way_peer_link_and_refuse_unknown_values() {
        let new: NewLink = serde_json::from_value(json!({"from_agent_id":"a","to_agent_id":"b"})).unwrap();
        assert_eq!(
            (new.direction, new.relationship, new.enabled),
            (LinkDirection::TwoWay, LinkRelationship::Peer, true)
        );
        let bad =
            serde_json::from_value::<NewLink>(json!({"from_agent_id":"a","to_agent_id":"b","direction":"sideways"}));
        assert!(bad.unwrap_err().to_string().contains("sideways"));
    }
}
