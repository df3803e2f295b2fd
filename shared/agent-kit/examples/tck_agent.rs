//! Serves the conformance kit's example agent ([`mesh_agent_kit::conformance`]).
//!
//! `cargo run --release -p mesh-agent-kit --example tck_agent -- --port 9999`, then
//! `scripts/tck.sh` runs the kit against it.

use clap::Parser;
use mesh_agent_kit::conformance::{TckAgent, card};
use mesh_agent_kit::{AgentApp, AgentArgs, AgentConfig, MainError};

/// Port the agent listens on unless configured otherwise.
const TCK_PORT_DEFAULT: u16 = 9999;

/// The A2A conformance kit's example agent.
#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
}

#[tokio::main]
async fn main() -> Result<(), MainError> {
    let card = card()?;
    let build = |config: AgentConfig, http| async move {
        // The kit validates the card against the 1.0 schema alone.
        let config = AgentConfig { legacy_card_fields: false, ..config };
        AgentApp::build_tasks(&config, card, TckAgent, http).await
    };
    Cli::parse().agent.run("MESH_TCK", TCK_PORT_DEFAULT, build).await
}
