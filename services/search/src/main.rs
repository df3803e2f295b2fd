use clap::Parser;
use mesh_agent_kit::AgentArgs;
use mesh_client::HttpClient;
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
async fn main() -> anyhow::Result<()> {
    mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
    let cli = Cli::parse();
    let mut config: SearchConfig = cli.agent.load(ENV_PREFIX, SEARCH_PORT_DEFAULT)?;
    if cli.corpus.is_some() {
        config.corpus_path = cli.corpus;
    }
    let app = build(&config, HttpClient::with_reqwest()?).await?;
    Ok(app.run_until_signalled().await?)
}
