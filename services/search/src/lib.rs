//! The search agent: ranks a corpus with several profiles in parallel (BM25 on tantivy, sentence
//! embeddings on candle) and fuses their rankings with Reciprocal Rank Fusion. The index persists
//! under a data directory and takes documents in and out while it serves.

mod agent;
pub mod config;
pub mod corpus;
mod dense;
mod documents;
mod embed;
mod error;
pub mod eval;
mod index;
mod log;
mod replica;

use std::io::BufReader;
use std::path::Path;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use mesh_agent_kit::{AgentApp, AgentExtras, KitError};
use mesh_client::HttpClient;
use mesh_embedding::Encoder;
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::agents::search_profiles_extension;
use tokio::sync::Semaphore;

/// Every binary that links the search agent allocates through mimalloc. The embedding model
/// (candle) allocates new tensors of several megabytes for every operation; the system allocator
/// maps and unmaps each one, and the page faults that follow took about a fifth of the CPU time
/// of computing document vectors (perf, SciFact abstracts). mimalloc reuses that memory.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub use agent::{SearchAgent, SearchSettings};
pub use config::SearchConfig;
pub use corpus::Document;
pub use dense::DenseMethod;
pub use documents::{DeleteAnswer, IngestAnswer, StoredDocument};
pub use embed::EMBEDDING_BATCH_DOCUMENTS;
pub use error::SearchError;
pub use index::{Change, DENSE_PROFILE, DocumentVector, IndexLocation, IngestReport, SearchIndex, index_directory};
pub use mesh_embedding::QUANTIZED_MIN_ROWS_DEFAULT;
pub use mesh_embedding::{DenseConfig, DenseStatus, load_encoder};
pub use replica::Replica;

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

/// Loads the model and opens the index `config` names (creating it when new), ingesting nothing.
pub async fn open_index(config: &SearchConfig) -> Result<(Arc<SearchIndex>, DenseStatus), SearchError> {
    let (encoder, status) = load_encoder(&config.dense).await;
    open_index_with(config, encoder, status).await
}

/// [`open_index`] with the model loaded already.
pub(crate) async fn open_index_with(
    config: &SearchConfig,
    encoder: Option<Arc<Encoder>>,
    status: DenseStatus,
) -> Result<(Arc<SearchIndex>, DenseStatus), SearchError> {
    let location = match &config.data_dir {
        Some(dir) => IndexLocation::Directory(index_directory(dir)),
        None => IndexLocation::Memory,
    };
    let threads = config.dense.threads();
    let index = on_blocking_thread(move || SearchIndex::open(&location, encoder, threads)).await?;
    index.set_query_cache_entries(config.dense.query_cache_entries);
    index.set_quantized_min_documents(config.dense.quantized_min_documents);
    Ok((Arc::new(index), status))
}

/// [`open_index`], then the replica's documents: with a document log, the log seeded with the
/// initial corpus (by whichever replica comes first) and applied to the index; without one, the
/// configured corpus or the bundled sample ingested into an empty index. What an agent does at
/// start.
pub async fn open_replica(config: &SearchConfig) -> Result<(Arc<Replica>, DenseStatus), SearchError> {
    let (index, status) = open_index(config).await?;
    let log = match &config.documents_database_url {
        Some(url) => Some(log::DocumentLog::open(url, &config.agent.replica_group_or(&card_name()?)).await?),
        None => None,
    };
    let replica = Arc::new(Replica::new(index, log));
    let corpus_path = config.corpus_path.clone();
    replica.seed(move || read_corpus(corpus_path.as_deref())).await?;
    let index = replica.index();
    tracing::info!(
        documents = index.len(),
        embedded = index.embedded(),
        applied_sequence = index.applied_sequence(),
        "index ready"
    );
    Ok((replica, status))
}

/// The name the agent serves under: the configured one (each replica's own), else its card's.
fn agent_name(config: &SearchConfig) -> Result<String, SearchError> {
    match &config.agent.name {
        Some(name) => Ok(name.clone()),
        None => card_name(),
    }
}

/// The bundled card's name: the agent's replica group unless configured (replicas of one group
/// share one document log).
fn card_name() -> Result<String, SearchError> {
    serde_json::from_str::<AgentCard>(CARD_JSON)
        .map(|card| card.name)
        .map_err(|e| SearchError::InvalidParameters(format!("the bundled agent card is invalid: {e}")))
}

/// Longest pause between two compactions of the document log's tombstones.
const TOMBSTONE_COMPACTION_INTERVAL_MAX_MS: u64 = 3_600_000;

/// Blocking work (ranking, computing vectors, writing the index) running at once: one piece per
/// core. Unbounded, a burst of searches would start hundreds of blocking threads (tokio allows
/// 512), all competing for the same cores, each answer slower than the last, memory growing.
static BLOCKING_PERMITS: LazyLock<Semaphore> = LazyLock::new(|| {
    Semaphore::new(std::thread::available_parallelism().map_or(BLOCKING_PERMITS_FALLBACK, usize::from))
});
/// Permits when the number of cores cannot be read.
const BLOCKING_PERMITS_FALLBACK: usize = 2;

