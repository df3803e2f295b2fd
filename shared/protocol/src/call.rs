//! The context every agent-to-agent call carries (seed 000, Kelpie ADR-028; seed 003's request
//! fields): the chain of agents the call went through, its depth, the milliseconds left before the
//! caller gives up, the request and correlation ids, the priority, the tenant, and the
//! conversation (A2A `contextId`) the call belongs to, which the link policy's answer rule reads.
//!
//! It travels as HTTP headers ([`CallContext::to_headers`], [`CallContext::from_headers`]) and,
//! for the A2A bindings, inside message metadata under [`CALL_CONTEXT_METADATA_KEY`]
//! ([`CallContext::write_metadata`], [`CallContext::from_metadata`]). A receiving agent checks it
//! with [`CallContext::admit`] before doing any work.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A call whose depth has reached this is refused: at most this many agents deep.
pub const AGENT_CALL_DEPTH_MAX: u32 = 5;
/// Time a call gets when its caller names none.
pub const AGENT_CALL_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Most time any call may be given, whatever its caller asks for.
pub const AGENT_CALL_TIMEOUT_MS_MAX: u64 = 300_000;
/// Longest accepted tenant id (seed 002 §8: an invalid tenant id is refused).
pub const TENANT_ID_CHARS_MAX: usize = 64;
/// Longest accepted request or correlation id.
const CALL_ID_CHARS_MAX: usize = 128;

/// The agents the call went through, oldest first, each percent-encoded, joined by `,`.
pub const CALL_CHAIN_HEADER: &str = "x-mesh-call-chain";
/// How many agent-to-agent hops the call is from its origin (the chain's length).
pub const CALL_DEPTH_HEADER: &str = "x-mesh-call-depth";
/// Milliseconds the caller still waits for this call, counted from when it was sent.
pub const CALL_DEADLINE_MS_HEADER: &str = "x-mesh-deadline-ms";
pub const REQUEST_ID_HEADER: &str = "x-request-id";
pub const CORRELATION_ID_HEADER: &str = "x-correlation-id";
pub const PRIORITY_HEADER: &str = "x-mesh-priority";
pub const TENANT_HEADER: &str = "x-mesh-tenant";
/// The conversation (A2A `contextId`) the call belongs to. For the A2A bindings it equals the
/// message's `contextId`; seed `/tasks/send` calls have no other place for it.
pub const CONTEXT_ID_HEADER: &str = "x-mesh-context-id";

/// Key of the call context inside A2A message (or task) metadata.
pub const CALL_CONTEXT_METADATA_KEY: &str = "urn:a2a-mesh:call-context:v1";

/// Everything but letters, digits, `-`, `_`, `.` and `~` is escaped in a chain entry, so names
/// with commas, spaces or any Unicode travel in a header intact.
const CHAIN_ESCAPED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// Seed 003's request priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Priority {
    High,
    #[default]
    Normal,
    Low,
}

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::High => "HIGH",
            Self::Normal => "NORMAL",
            Self::Low => "LOW",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        match value.to_ascii_uppercase().as_str() {
            "HIGH" => Some(Self::High),
            "NORMAL" => Some(Self::Normal),
            "LOW" => Some(Self::Low),
            _ => None,
        }
    }
}

/// What travels with every agent-to-agent call.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CallContext {
    /// Agents the call went through, oldest first; the last one is the immediate caller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<String>,
    /// Hops from the origin; equals the chain's length when every hop is a mesh agent.
    #[serde(default)]
    pub depth: u32,
    /// Milliseconds the caller waits for this call, from when it was sent; `None` for no caller
    /// deadline (the default timeout then applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Shared by every call of one workflow (seed 003).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    #[serde(default)]
    pub priority: Priority,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The conversation (A2A `contextId`) this hop belongs to; each hop names its own, so it is
    /// not carried over to the calls made while handling this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
}

