//! Serves the conformance kit's example agent ([`mesh_tck_agent`]).
//!
//! `cargo run --release -p mesh-tck-agent -- --port 9999`, then
//! `scripts/tck.sh` runs the kit against it. `--variant` serves one of the agents that show the
//! kit a capability the standard one lacks (`extended-card` also needs
//! `MESH_TCK_EXTENDED_CARD_TOKEN`, the token that opens the extended card).

use clap::Parser;
use mesh_agent_kit::{AgentApp, AgentArgs, AgentConfig, MainError};
use mesh_tck_agent::{TckAgent, Variant, card};

/// Port the agent listens on unless configured otherwise.
const TCK_PORT_DEFAULT: u16 = 9999;

/// The A2A conformance kit's example agent.
#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
    /// The capability the agent shows the kit besides the standard ones.
    #[arg(long, value_enum, default_value_t)]
    variant: Variant,
}

#[tokio::main]
async fn main() -> Result<(), MainError> {
    let cli = Cli::parse();
    let mut card = card()?;
    let variant = cli.variant;
    let build = |config: AgentConfig, http| async move {
        // The kit validates the card against the 1.0 schema alone.
        let mut config = AgentConfig { legacy_card_fields: false, ..config };
        // The conformance kit's webhook receiver runs on this machine, which webhooks reach only
        // when allowed by name.
        if config.push_allowed_networks.is_empty() {
            config.push_allowed_networks = vec!["127.0.0.0/8".into(), "::1/128".into()];
        }
        variant.apply(&mut card, &mut config);
        AgentApp::build_tasks(&config, card, TckAgent, http).await
    };
    cli.agent.run("MESH_TCK", TCK_PORT_DEFAULT, build).await
}
