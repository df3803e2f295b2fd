//! Wire types of the mesh, free of I/O so every crate (and every test) can share them.
//!
//! - [`seed`]: the task format of `POST /tasks/send` (seed 002) and its response envelope (seed 003).
//! - [`a2a`]: the A2A 1.0 data model and its 0.3 spelling.
//! - [`agents`]: the payloads the mesh's own agents exchange (search, planning, orchestration).
//! - [`jsonrpc`]: the JSON-RPC 2.0 envelope and the A2A error codes.
//! - [`registry`]: the registry's own small JSON API (A2A defines no registry standard).
//! - [`graph`]: the communication graph (seed 004): links, topology, policy, link messages, events.
//! - [`error`]: the JSON body every mesh HTTP error answers with.
//! - [`call`]: the context every agent-to-agent call carries (chain, depth, deadline, ids).
//! - [`envelope`]: seed 003's response envelope in one shape, for A2A task metadata.
//! - [`handoff`]: seed 003's handoff context, which an agent routing work passes on.

pub mod a2a;
pub mod agents;
pub mod call;
pub mod envelope;
pub mod error;
pub mod graph;
pub mod handoff;
pub mod jsonrpc;
pub mod registry;
pub mod seed;