/// Why a call context is refused before any work; each kind has its own error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallRejection {
    /// The receiving agent is already in the chain: answering would call back into a waiting agent.
    CycleDetected { agent: String, chain: Vec<String> },
    /// The call is [`AGENT_CALL_DEPTH_MAX`] or more hops deep.
    DepthExceeded { depth: u32, chain: Vec<String> },
    /// A context field is malformed (not a number, an unknown priority, a bad tenant id, ...).
    Invalid(String),
}

impl CallRejection {
    /// The `CATEGORY_SPECIFIC_ERROR` code of seed 003.
    pub fn error_code(&self) -> &'static str {
        match self {
            Self::CycleDetected { .. } => "CALL_CYCLE_DETECTED",
            Self::DepthExceeded { .. } => "CALL_DEPTH_EXCEEDED",
            Self::Invalid(_) => "CALL_CONTEXT_INVALID",
        }
    }
}

impl std::fmt::Display for CallRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CycleDetected { agent, chain } => {
                write!(f, "cycle detected: {agent:?} is already in the call chain {}", show_chain(chain, Some(agent)))
            }
            Self::DepthExceeded { depth, chain } => write!(
                f,
                "call depth exceeded: depth {depth} reaches the limit of {AGENT_CALL_DEPTH_MAX} (call chain {})",
                show_chain(chain, None)
            ),
            Self::Invalid(reason) => write!(f, "invalid call context: {reason}"),
        }
    }
}

impl std::error::Error for CallRejection {}

/// `a -> b -> c`, ending with `next` when given (the agent the call was headed to).
fn show_chain(chain: &[String], next: Option<&str>) -> String {
    let mut hops: Vec<&str> = chain.iter().map(String::as_str).collect();
    hops.extend(next);
    if hops.is_empty() { "(empty)".to_owned() } else { hops.join(" -> ") }
}

impl CallContext {
    /// Reads the context from request headers (`header` looks one up by lower-case name).
    /// Absent headers give defaults: a call from outside the mesh has an empty chain.
    pub fn from_headers<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Result<Self, CallRejection> {
        let chain = match header(CALL_CHAIN_HEADER).map(str::trim).filter(|v| !v.is_empty()) {
            Some(value) => value.split(',').map(decode_chain_entry).collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let depth = match header(CALL_DEPTH_HEADER) {
            Some(value) => value.trim().parse::<u32>().map_err(|_| {
                CallRejection::Invalid(format!("{CALL_DEPTH_HEADER} must be a whole number, not {value:?}"))
            })?,
            None => 0,
        };
        let deadline_ms = match header(CALL_DEADLINE_MS_HEADER) {
            Some(value) => Some(value.trim().parse::<u64>().map_err(|_| {
                CallRejection::Invalid(format!("{CALL_DEADLINE_MS_HEADER} must be a whole number, not {value:?}"))
            })?),
            None => None,
        };
        let priority = match header(PRIORITY_HEADER) {
            Some(value) => Priority::parse(value.trim()).ok_or_else(|| {
                CallRejection::Invalid(format!("{PRIORITY_HEADER} must be HIGH, NORMAL or LOW, not {value:?}"))
            })?,
            None => Priority::Normal,
        };
        let context = Self {
            chain,
            depth,
            deadline_ms,
            request_id: header(REQUEST_ID_HEADER).map(str::to_owned),
            correlation_id: header(CORRELATION_ID_HEADER).map(str::to_owned),
            priority,
            tenant: header(TENANT_HEADER).map(str::to_owned),
            context_id: header(CONTEXT_ID_HEADER).map(str::to_owned),
        };
        context.validate()?;
        Ok(context)
    }

    /// The headers carrying this context, names in lower case.
    pub fn to_headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = Vec::with_capacity(8);
        if !self.chain.is_empty() {
            let entries: Vec<String> =
                self.chain.iter().map(|name| utf8_percent_encode(name, CHAIN_ESCAPED).to_string()).collect();
            headers.push((CALL_CHAIN_HEADER, entries.join(",")));
        }
        headers.push((CALL_DEPTH_HEADER, self.depth.to_string()));
        if let Some(deadline_ms) = self.deadline_ms {
            headers.push((CALL_DEADLINE_MS_HEADER, deadline_ms.to_string()));
        }
        headers.extend(self.request_id.clone().map(|id| (REQUEST_ID_HEADER, id)));
        headers.extend(self.correlation_id.clone().map(|id| (CORRELATION_ID_HEADER, id)));
        headers.push((PRIORITY_HEADER, self.priority.as_str().to_owned()));
        headers.extend(self.tenant.clone().map(|tenant| (TENANT_HEADER, tenant)));
        headers.extend(self.context_id.clone().map(|context| (CONTEXT_ID_HEADER, context)));
        headers
    }

