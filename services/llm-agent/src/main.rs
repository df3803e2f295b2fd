use clap::Parser;
use llm_agent::{ENV_PREFIX, LLM_AGENT_PORT_DEFAULT, LlmAgents, LlmAgentsConfig, openai_model};
use mesh_agent_kit::{AgentArgs, MainError};
use mesh_client::HttpClient;

/// Runs the LLM agents of a folder of definitions (`<dir>/<agent>/agent.toml` and `ROLE.md`), each
/// a mesh agent on its own port. The model endpoint is the [llm] section of --config
/// (base_url, model, api_key_env, timeout_ms) or MESH_LLM_AGENT_LLM__BASE_URL and
/// MESH_LLM_AGENT_LLM__MODEL; the folder is definitions_dir (MESH_LLM_AGENT_DEFINITIONS_DIR).
#[derive(Debug, Parser)]
#[command(name = "llm-agent", version)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
}

#[tokio::main]
async fn main() -> Result<(), MainError> {
    let cli = Cli::parse();
    mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
    let config: LlmAgentsConfig = cli.agent.load(ENV_PREFIX, LLM_AGENT_PORT_DEFAULT)?;
    let llm = config.llm.clone();
    let agents =
        LlmAgents::build(&config, HttpClient::with_reqwest()?, &|agent, model| openai_model(&llm, agent, model))
            .await?;
    for agent in &agents.agents {
        tracing::info!(agent = agent.runtime.name(), url = agent.app.url(), "LLM agent listening");
    }
    let stopped = agents.run_until_stopped(mesh_server::http::shutdown_signal()).await;
    mesh_telemetry::flush();
    Ok(stopped?)
}
