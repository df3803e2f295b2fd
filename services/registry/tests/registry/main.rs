//! The registry's integration tests, on real registries on port 0 (in this process, or the
//! `registry` binary as a child process): one test binary, one module per area. One binary rather
//! than one per area: each is linked against the registry and its whole dependency tree, so a cold
//! build and every mutant of a mutation run link one instead of fourteen. Their data stays in
//! `tests/data/`.
//!
//! The modules share this process, and what is process-wide with it: `mirror` installs the global
//! metrics recorder, as the binary does, and reads only the series of the registries it starts.

mod common;

mod api;
mod card_registration;
mod card_signatures;
mod catalog;
mod dashboard;
mod discovery;
mod durability;
mod graph;
mod health;
mod mirror;
mod outbound_policy;
mod reload;
mod replicas;
mod schemathesis;