    /// Puts this context into A2A message or task metadata, under [`CALL_CONTEXT_METADATA_KEY`].
    pub fn write_metadata(&self, metadata: &mut Map<String, Value>) {
        if let Ok(value) = serde_json::to_value(self) {
            metadata.insert(CALL_CONTEXT_METADATA_KEY.to_owned(), value);
        }
    }

    /// The context carried in A2A metadata, if any, validated like the headers.
    pub fn from_metadata(metadata: &Map<String, Value>) -> Result<Option<Self>, CallRejection> {
        let Some(value) = metadata.get(CALL_CONTEXT_METADATA_KEY) else {
            return Ok(None);
        };
        let context = Self::deserialize(value)
            .map_err(|e| CallRejection::Invalid(format!("{CALL_CONTEXT_METADATA_KEY}: {e}")))?;
        context.validate()?;
        Ok(Some(context))
    }

    /// Refuses the call, before any work, when `agent` (the receiver) is already in the chain or
    /// the call is [`AGENT_CALL_DEPTH_MAX`] hops deep. A depth header lower than the chain's
    /// length counts as the chain's length, so a caller cannot reset the count.
    pub fn admit(&self, agent: &str) -> Result<(), CallRejection> {
        if self.chain.iter().any(|hop| hop == agent) {
            return Err(CallRejection::CycleDetected { agent: agent.to_owned(), chain: self.chain.clone() });
        }
        let depth = self.effective_depth();
        if depth >= AGENT_CALL_DEPTH_MAX {
            return Err(CallRejection::DepthExceeded { depth, chain: self.chain.clone() });
        }
        Ok(())
    }

    /// The context of a call `caller` makes while handling this one: the caller joins the chain,
    /// the depth grows by one, and the callee gets `timeout_ms`; ids, priority and tenant carry over.
    pub fn next_hop(&self, caller: &str, timeout_ms: u64) -> Self {
        let mut chain = self.chain.clone();
        chain.push(caller.to_owned());
        Self {
            chain,
            depth: self.effective_depth().saturating_add(1),
            deadline_ms: Some(timeout_ms),
            request_id: self.request_id.clone(),
            correlation_id: self.correlation_id.clone().or_else(|| self.request_id.clone()),
            priority: self.priority,
            tenant: self.tenant.clone(),
            context_id: None,
        }
    }

    fn effective_depth(&self) -> u32 {
        self.depth.max(u32::try_from(self.chain.len()).unwrap_or(u32::MAX))
    }

    fn validate(&self) -> Result<(), CallRejection> {
        if let Some(tenant) = &self.tenant {
            validate_tenant_id(tenant).map_err(CallRejection::Invalid)?;
        }
        let ids = [
            ("request id", &self.request_id),
            ("correlation id", &self.correlation_id),
            ("context id", &self.context_id),
        ];
        for (name, id) in ids {
            if id.as_ref().is_some_and(|id| id.is_empty() || id.chars().count() > CALL_ID_CHARS_MAX) {
                return Err(CallRejection::Invalid(format!("the {name} must be 1 to {CALL_ID_CHARS_MAX} characters")));
            }
        }
        if self.chain.iter().any(String::is_empty) {
            return Err(CallRejection::Invalid("the call chain holds an empty agent name".into()));
        }
        Ok(())
    }
}

