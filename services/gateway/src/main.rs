use clap::Parser;
use gateway::{ENV_PREFIX, Gateway, GatewayConfig};
use mesh_config::{ConfigLoader, ServerArgs};

/// Every relayed call allocates its request, answer and records: with glibc's allocator,
/// `malloc` and `free` took a fifth of the gateway's CPU under load (perf, issue #36).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The A2A gateway of the mesh: every agent in the registry behind one public door, with the
/// mesh's authentication, CEL rules (reloaded on SIGHUP), tenants, call chains, limits, traces
/// and metrics. Settings come from --config (TOML) or MESH_GATEWAY_<KEY>, e.g.
/// MESH_GATEWAY_REGISTRY_URL=http://127.0.0.1:8000 MESH_GATEWAY_POLICY_FILE=policy.toml.
#[derive(Debug, Parser)]
#[command(name = "gateway", version)]
struct Cli {
    #[command(flatten)]
    server: ServerArgs,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
    let cli = Cli::parse();
    let config: GatewayConfig =
        ConfigLoader::new(ENV_PREFIX, cli.server.config.as_deref()).server_args(&cli.server).load()?;
    let gateway = Gateway::build(&config).await?;
    tracing::info!(url = gateway.url(), "gateway listening");
    gateway.run_until_stopped(mesh_server::http::shutdown_signal()).await?;
    Ok(())
}
