//! A small client for an OpenAI-compatible chat-completions endpoint that asks for strict JSON.
//!
//! The planning agents use an LLM as an optional improvement over their rules: every way a call
//! can go wrong (not configured, unreachable, slow, an error status, a reply that is not the JSON
//! asked for, or JSON the caller's validation refuses) is a distinct [`LlmError`], so a caller can
//! log it and fall back. All HTTP goes through the process-wide [`mesh_client::HttpClient`].

mod client;
mod config;
mod error;
mod fallback;
#[cfg(feature = "testing")]
pub mod testing;

pub use client::{LlmClient, api_key_from_env};
pub use config::{API_KEY_ENV_DEFAULT, LLM_TIMEOUT_MS_DEFAULT, LlmConfig};
pub use error::LlmError;
pub use fallback::llm_or_rules;
