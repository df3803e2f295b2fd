//! Payloads the mesh's own agents exchange in the data parts of seed tasks: what the orchestrator
//! sends each planning agent and the search agent, and what they answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::a2a::v1::{AgentCard, AgentExtension};

/// Longest query the agents accept: far beyond any real query, short enough that no query can
/// make planning or ranking expensive.
pub const QUERY_CHARS_MAX: usize = 2_000;

/// Kinds of entity the extractor recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EntityType {
    Person,
    Organization,
    Location,
    Date,
    Number,
    /// A content word or phrase naming a thing or activity ("robots", "soccer").
    Concept,
}

/// An entity found in a query. Offsets count characters (not bytes), end exclusive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entity {
    pub text: String,
    #[serde(rename = "type")]
    pub entity_type: EntityType,
    pub start: usize,
    pub end: usize,
    pub confidence: f64,
}

/// Answer of the entity-extraction agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntityExtraction {
    pub entities: Vec<Entity>,
    pub entity_count: usize,
    /// The most frequent entity types, most frequent first (ties in type order).
    pub dominant_types: Vec<EntityType>,
    /// `rules` or `llm`.
    pub method: String,
}

/// A ranking profile as the search agent advertises it (in its agent card), so planners choose
/// among what exists rather than from a hard-coded list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchProfile {
    pub name: String,
    pub description: String,
    /// Query traits this profile ranks well, from [`QUERY_TRAITS`].
    pub strengths: Vec<String>,
}

/// URI of the agent-card extension in which the search agent lists its profiles
/// (`capabilities.extensions[].params.profiles`).
pub const SEARCH_PROFILES_EXTENSION_URI: &str = "urn:a2a-mesh:search-profiles:v1";

/// The card extension advertising `profiles`.
pub fn search_profiles_extension(profiles: &[SearchProfile]) -> AgentExtension {
    let mut params = serde_json::Map::new();
    params.insert("profiles".into(), serde_json::to_value(profiles).unwrap_or_default());
    AgentExtension {
        uri: SEARCH_PROFILES_EXTENSION_URI.into(),
        description: Some("Ranking profiles this search agent serves".into()),
        required: false,
        params: Some(params),
    }
}

/// The profiles a search agent's card advertises, if it has the extension and it is well formed.
pub fn search_profiles(card: &AgentCard) -> Option<Vec<SearchProfile>> {
    let extension = card.capabilities.extensions.iter().find(|e| e.uri == SEARCH_PROFILES_EXTENSION_URI)?;
    serde_json::from_value(extension.params.as_ref()?.get("profiles")?.clone()).ok()
}

/// Query traits profile strengths are expressed in.
pub const QUERY_TRAITS: &[&str] = &[
    "general",
    "keyword",
    "question",
    "long_query",
    "short_query",
    "entity",
    "visual",
    "audio",
    "temporal",
    "exact_phrase",
];

/// Data part of a task to the profile-selection agent (the query is the text part).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileSelectionRequest {
    pub available_profiles: Vec<SearchProfile>,
}

/// A candidate profile and how well it fits, 0 to 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileScore {
    pub profile: String,
    pub score: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Modality {
    Video,
    Image,
    Audio,
    Text,
    /// No modality is implied by the query.
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Complexity {
    Simple,
    Medium,
    Complex,
}

/// The intents a [`ProfileSelection`] may name.
pub const INTENTS: &[&str] =
    &["video_search", "image_search", "audio_search", "text_search", "question_answering", "general_search"];

/// Answer of the profile-selection agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileSelection {
    pub selected_profile: String,
    pub confidence: f64,
    /// The other profiles, best first.
    pub alternatives: Vec<ProfileScore>,
    /// One of [`INTENTS`].
    pub intent: String,
    pub modality: Modality,
    pub complexity: Complexity,
    /// Why this profile, in one or two sentences a person can check.
    pub reasoning: String,
    /// `rules` or `llm`.
    pub method: String,
}

