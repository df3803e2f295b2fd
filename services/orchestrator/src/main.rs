use clap::Parser;
use mesh_agent_kit::AgentArgs;
use mesh_client::HttpClient;
use orchestrator::config::{ENV_PREFIX, ORCHESTRATOR_PORT_DEFAULT};
use orchestrator::{OrchestratorConfig, build};

/// The orchestrator agent of the A2A mesh. Needs --registry-url. Settings also come from
/// --config (TOML: planning_timeout_ms, search_timeout_ms, discovery_cache_ttl_ms, top_k_default,
/// ensemble_below_confidence, ensemble_profiles_max and the agent keys) or MESH_ORCHESTRATOR_<KEY>.
#[derive(Debug, Parser)]
#[command(name = "orchestrator", version)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
    let config: OrchestratorConfig = Cli::parse().agent.load(ENV_PREFIX, ORCHESTRATOR_PORT_DEFAULT)?;
    let app = build(&config, HttpClient::with_reqwest()?).await?;
    Ok(app.run_until_signalled().await?)
}
