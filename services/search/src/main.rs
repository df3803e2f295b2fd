use clap::Parser;
use mesh_agent_kit::{AgentArgs, MainError};
use search::config::{ENV_PREFIX, SEARCH_PORT_DEFAULT};
use search::{SearchConfig, build};

/// The search agent of the A2A mesh: BM25 profiles on tantivy fused with Reciprocal Rank Fusion.
/// Settings also come from --config (TOML: corpus_path, rrf_k, top_k_default, top_k_max,
/// candidates_per_profile and the agent keys) or MESH_SEARCH_<KEY> environment variables.
#[derive(Debug, Parser)]
#[command(name = "search", version)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
    /// JSON Lines corpus to serve (BEIR corpus.jsonl layout); the bundled sample when absent.
    #[arg(long, value_name = "FILE")]
    corpus: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> Result<(), MainError> {
    let cli = Cli::parse();
    let corpus = cli.corpus;
    let build = |mut config: SearchConfig, http| async move {
        if corpus.is_some() {
            config.corpus_path = corpus;
        }
        build(&config, http).await
    };
    cli.agent.run(ENV_PREFIX, SEARCH_PORT_DEFAULT, build).await
}
