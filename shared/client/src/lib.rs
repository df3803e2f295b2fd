//! Outbound HTTP for the mesh.
//!
//! Every outbound call goes through one [`HttpClient`] per process, which wraps a [`Transport`].
//! The production transport is a shared `reqwest` client; tests (and the deterministic simulation)
//! swap in another transport without touching the callers. Every call takes a timeout, and a
//! timeout is its own error kind, never recognised by matching message text.
//!
//! Agent-to-agent calls go through a [`MeshCaller`]: discovery through the registry (cached,
//! [`Discovery`]), the call context in headers, deadlines, a bulkhead, retries on other replicas
//! and a circuit breaker per instance ([`Circuits`]), the link policy checked before sending
//! (a cache fed by [`follow_policy`]) and every call reported to the registry ([`CallReporter`]).

pub mod address_policy;
mod agent;
mod call_reports;
mod caller;
mod circuits;
mod discovery;
mod http_client;
mod link_feed;
mod registry;
mod transport;

pub use address_policy::{AddressPolicy, AddressRefused, OutboundGuard, StaticLookup, SystemLookup};
pub use agent::{fetch_card, fetch_card_at, post_task, reply_data, send_task};
pub use call_reports::{
    CALL_REPORT_BATCH_MAX_DEFAULT, CALL_REPORT_FLUSH_MS_DEFAULT, CALL_REPORT_QUEUE_MAX_DEFAULT,
    CALL_REPORTS_PER_POST_MAX, CallReportCounts, CallReportFlusher, CallReportSettings, CallReporter,
};
pub use caller::{
    Answered, CALL_ATTEMPTS_MAX_DEFAULT, CallError, CallScope, CallerSettings, MeshCaller, OUTBOUND_CALLS_MAX_DEFAULT,
    RETRY_DELAY_MAX_MS_DEFAULT, RETRY_DELAY_MIN_MS_DEFAULT, Target,
};
pub use circuits::{
    CIRCUIT_CONSECUTIVE_FAILURES_DEFAULT, CIRCUIT_OPEN_MS_DEFAULT, CircuitBreakers, CircuitReport, CircuitSettings,
    CircuitWord, Circuits, Passage,
};
pub use discovery::{DISCOVERY_CACHE_ENTRIES_MAX, Discovery, DiscoveryError};
pub use http_client::{ClientError, HttpClient, RenewableBearer, WeakBearer, decode_json, json_request};
pub use link_feed::{GRAPH_REFRESH_MS_DEFAULT, follow_policy, refresh_policy};
pub use registry::RegistryClient;
pub use transport::{BoxFuture, ReqwestTransport, Transport, TransportError};
