//! What the kit's integration test modules share: an agent served on port 0 until the test stops
//! it as SIGTERM does (and restarts it on the same store), the helpers more than one module uses.

use std::sync::LazyLock;
use std::time::Duration;

use mesh_agent_kit::{AgentApp, AgentConfig};
use mesh_protocol::a2a::v1::AgentCard;
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// Longest a test's request to the agent may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The log lines the tests read (`mesh_test_support::logs`): the task engine's account of its
/// turns, and the agent's own (registration). The capture is the whole test binary's and
/// installed once, so every module capturing logs asks for these same targets.
pub const LOG_TARGETS: &str = "mesh_a2a_server::engine=debug,mesh_agent_kit::app=info";

/// An agent served in the background, with a plain HTTP client for the test's requests.
pub struct Served {
    pub url: String,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Serves `app` on the current runtime.
    pub fn serve(app: AgentApp) -> Self {
        let url = app.url().to_owned();
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(async move {
            app.run_until_stopped(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Self { url, http: reqwest::Client::builder().timeout(TIMEOUT).build().unwrap(), stop: Some(stop), done }
    }

    /// The agent's public card, as served.
    pub async fn public_card(&self) -> serde_json::Value {
        self.http.get(format!("{}/.well-known/agent-card.json", self.url)).send().await.unwrap().json().await.unwrap()
    }

    /// Stops the agent as SIGTERM does, and waits until it has.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.done.await.unwrap();
    }
}

/// The one client the tests of agents not [`Served`] here talk through (`graph`, `http_surface`).
/// Each test runs its own runtime, so idle connections are not kept: a pooled connection would be
/// bound to the runtime of the test that opened it.
pub static HTTP: LazyLock<reqwest::Client> = LazyLock::new(|| {
    reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("the test HTTP client builds")
});

/// Polls `check` until it holds, failing the test, naming `what`, after [`TIMEOUT`].
pub async fn eventually(what: &str, check: impl AsyncFnMut() -> bool) {
    mesh_test_support::eventually(what, TIMEOUT, check).await;
}

/// An agent whose tasks are kept in an in-memory SQLite database.
pub fn sqlite_memory_config() -> AgentConfig {
    AgentConfig { task_store_url: Some(mesh_storage::SQLITE_MEMORY_URL.into()), ..AgentConfig::default() }
}

/// The card of agent `name`: one `echo` skill, and streaming.
pub fn echo_card(name: &str) -> AgentCard {
    serde_json::from_value(json!({
        "name": name, "description": "test agent", "version": "1",
        "supportedInterfaces": [], "capabilities": {"streaming": true},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "echo", "tags": ["echo"]}]
    }))
    .unwrap()
}

/// The ids of a served card's skills, in its order.
pub fn skill_ids(card: &Value) -> Vec<&str> {
    card["skills"].as_array().unwrap().iter().map(|skill| skill["id"].as_str().unwrap()).collect()
}
