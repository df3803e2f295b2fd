//! The agent kit's integration tests, on real servers on port 0: one test binary, one module per
//! area. One binary rather than one per area: each is linked against the kit and its whole
//! dependency tree, so a cold build and every mutant of a mutation run link one instead of twelve.
//!
//! The modules share this process, and what is process-wide with it: `a2a` installs the global
//! `tracing` subscriber that keeps the task engine's log lines (`mesh_test_support::logs`), and
//! `bounds` the global metrics recorder (its agents' names are theirs alone, so the counts it reads
//! are its own). `push` runs this binary again as an agent process (`push::agent_process`).

mod common;

mod a2a;
mod bounds;
mod bus_join;
mod call_safety;
mod durability;
mod graph;
mod grpc;
mod http_surface;
mod interop;
mod push;
mod replicas;
mod surface;
