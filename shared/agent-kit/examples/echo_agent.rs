//! The smallest agent on the kit: it answers every task with the text and data it was sent.
//!
//! `cargo run -p mesh-agent-kit --example echo_agent -- --port 9001 --registry-url http://127.0.0.1:8000`

use clap::Parser;
use mesh_agent_kit::{AgentApp, AgentArgs, AgentConfig, AgentError, AgentHandler, AgentReply, MainError, TaskInput};
use mesh_protocol::a2a::v1::AgentCard;
use serde_json::json;

/// Port the echo agent listens on unless configured otherwise.
const ECHO_PORT_DEFAULT: u16 = 9001;

/// An echo agent on the mesh agent kit.
#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
}

#[derive(Debug)]
struct Echo;

impl AgentHandler for Echo {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        if task.text.trim().is_empty() {
            return Err(AgentError::InvalidInput("the task has no text to echo".into()));
        }
        Ok(AgentReply::data(json!({"echo": task.text, "data": task.data})))
    }
}

fn card() -> Result<AgentCard, serde_json::Error> {
    serde_json::from_value(json!({
        "name": "echo",
        "description": "Answers every task with the text and data it was sent.",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": [{"id": "echo", "name": "Echo", "description": "Echo the task back", "tags": ["echo", "test"]}]
    }))
}

#[tokio::main]
async fn main() -> Result<(), MainError> {
    let card = card()?;
    let build = |config: AgentConfig, http| async move { AgentApp::build(&config, card, Echo, http).await };
    Cli::parse().agent.run("MESH_ECHO", ECHO_PORT_DEFAULT, build).await
}
