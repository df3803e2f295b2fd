//! `a2a-mesh`: runs the mesh from one command.
//!
//! `a2a-mesh up` starts the services of the suite in this process, each on its own port, with the
//! embedded defaults (an SQLite file under `data/`), and stops them cleanly on Ctrl-C.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use mesh_agent_kit::http::shutdown_signal;
use mesh_config::ConfigLoader;
use registry::{Application, RegistryConfig, config::ENV_PREFIX as REGISTRY_ENV_PREFIX};

#[derive(Debug, Parser)]
#[command(name = "a2a-mesh", version, about = "The A2A agent mesh")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the suite on its default ports until Ctrl-C. Each service reads its MESH_<SERVICE>_*
    /// environment variables (e.g. MESH_REGISTRY_PORT=9000) and an optional TOML file.
    Up {
        /// TOML configuration file of the registry (same keys as `registry --config`).
        #[arg(long, value_name = "FILE")]
        registry_config: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
    match Cli::parse().command {
        Command::Up { registry_config } => up(registry_config).await,
    }
}

async fn up(registry_config: Option<PathBuf>) -> anyhow::Result<()> {
    let config: RegistryConfig = ConfigLoader::new(REGISTRY_ENV_PREFIX, registry_config.as_deref()).load()?;
    let registry = Application::build(&config).await?;
    let url = format!("http://{}:{}", display_host(&config.host), registry.port());
    println!("a2a-mesh is up (Ctrl-C stops it)");
    println!("  registry  {url}   (API description: {url}/openapi.json)");
    println!();
    println!("Try:");
    println!("  curl -s {url}/agents");
    println!("  curl -s {url}/stats");
    registry.run_until_stopped(shutdown_signal()).await?;
    println!("a2a-mesh stopped");
    Ok(())
}

/// A wildcard bind address is not something to type into curl.
fn display_host(host: &str) -> &str {
    match host {
        "0.0.0.0" | "::" | "[::]" => "127.0.0.1",
        other => other,
    }
}
