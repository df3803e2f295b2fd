//! Ranking shared by the search agent and the registry, so a document and an agent card are
//! analysed, scored and fused by one implementation:
//! - [`analyzer`]: the English analyzer (tokens, folding, stop words, stems) and the terms of a
//!   text, identifiers split into words;
//! - [`bm25`]: an in-memory BM25 index over weighted fields, updated one document at a time;
//! - [`fusion`]: Reciprocal Rank Fusion of several rankings.

pub mod analyzer;
pub mod bm25;
pub mod fusion;
