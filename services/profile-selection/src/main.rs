use clap::Parser;
use mesh_agent_kit::{AgentArgs, MainError};
use profile_selection::{ENV_PREFIX, PROFILE_SELECTION_PORT_DEFAULT, ProfileSelectionConfig, build};

/// The profile-selection agent of the A2A mesh. Rules by default; an OpenAI-compatible LLM when
/// the [llm] section of --config (base_url, model, api_key_env, timeout_ms) or
/// MESH_PROFILE_SELECTION_LLM__BASE_URL and MESH_PROFILE_SELECTION_LLM__MODEL are set.
#[derive(Debug, Parser)]
#[command(name = "profile-selection", version)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
}

#[tokio::main]
async fn main() -> Result<(), MainError> {
    let cli = Cli::parse();
    let build = |config: ProfileSelectionConfig, http| async move { build(&config, http).await };
    cli.agent.run(ENV_PREFIX, PROFILE_SELECTION_PORT_DEFAULT, build).await
}
