//! Outbound HTTP for the mesh.
//!
//! Every outbound call goes through one [`HttpClient`] per process, which wraps a [`Transport`].
//! The production transport is a shared `reqwest` client; tests (and the deterministic simulation)
//! swap in another transport without touching the callers. Every call takes a timeout, and a
//! timeout is its own error kind, never recognised by matching message text.

mod agent;
mod http_client;
mod registry;
mod transport;

pub use agent::{fetch_card, fetch_card_at, post_task, reply_data, send_task};
pub use http_client::{ClientError, HttpClient};
pub use registry::RegistryClient;
pub use transport::{BoxFuture, ReqwestTransport, Transport, TransportError};
