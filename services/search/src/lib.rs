//! The search agent: ranks a corpus with several profiles in parallel (on tantivy) and fuses
//! their rankings with Reciprocal Rank Fusion.

mod agent;
pub mod config;
pub mod corpus;
mod error;
pub mod eval;
pub mod fusion;
mod index;

use std::io::BufReader;
use std::sync::Arc;

use mesh_agent_kit::{AgentApp, KitError};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::agents::search_profiles_extension;

pub use agent::{SearchAgent, SearchSettings};
pub use config::SearchConfig;
pub use error::SearchError;
pub use index::SearchIndex;

/// The search agent's card as shipped in `agent-cards/`.
const CARD_JSON: &str = include_str!("../../../agent-cards/search.json");

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Search(#[from] SearchError),
    #[error(transparent)]
    Kit(#[from] KitError),
    #[error("the bundled agent card is invalid: {0}")]
    Card(#[from] serde_json::Error),
}

/// Loads the corpus named in `config` (or the bundled sample) and indexes it.
pub fn load_index(config: &SearchConfig) -> Result<SearchIndex, SearchError> {
    let documents = match &config.corpus_path {
        Some(path) => {
            let file = std::fs::File::open(path)
                .map_err(|source| SearchError::CorpusFile { path: path.display().to_string(), source })?;
            corpus::read_jsonl(BufReader::new(file))?
        }
        None => corpus::read_jsonl(corpus::BUNDLED_SAMPLE_JSONL.as_bytes())?,
    };
    SearchIndex::build(documents)
}

/// The agent card with the profiles this agent serves.
pub fn card() -> Result<AgentCard, serde_json::Error> {
    let mut card: AgentCard = serde_json::from_str(CARD_JSON)?;
    card.capabilities.extensions.push(search_profiles_extension(&SearchIndex::profiles()));
    Ok(card)
}

/// Builds the agent, bound and ready to run.
pub async fn build(config: &SearchConfig, http: HttpClient) -> Result<AgentApp, StartError> {
    if !(config.rrf_k.is_finite() && config.rrf_k > 0.0) {
        return Err(
            SearchError::InvalidParameters(format!("rrf_k must be a positive number, not {}", config.rrf_k)).into()
        );
    }
    let index = Arc::new(load_index(config)?);
    tracing::info!(documents = index.len(), "corpus indexed");
    let settings = SearchSettings {
        rrf_k: config.rrf_k,
        top_k_default: config.top_k_default,
        top_k_max: config.top_k_max,
        candidates_per_profile: config.candidates_per_profile,
    };
    Ok(AgentApp::build(&config.agent, card()?, SearchAgent::new(index, settings), http).await?)
}
