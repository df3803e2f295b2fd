//! What every mesh server shares, whatever it serves: the registry, the agents and the gateway.
//!
//! [`http`] stacks the common layers (JSON errors for every failure, request ids, the host
//! check, authentication, per-tenant rate limits, load shedding, body and time limits) and
//! serves a router with connection bounds and a graceful drain ([`serve`]); [`observe`] adds
//! traces and Prometheus metrics, [`metrics`] the health report. [`auth`] checks credentials and
//! roles per route, [`call_safety`] admits calls by their call context (cycles, the depth limit,
//! the caller's deadline) and [`links`] by the communication graph. [`credential`] keeps a
//! server's own outbound credential fresh. Nothing here knows of tasks or agents' skills: the
//! A2A task engine is `mesh-a2a-server`, the agent runtime `mesh-agent-kit`.

pub mod auth;
pub mod call_safety;
pub mod credential;
mod error;
mod grpc_refusals;
mod hosts;
pub mod http;
mod limits;
pub mod links;
pub mod metrics;
pub mod middleware;
pub mod observe;
mod serve;

pub use credential::{own_credential, with_own_credential};
pub use error::{ErrorResponse, ServerError};
pub use metrics::{
    DatabaseProbe, HEALTH_DEGRADED, HEALTH_HEALTHY, HEALTH_UNHEALTHY, HealthReport, RegistrationState, ServiceMetrics,
};
