use clap::Parser;
use entity_extraction::{ENTITY_EXTRACTION_PORT_DEFAULT, ENV_PREFIX, EntityExtractionConfig, build};
use mesh_agent_kit::{AgentArgs, MainError};

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
async fn main() -> Result<(), MainError> {
    let cli = Cli::parse();
    let build = |config: EntityExtractionConfig, http| async move { build(&config, http).await };
    cli.agent.run(ENV_PREFIX, ENTITY_EXTRACTION_PORT_DEFAULT, build).await
}