/// Data part of a task to the search agent (the query is the text part).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SearchRequest {
    /// Profiles to run and fuse; the agent's default profile when empty.
    #[serde(default)]
    pub profiles: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// Rank documents of this modality higher (a preference, not a filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modality: Option<Modality>,
}

/// Where one profile ranked a document (rank 0-indexed) and with what score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileRank {
    pub rank: usize,
    pub score: f64,
}

/// One fused result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    pub id: String,
    pub title: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modality: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Reciprocal Rank Fusion score over the profiles that ranked it.
    pub score: f64,
    pub profile_ranks: BTreeMap<String, ProfileRank>,
}

/// Answer of the search agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchResults {
    pub results: Vec<SearchHit>,
    pub profiles_used: Vec<String>,
    /// The RRF constant used (seed 002: rank 0-indexed, k = 60).
    pub rrf_k: f64,
    /// Time each profile took to rank, in milliseconds.
    pub profile_time_ms: BTreeMap<String, f64>,
    /// Time the fusion took, in milliseconds.
    pub fusion_time_ms: f64,
}

/// Data part of a task to the orchestrator (the query is the text part); all optional.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// Profiles to search with, skipping profile selection's choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiles: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
}

/// How one call to another agent went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentCall {
    pub capability: String,
    /// The agent that answered or was tried; absent when none could be found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `success`, `partial`, `error`, `timeout` or `unavailable`.
    pub status: String,
    /// Milliseconds since the orchestrator received the query when the call started.
    pub started_ms: f64,
    /// Wall time of the call as the orchestrator saw it.
    pub time_ms: f64,
    /// The agent's own processing time, as it reported it; the rest of `time_ms` is transport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_time_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryMetadata {
    pub planning_time_ms: f64,
    pub search_time_ms: f64,
    /// Time the search agent spent fusing its profiles' rankings.
    pub fusion_time_ms: f64,
    pub total_time_ms: f64,
    pub selected_profile: String,
    pub profiles_used: Vec<String>,
    pub confidence: f64,
    pub entities: Vec<Entity>,
    pub agents: Vec<AgentCall>,
    /// The W3C trace id of the query's trace, when traces are exported: what to look up in the
    /// trace backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// Answer of the orchestrator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryAnswer {
    pub query: String,
    pub results: Vec<SearchHit>,
    pub metadata: QueryMetadata,
}

