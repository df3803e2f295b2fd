//! The agent registry: agents register themselves, callers discover them by capability or get
//! one picked round-robin among the healthy ones, and the registry polls every agent's health.
//!
//! Lookups are answered from memory ([`directory`]); registrations are written to SQLite or
//! PostgreSQL before they are acknowledged ([`store`]), and reloaded at start and at every
//! health poll, so several replicas sharing one PostgreSQL database converge within one interval.

mod api;
mod app;
pub mod config;
mod dashboard;
mod directory;
mod error;
mod health;
mod intake;
mod store;

pub use app::{Application, RegistryService};
pub use config::{RegistryCli, RegistryConfig};
pub use error::RegistryError;
