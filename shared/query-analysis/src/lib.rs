//! Deterministic, explainable query analysis for the mesh's two planning agents.
//!
//! Seed 002 has the entity-extraction and profile-selection agents reason with a language model;
//! this crate is their rules-based answer (`method: "rules"`), used when no model is configured
//! and as the baseline a model's answer can be checked against. It is pure logic: no I/O, no
//! async, no randomness, and no hash-map iteration in any output, so the same query always gets
//! the same answer and every part of it can be traced to a rule documented here.
//!
//! - [`tokenize`]: words with character offsets.
//! - [`extract_entities`]: PERSON, ORGANIZATION, LOCATION, DATE, NUMBER and CONCEPT spans.
//! - [`analyze`]: the query features profile selection weighs, including its query traits.
//! - [`select_profile`]: the profile whose advertised strengths best cover those traits.

mod entities;
mod features;
mod lexicon;
#[cfg(any(test, feature = "testing"))]
pub mod oracle;
mod selection;
mod tokens;

pub use entities::{extract_entities, summarize_entities};
pub use features::{QueryFeatures, analyze};
pub use selection::{SelectionError, select_profile};
pub use tokens::{Token, tokenize};

/// The `method` this crate's answers report, as opposed to `llm`.
const RULES_METHOD: &str = "rules";