impl QueryAnswer {
    /// The answer as a person reads it (`a2a-mesh ask`, and the text part of the orchestrator's
    /// answer that `chat` shows): the query, the profile chosen, the entities, the ranked results
    /// with each profile's rank, and the time every agent took. Warnings are the caller's to show.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let meta = &self.metadata;
        let mut out = String::new();
        let _ = writeln!(out, "Query: {}", self.query);
        let _ = writeln!(
            out,
            "Profile: {} (confidence {:.2}); searched with: {}",
            meta.selected_profile,
            meta.confidence,
            meta.profiles_used.join(", ")
        );
        if !meta.entities.is_empty() {
            let entities: Vec<String> =
                meta.entities.iter().map(|e| format!("{} ({:?})", e.text, e.entity_type)).collect();
            let _ = writeln!(out, "Entities: {}", entities.join(", "));
        }
        out.push('\n');
        if self.results.is_empty() {
            out.push_str("No results.\n");
        }
        for (position, hit) in self.results.iter().enumerate() {
            let modality = hit.modality.as_deref().unwrap_or("-");
            let _ = writeln!(
                out,
                "{:>2}. [{modality}] {}  (score {:.4}, id {})",
                position + 1,
                hit.title,
                hit.score,
                hit.id
            );
            let ranks: Vec<String> =
                hit.profile_ranks.iter().map(|(profile, rank)| format!("{profile} #{}", rank.rank + 1)).collect();
            let _ = writeln!(out, "    {}", ranks.join(", "));
        }
        out.push('\n');
        let _ = write!(
            out,
            "Time: planning {:.1} ms, search {:.1} ms, total {:.1} ms",
            meta.planning_time_ms, meta.search_time_ms, meta.total_time_ms
        );
        for call in &meta.agents {
            let agent = call.agent.as_deref().unwrap_or("-");
            let error = call.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
            let _ = write!(
                out,
                "\n  {:<18} {:<18} {:<11} {:>7.1} ms{error}",
                call.capability, agent, call.status, call.time_ms
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn card_with(extensions: serde_json::Value) -> AgentCard {
        serde_json::from_value(json!({
            "name": "search", "description": "d", "version": "1", "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["application/json"], "skills": [],
            "capabilities": {"extensions": extensions},
        }))
        .unwrap()
    }

    fn profile(name: &str) -> SearchProfile {
        SearchProfile { name: name.into(), description: format!("{name} ranking"), strengths: vec!["keyword".into()] }
    }

    #[test]
    fn an_answer_reads_as_text() {
        let hit = SearchHit {
            id: "d7".into(),
            title: "Robot football final".into(),
            text: "t".into(),
            modality: Some("video".into()),
            tags: Vec::new(),
            score: 0.0325,
            profile_ranks: BTreeMap::from([("bm25".into(), ProfileRank { rank: 0, score: 3.1 })]),
        };
        let answer = QueryAnswer {
            query: "robots playing soccer".into(),
            results: vec![hit],
            metadata: QueryMetadata {
                planning_time_ms: 1.0,
                search_time_ms: 2.0,
                fusion_time_ms: 0.1,
                total_time_ms: 3.5,
                selected_profile: "bm25".into(),
                profiles_used: vec!["bm25".into()],
                confidence: 0.9,
                entities: vec![Entity {
                    text: "soccer".into(),
                    entity_type: EntityType::Concept,
                    start: 15,
                    end: 21,
                    confidence: 0.8,
                }],
                agents: vec![AgentCall {
                    capability: "search".into(),
                    agent: Some("search".into()),
                    status: "success".into(),
                    started_ms: 1.0,
                    time_ms: 2.0,
                    agent_time_ms: None,
                    error: None,
                }],
                trace_id: None,
            },
        };
        let text = answer.to_text();
        for expected in [
            "Query: robots playing soccer\n",
            "Profile: bm25 (confidence 0.90); searched with: bm25\n",
            "Entities: soccer (Concept)\n",
            " 1. [video] Robot football final  (score 0.0325, id d7)\n    bm25 #1\n",
            "Time: planning 1.0 ms, search 2.0 ms, total 3.5 ms\n  search ",
        ] {
            assert!(text.contains(expected), "{expected:?} missing from {text}");
        }
        let empty = QueryAnswer { results: Vec::new(), ..answer };
        assert!(empty.to_text().contains("No results."));
    }

    #[test]
    fn the_profiles_a_card_advertises_are_read_back() {
        let profiles = vec![profile("bm25"), profile("dense")];
        let other = json!({"uri": "urn:other", "params": {"profiles": [{"name": "not-ours", "description": "", "strengths": []}]}});
        let ours = serde_json::to_value(search_profiles_extension(&profiles)).unwrap();
        // Another extension first: only ours is read, wherever it is.
        assert_eq!(search_profiles(&card_with(json!([other, ours]))), Some(profiles));
    }

    #[test]
    fn a_card_without_the_extension_or_with_a_malformed_one_advertises_none() {
        assert_eq!(search_profiles(&card_with(json!([]))), None);
        let other = json!({"uri": "urn:other", "params": {"profiles": []}});
        assert_eq!(search_profiles(&card_with(json!([other]))), None, "another extension's profiles");
        let no_params = json!({"uri": SEARCH_PROFILES_EXTENSION_URI});
        assert_eq!(search_profiles(&card_with(json!([no_params]))), None);
        let malformed = json!({"uri": SEARCH_PROFILES_EXTENSION_URI, "params": {"profiles": "bm25"}});
        assert_eq!(search_profiles(&card_with(json!([malformed]))), None);
        let empty = json!({"uri": SEARCH_PROFILES_EXTENSION_URI, "params": {"profiles": []}});
        assert_eq!(search_profiles(&card_with(json!([empty]))), Some(vec![]), "an empty list is a list");
    }
}
