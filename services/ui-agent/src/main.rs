use clap::Parser;
use mesh_config::{ConfigLoader, ServerArgs};
use ui_agent::{ENV_PREFIX, UiAgent, UiAgentConfig};

/// The UI agent of the A2A mesh: WebSocket conversations with any agent over the conversation
/// bus (`GET /ws?agent=orchestrator`) and the conversations API. Settings come from --config
/// (TOML) or MESH_UI_AGENT_<KEY>, e.g. MESH_UI_AGENT_BUS__KAFKA_BROKERS=127.0.0.1:9092.
#[derive(Debug, Parser)]
#[command(name = "ui-agent", version)]
struct Cli {
    #[command(flatten)]
    server: ServerArgs,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
    let cli = Cli::parse();
    let config: UiAgentConfig =
        ConfigLoader::new(ENV_PREFIX, cli.server.config.as_deref()).server_args(&cli.server).load()?;
    let agent = UiAgent::build(&config).await?;
    tracing::info!(url = agent.url(), agent_id = agent.agent_id(), "ui agent listening");
    agent.run_until_stopped(mesh_server::http::shutdown_signal()).await?;
    Ok(())
}
