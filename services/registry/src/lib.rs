//! The agent registry: agents register themselves, callers discover them by capability or get
//! one picked round-robin among the healthy ones, and the registry polls every agent's health.
//!
//! Lookups are answered from memory ([`directory`]); registrations are written to SQLite or
//! PostgreSQL before they are acknowledged ([`store`]), with the healths found, and reloaded at
//! start and whenever another replica changed them (read every `sync_interval_ms`), so several
//! replicas sharing one PostgreSQL database converge within one sync interval.
//!
//! The communication graph (seed 004) lives here too: links between agents ([`links`], in the same
//! database), their API and the policy feed agents cache ([`graph_api`]), and live events
//! ([`events`], Server-Sent Events).

mod api;
mod app;
mod card;
pub mod catalog;
pub mod config;
mod dashboard;
mod directory;
mod discovery;
mod discovery_api;
mod error;
mod events;
mod graph_api;
mod health;
mod intake;
mod links;
pub mod mirror;
mod openapi;
mod ownership;
mod store;
mod tenancy;

pub use api::openapi_document;
pub use app::{Application, RegistryService};
pub use card::CardProfile;
pub use config::{LinkDef, RegistryCli, RegistryConfig};
pub use discovery::{DENSE_RANKING, DENSE_WEIGHT, DiscoveryIndex, FUSION_K, LEXICAL_RANKING, SearchSource};
pub use discovery_api::{AgentMatches, Route};
pub use error::RegistryError;
