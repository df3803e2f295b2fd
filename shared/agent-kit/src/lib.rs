//! Builds the HTTP surface of any mesh agent from its card and its handler.
//!
//! [`AgentApp::build`] binds the listener (port 0 works, for tests), serves `POST /tasks/send`,
//! `GET /.well-known/agent-card.json`, `GET /agent.json` and `GET /health`, registers the agent
//! with the registry in the background and deregisters it on shutdown. [`http`] holds the pieces
//! every mesh server shares (JSON errors for every failure, request ids, limits, graceful
//! shutdown), which the registry uses too.
//!
//! Task calls are admitted by their call context first ([`call_safety`]: cycles, the depth limit,
//! the caller's deadline, and the links of the communication graph, [`graph`]), and any agent
//! can offer the [`call_agent`] and [`agent_message`] (`send_agent_message`) skills. Every agent
//! delivers A2A push notifications to the webhooks its clients set on their tasks
//! ([`a2a::push`]).

pub mod a2a;
mod agent;
pub mod agent_message;
mod app;
pub mod auth;
mod bus;
pub mod call_agent;
pub mod call_safety;
mod card;
mod cli;
pub mod conformance;
mod credential;
mod error;
pub mod graph;
mod hosts;
pub mod http;
mod limits;
mod metrics;
pub mod middleware;
pub mod observe;
mod registration;
mod serve;
#[cfg(feature = "testing")]
pub mod testing;

pub use a2a::seed::A2A_CLIENT_SENDER;
pub use a2a::{TaskEvents, TaskHandler, Turn};
pub use agent::{AgentHandler, AgentReply, TaskInput, agent_router, task_agent_router};
pub use app::{AgentApp, AgentConfig, AgentExtras, KitError, TaskDurability};
pub use bus::plain_text;
pub use card::{CardDocument, sign_card};
pub use cli::{AgentArgs, MainError};
pub use credential::with_own_credential;
pub use error::{AgentError, ErrorResponse};
pub use metrics::{
    DatabaseProbe, HEALTH_DEGRADED, HEALTH_HEALTHY, HEALTH_UNHEALTHY, HealthReport, RegistrationState, ServiceMetrics,
};
pub use registration::{deregister, register_until_accepted};
