//! Outbound HTTP for the mesh.
//!
//! Every outbound call goes through one [`HttpClient`] per process, which wraps a [`Transport`].
//! The production transport is a shared `reqwest` client; tests (and the deterministic simulation)
//! swap in another transport without touching the callers. Every call takes a timeout, and a
//! timeout is its own error kind, never recognised by matching message text.
//!
//! Agent-to-agent calls go through a [`MeshCaller`]: discovery through the registry (cached,
//! [`Discovery`]), the call context in headers, deadlines, a bulkhead, retries on other replicas
//! and a circuit breaker per instance ([`Circuits`]).

mod agent;
mod caller;
mod circuits;
mod discovery;
mod http_client;
mod registry;
mod transport;

pub use agent::{fetch_card, fetch_card_at, post_task, reply_data, send_task};
pub use caller::{
    Answered, CALL_ATTEMPTS_MAX_DEFAULT, CallError, CallScope, CallerSettings, MeshCaller, OUTBOUND_CALLS_MAX_DEFAULT,
    RETRY_DELAY_MAX_MS_DEFAULT, RETRY_DELAY_MIN_MS_DEFAULT, Target,
};
pub use circuits::{
    CIRCUIT_CONSECUTIVE_FAILURES_DEFAULT, CIRCUIT_OPEN_MS_DEFAULT, CircuitReport, CircuitSettings, CircuitWord,
    Circuits, Passage,
};
pub use discovery::{Discovery, DiscoveryError};
pub use http_client::{ClientError, HttpClient, decode_json, json_request};
pub use registry::RegistryClient;
pub use transport::{BoxFuture, ReqwestTransport, Transport, TransportError};
