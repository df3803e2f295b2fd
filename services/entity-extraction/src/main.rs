use clap::Parser;
use entity_extraction::{ENTITY_EXTRACTION_PORT_DEFAULT, ENV_PREFIX, EntityExtractionConfig, build};
use mesh_agent_kit::AgentArgs;
use mesh_client::HttpClient;

/// The entity-extraction agent of the A2A mesh. Rules by default; an OpenAI-compatible LLM when
/// the [llm] section of --config (base_url, model, api_key_env, timeout_ms) or
/// MESH_ENTITY_EXTRACTION_LLM__BASE_URL and MESH_ENTITY_EXTRACTION_LLM__MODEL are set.
#[derive(Debug, Parser)]
#[command(name = "entity-extraction", version)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
    let config: EntityExtractionConfig = Cli::parse().agent.load(ENV_PREFIX, ENTITY_EXTRACTION_PORT_DEFAULT)?;
    let app = build(&config, HttpClient::with_reqwest()?).await?;
    Ok(app.run_until_signalled().await?)
}
