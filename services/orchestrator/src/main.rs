use clap::Parser;
use mesh_agent_kit::{AgentArgs, MainError};
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
async fn main() -> Result<(), MainError> {
    let cli = Cli::parse();
    let build = |config: OrchestratorConfig, http| async move { build(&config, http).await };
    cli.agent.run(ENV_PREFIX, ORCHESTRATOR_PORT_DEFAULT, build).await
}
