//! The agent runtime: builds a whole mesh agent from its card and its handler.
//!
//! [`AgentApp::build`] binds the listener (port 0 works, for tests), serves `POST /tasks/send`,
//! the A2A bindings (from `mesh-a2a-server`), `GET /.well-known/agent-card.json`, `GET /agent.json`
//! and `GET /health` behind the layers every mesh server shares (`mesh-server`), registers the
//! agent with the registry in the background and deregisters it on shutdown, and joins the
//! conversation bus when configured.
//!
//! Task calls are admitted by their call context first (`mesh_server::call_safety`: cycles, the
//! depth limit, the caller's deadline, and the links of the communication graph fed by
//! [`graph`]), and any agent can offer the [`call_agent`] and [`agent_message`]
//! (`send_agent_message`) skills. A seed handler ([`AgentHandler`]) runs as an A2A task handler,
//! so both land in one task model and one store.

mod agent;
pub mod agent_message;
mod app;
mod bus;
pub mod call_agent;
mod cli;
mod error;
pub mod graph;
mod registration;
mod seed;
#[cfg(feature = "testing")]
pub mod testing;

pub use agent::{AgentHandler, AgentReply, TaskInput, agent_router, task_agent_router};
pub use app::{AgentApp, AgentConfig, AgentExtras, KitError, TaskDurability};
pub use bus::plain_text;
pub use cli::{AgentArgs, MainError};
pub use error::AgentError;
/// What a task agent implements ([`AgentApp::build_tasks`]).
pub use mesh_a2a_server::{TaskEvents, TaskHandler, Turn};
pub use registration::{deregister, register_until_accepted};
pub use seed::A2A_CLIENT_SENDER;
