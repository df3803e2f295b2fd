//! For the tests of crates that call an LLM: the config pointing at a test endpoint (such as
//! `mesh_test_support::llm::ScriptedLlm`) and the check of the rules' fallback warning. Enabled
//! by the `testing` feature; meant for dev-dependencies only.

use crate::{FALLBACK_WARNING, LlmConfig};

/// The model name [`llm_config`] asks for.
pub const TEST_MODEL: &str = "test-model";

/// The config for model [`TEST_MODEL`] at `base_url`, giving up after `timeout_ms`.
pub fn llm_config(base_url: &str, timeout_ms: u64) -> LlmConfig {
    LlmConfig { base_url: base_url.to_owned(), model: TEST_MODEL.into(), timeout_ms, ..Default::default() }
}

/// `warnings` is the one warning [`crate::llm_or_rules`] gives after a failed LLM attempt, and
/// it names `cause`.
///
/// # Panics
/// When it is not.
pub fn assert_rules_fallback_warning(warnings: &[String], cause: &str) {
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = &warnings[0];
    assert!(warning.contains(FALLBACK_WARNING) && warning.contains(cause), "{warning}");
}
