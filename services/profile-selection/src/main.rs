use clap::Parser;
use mesh_agent_kit::AgentArgs;
use mesh_client::HttpClient;
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
async fn main() -> anyhow::Result<()> {
    mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
    let config: ProfileSelectionConfig = Cli::parse().agent.load(ENV_PREFIX, PROFILE_SELECTION_PORT_DEFAULT)?;
    let app = build(&config, HttpClient::with_reqwest()?).await?;
    Ok(app.run_until_signalled().await?)
}