/// The time a call gets: `requested_ms` (or [`AGENT_CALL_TIMEOUT_MS_DEFAULT`]), at most
/// [`AGENT_CALL_TIMEOUT_MS_MAX`], and never more than the `left_ms` its caller still has.
pub fn call_timeout_ms(requested_ms: Option<u64>, left_ms: Option<u64>) -> u64 {
    let wanted = requested_ms.unwrap_or(AGENT_CALL_TIMEOUT_MS_DEFAULT).min(AGENT_CALL_TIMEOUT_MS_MAX);
    left_ms.map_or(wanted, |left| wanted.min(left))
}

/// A tenant id is 1 to [`TENANT_ID_CHARS_MAX`] letters, digits, `_` or `-`.
pub fn validate_tenant_id(tenant: &str) -> Result<(), String> {
    let valid = (1..=TENANT_ID_CHARS_MAX).contains(&tenant.chars().count())
        && tenant.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    if valid {
        Ok(())
    } else {
        Err(format!("tenant_id must be 1 to {TENANT_ID_CHARS_MAX} letters, digits, '_' or '-', not {tenant:?}"))
    }
}

fn decode_chain_entry(entry: &str) -> Result<String, CallRejection> {
    percent_decode_str(entry.trim()).decode_utf8().map(|name| name.into_owned()).map_err(|_| {
        CallRejection::Invalid(format!("{CALL_CHAIN_HEADER} entry {entry:?} is not percent-encoded UTF-8"))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn context(chain: &[&str]) -> CallContext {
        CallContext {
            chain: chain.iter().map(|s| (*s).to_owned()).collect(),
            depth: u32::try_from(chain.len()).unwrap(),
            ..CallContext::default()
        }
    }

    fn from_map(headers: &HashMap<&'static str, String>) -> Result<CallContext, CallRejection> {
        CallContext::from_headers(|name| headers.get(name).map(String::as_str))
    }

    #[test]
    fn headers_round_trip_names_with_commas_spaces_and_unicode() {
        let original = CallContext {
            chain: vec!["orchestrator".into(), "Échoes, Agent ✓".into()],
            depth: 2,
            deadline_ms: Some(1_500),
            request_id: Some("r-1".into()),
            correlation_id: Some("c-9".into()),
            priority: Priority::High,
            tenant: Some("acme_1".into()),
            context_id: Some("link:5f0c".into()),
        };
        let headers: HashMap<_, _> = original.to_headers().into_iter().collect();
        assert!(headers.values().all(|v| v.is_ascii()), "{headers:?}");
        assert_eq!(from_map(&headers).unwrap(), original);
    }

    #[test]
    fn ids_are_1_to_the_maximum_characters_counted_not_bytes() {
        for header in [REQUEST_ID_HEADER, CORRELATION_ID_HEADER, CONTEXT_ID_HEADER] {
            for accepted in ["x".to_owned(), "é".repeat(CALL_ID_CHARS_MAX)] {
                let headers = HashMap::from([(header, accepted.clone())]);
                assert!(from_map(&headers).is_ok(), "{header}: {} characters", accepted.chars().count());
            }
            for refused in [String::new(), "x".repeat(CALL_ID_CHARS_MAX + 1)] {
                let headers = HashMap::from([(header, refused.clone())]);
                let Err(CallRejection::Invalid(why)) = from_map(&headers) else {
                    panic!("{header} of {} characters was accepted", refused.len())
                };
                assert!(why.contains(&format!("1 to {CALL_ID_CHARS_MAX} characters")), "{why}");
            }
        }
    }

    #[test]
    fn absent_headers_are_a_call_from_outside_the_mesh() {
        let context = from_map(&HashMap::new()).unwrap();
        assert_eq!(context, CallContext::default());
        assert!(context.admit("search").is_ok());
    }

    #[test]
    fn malformed_headers_are_refused_naming_the_header() {
        for (header, value) in [
            (CALL_DEPTH_HEADER, "two"),
            (CALL_DEADLINE_MS_HEADER, "-5"),
            (PRIORITY_HEADER, "URGENT"),
            (TENANT_HEADER, "a b"),
            (CALL_CHAIN_HEADER, "a,%FF"),
        ] {
            let headers = HashMap::from([(header, value.to_owned())]);
            let error = from_map(&headers).unwrap_err();
            assert_eq!(error.error_code(), "CALL_CONTEXT_INVALID", "{header}");
        }
    }

    #[test]
    fn a_receiver_already_in_the_chain_is_a_cycle_naming_the_chain() {
        let error = context(&["orchestrator", "search"]).admit("orchestrator").unwrap_err();
        assert_eq!(error.error_code(), "CALL_CYCLE_DETECTED");
        assert_eq!(
            error.to_string(),
            "cycle detected: \"orchestrator\" is already in the call chain orchestrator -> search -> orchestrator"
        );
    }

    #[test]
    fn depth_five_is_refused_and_four_is_admitted() {
        assert!(context(&["a", "b", "c", "d"]).admit("e").is_ok());
        let error = context(&["a", "b", "c", "d", "e"]).admit("f").unwrap_err();
        assert_eq!(error.error_code(), "CALL_DEPTH_EXCEEDED");
        assert!(error.to_string().contains("a -> b -> c -> d -> e"), "{error}");
        // A lying depth header does not reset the count.
        let lying = CallContext { depth: 0, ..context(&["a", "b", "c", "d", "e"]) };
        assert_eq!(lying.admit("f").unwrap_err().error_code(), "CALL_DEPTH_EXCEEDED");
        let deep = CallContext { depth: 7, ..CallContext::default() };
        assert_eq!(deep.admit("f").unwrap_err().error_code(), "CALL_DEPTH_EXCEEDED");
    }

    #[test]
    fn the_next_hop_extends_the_chain_and_keeps_the_ids() {
        let incoming = CallContext {
            request_id: Some("r".into()),
            tenant: Some("t".into()),
            context_id: Some("c".into()),
            ..context(&["a"])
        };
        let next = incoming.next_hop("b", 900);
        assert_eq!(next.chain, ["a", "b"]);
        assert_eq!(next.depth, 2);
        assert_eq!(next.deadline_ms, Some(900));
        assert_eq!(next.correlation_id.as_deref(), Some("r"), "the first request id correlates the workflow");
        assert_eq!(next.tenant.as_deref(), Some("t"));
        assert_eq!(next.context_id, None, "each hop names its own conversation");
    }

    #[test]
    fn timeouts_default_cap_and_never_outlive_the_caller() {
        assert_eq!(call_timeout_ms(None, None), AGENT_CALL_TIMEOUT_MS_DEFAULT);
        assert_eq!(call_timeout_ms(Some(10_000_000), None), AGENT_CALL_TIMEOUT_MS_MAX);
        assert_eq!(call_timeout_ms(Some(5_000), Some(1_200)), 1_200);
        assert_eq!(call_timeout_ms(None, Some(0)), 0);
    }

    #[test]
    fn metadata_mirrors_the_headers() {
        let original = CallContext { deadline_ms: Some(10), tenant: Some("t1".into()), ..context(&["a", "b"]) };
        let mut metadata = Map::new();
        metadata.insert("other".into(), Value::Bool(true));
        original.write_metadata(&mut metadata);
        assert_eq!(metadata[CALL_CONTEXT_METADATA_KEY]["chain"], serde_json::json!(["a", "b"]));
        assert_eq!(CallContext::from_metadata(&metadata).unwrap(), Some(original));
        assert_eq!(CallContext::from_metadata(&Map::new()).unwrap(), None);
        let mut bad = Map::new();
        bad.insert(CALL_CONTEXT_METADATA_KEY.into(), serde_json::json!({"depth": "deep"}));
        assert_eq!(CallContext::from_metadata(&bad).unwrap_err().error_code(), "CALL_CONTEXT_INVALID");
        bad.insert(CALL_CONTEXT_METADATA_KEY.into(), serde_json::json!({"tenant": "no spaces"}));
        assert_eq!(CallContext::from_metadata(&bad).unwrap_err().error_code(), "CALL_CONTEXT_INVALID");
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// Every header the context is read from, by name.
        const CONTEXT_HEADERS: [&str; 8] = [
            CALL_CHAIN_HEADER,
            CALL_DEPTH_HEADER,
            CALL_DEADLINE_MS_HEADER,
            REQUEST_ID_HEADER,
            CORRELATION_ID_HEADER,
            PRIORITY_HEADER,
            TENANT_HEADER,
            CONTEXT_ID_HEADER,
        ];

        fn read(headers: &HashMap<&str, String>) -> Result<CallContext, CallRejection> {
            CallContext::from_headers(|name| headers.get(name).map(String::as_str))
        }

        fn priority() -> impl Strategy<Value = Priority> {
            prop_oneof![Just(Priority::High), Just(Priority::Normal), Just(Priority::Low)]
        }

        /// Ids as they travel in headers: printable ASCII.
        fn id() -> impl Strategy<Value = Option<String>> {
            proptest::option::of("[ -~]{1,64}")
        }

        fn valid_context() -> impl Strategy<Value = CallContext> {
            (
                // Agent names of any printable characters, commas and percent signs included.
                proptest::collection::vec("\\PC{1,16}", 0..6),
                any::<u32>(),
                proptest::option::of(any::<u64>()),
                (id(), id(), id()),
                priority(),
                proptest::option::of("[A-Za-z0-9_-]{1,64}"),
            )
                .prop_map(
                    |(chain, depth, deadline_ms, (request_id, correlation_id, context_id), priority, tenant)| {
                        CallContext {
                            chain,
                            depth,
                            deadline_ms,
                            request_id,
                            correlation_id,
                            priority,
                            tenant,
                            context_id,
                        }
                    },
                )
        }

        proptest! {
            /// Whatever a caller sends in the context headers, reading them answers a context
            /// or a rejection, never a panic; what is accepted is valid and reads back the same.
            #[test]
            fn any_header_values_give_a_context_or_a_rejection(values in proptest::collection::vec(proptest::option::of("\\PC{0,40}|[0-9 ]{0,12}|%[0-9A-Fa-f]{2}"), 8)) {
                let headers: HashMap<&str, String> =
                    CONTEXT_HEADERS.iter().zip(values).filter_map(|(name, value)| value.map(|v| (*name, v))).collect();
                if let Ok(context) = read(&headers) {
                    prop_assert!(context.validate().is_ok());
                    let written: HashMap<&str, String> = context.to_headers().into_iter().collect();
                    prop_assert_eq!(read(&written).unwrap(), context);
                }
            }

            /// A valid context survives the trip through headers and through A2A metadata.
            #[test]
            fn a_valid_context_round_trips(context in valid_context()) {
                let headers: HashMap<&str, String> = context.to_headers().into_iter().collect();
                prop_assert_eq!(&read(&headers).unwrap(), &context);
                let mut metadata = Map::new();
                context.write_metadata(&mut metadata);
                prop_assert_eq!(CallContext::from_metadata(&metadata).unwrap(), Some(context));
            }

            /// Any JSON under the metadata key gives a context or a rejection, never a panic.
            #[test]
            fn any_metadata_gives_a_context_or_a_rejection(raw in "\\PC{0,80}", number in any::<i64>(), text in "\\PC{0,20}") {
                for value in [
                    serde_json::from_str::<Value>(&raw).unwrap_or(Value::String(raw.clone())),
                    serde_json::json!({"chain": [text.clone()], "depth": number, "tenant": text.clone()}),
                    serde_json::json!({"deadline_ms": number, "priority": text.clone(), "request_id": text.clone()}),
                ] {
                    let mut metadata = Map::new();
                    metadata.insert(CALL_CONTEXT_METADATA_KEY.to_owned(), value);
                    if let Ok(Some(context)) = CallContext::from_metadata(&metadata) {
                        prop_assert!(context.validate().is_ok());
                    }
                }
            }
        }
    }
}