/// Runs `work` on a blocking thread once a core is free (see [`BLOCKING_PERMITS`]); waiting for
/// one counts against the caller's deadline like the work itself.
fn spawn_bounded<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> tokio::task::JoinHandle<Result<T, SearchError>> {
    tokio::spawn(async move {
        let _permit =
            BLOCKING_PERMITS.acquire().await.map_err(|e| SearchError::Worker(format!("no worker permit: {e}")))?;
        tokio::task::spawn_blocking(work).await.map_err(|e| SearchError::Worker(e.to_string()))
    })
}

/// Runs index work (reading files, computing vectors) on a blocking thread, bounded as
/// [`spawn_bounded`] says.
async fn on_blocking_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, SearchError> + Send + 'static,
) -> Result<T, SearchError> {
    match spawn_bounded(work).await {
        Ok(Ok(result)) => result,
        Ok(Err(error)) => Err(error),
        Err(error) => Err(SearchError::Worker(error.to_string())),
    }
}

/// The documents of a JSON Lines file, or of the bundled sample when `path` is `None`.
pub fn read_corpus(path: Option<&Path>) -> Result<Vec<Document>, SearchError> {
    match path {
        Some(path) => {
            let file = std::fs::File::open(path)
                .map_err(|source| SearchError::CorpusFile { path: path.display().to_string(), source })?;
            corpus::read_jsonl(BufReader::new(file))
        }
        None => corpus::read_jsonl(corpus::BUNDLED_SAMPLE_JSONL.as_bytes()),
    }
}

/// The agent card with the profiles `index` serves, saying plainly when `dense` is missing.
pub fn card(index: &SearchIndex, dense: &DenseStatus) -> Result<AgentCard, serde_json::Error> {
    let mut card: AgentCard = serde_json::from_str(CARD_JSON)?;
    let mut extension = search_profiles_extension(&index.profiles());
    if let (DenseStatus::Unavailable { reason }, Some(params)) = (dense, extension.params.as_mut()) {
        params.insert("unavailable".into(), serde_json::json!([{ "profile": DENSE_PROFILE, "reason": reason }]));
        card.description.push_str(&format!(" The {DENSE_PROFILE} profile is unavailable: {reason}."));
    }
    card.capabilities.extensions.push(extension);
    Ok(card)
}

/// Builds the agent, bound and ready to run.
pub async fn build(config: &SearchConfig, http: HttpClient) -> Result<AgentApp, StartError> {
    if !(config.rrf_k.is_finite() && config.rrf_k > 0.0) {
        return Err(
            SearchError::InvalidParameters(format!("rrf_k must be a positive number, not {}", config.rrf_k)).into()
        );
    }
    let (replica, dense) = open_replica(config).await?;
    let index = replica.index().clone();
    let settings = SearchSettings {
        rrf_k: config.rrf_k,
        top_k_default: config.top_k_default,
        top_k_max: config.top_k_max,
        candidates_per_profile: config.candidates_per_profile,
    };
    let card = card(&index, &dense)?;
    let unavailable = match &dense {
        DenseStatus::Unavailable { reason } => Some(reason.clone()),
        DenseStatus::Disabled => Some("turned off in the configuration (dense.enabled = false)".to_owned()),
        DenseStatus::Available { .. } => None,
    };
    let name = agent_name(config)?;
    let agent = SearchAgent::new(index.clone(), settings).with_dense_unavailable(unavailable).with_service(name);
    let probe_index = index.clone();
    let sync_interval = Duration::from_millis(config.documents_sync_interval_ms.max(1));
    let retention = Duration::from_millis(config.documents_tombstone_retention_ms);
    let compaction_interval =
        retention.clamp(sync_interval, Duration::from_millis(TOMBSTONE_COMPACTION_INTERVAL_MAX_MS).max(sync_interval));
    let follower = replica.follow_log(sync_interval, retention, compaction_interval);
    let mut components: Vec<(String, Box<dyn Fn() -> serde_json::Value + Send + Sync>)> = vec![
        ("dense".to_owned(), Box::new(move || serde_json::to_value(&dense).unwrap_or_default())),
        (
            "index".to_owned(),
            Box::new(move || {
                let cache = probe_index.query_cache();
                serde_json::json!({
                    "documents": probe_index.len(), "embedded": probe_index.embedded(),
                    "dense_method": probe_index.dense_method(),
                    "query_cache": {
                        "entries": cache.entries, "capacity": cache.capacity,
                        "hits": cache.hits, "misses": cache.misses,
                    },
                })
            }),
        ),
    ];
    if replica.log_report().is_some() {
        let probe = replica.clone();
        components.push(("document_log".to_owned(), Box::new(move || probe.log_report().unwrap_or_default())));
    }
    let extras = AgentExtras { routes: documents::routes(replica, follower), components, ..AgentExtras::default() };
    Ok(AgentApp::build_with(&config.agent, card, agent, http, extras).await?)
}
