use clap::Parser;
use mesh_agent_kit::{AgentArgs, MainError};
use search::config::{ENV_PREFIX, SEARCH_PORT_DEFAULT};
use search::{SearchConfig, build};

/// The search agent of the A2A mesh: BM25 profiles on tantivy and a sentence-embedding profile,
/// fused with Reciprocal Rank Fusion. Settings also come from --config (TOML: data_dir,
/// corpus_path, rrf_k, top_k_default, top_k_max, candidates_per_profile, documents_database_url,
/// documents_sync_interval_ms, documents_tombstone_retention_ms, a [dense] table with
/// enabled, model_dir, download, python, threads, and the agent keys) or MESH_SEARCH_<KEY>
/// environment variables (MESH_SEARCH_DENSE__ENABLED=false for nested keys).
#[derive(Debug, Parser)]
#[command(name = "search", version)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
    /// Folder the index persists in (default data/search).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<std::path::PathBuf>,
    /// JSON Lines corpus (BEIR corpus.jsonl layout) ingested when the index is empty; the
    /// bundled sample when absent.
    #[arg(long, value_name = "FILE")]
    corpus: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> Result<(), MainError> {
    let cli = Cli::parse();
    let (corpus, data_dir) = (cli.corpus, cli.data_dir);
    let build = |mut config: SearchConfig, http| async move {
        if corpus.is_some() {
            config.corpus_path = corpus;
        }
        if data_dir.is_some() {
            config.data_dir = data_dir;
        }
        build(&config, http).await
    };
    cli.agent.run(ENV_PREFIX, SEARCH_PORT_DEFAULT, build).await
}
