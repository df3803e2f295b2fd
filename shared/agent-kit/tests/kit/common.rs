//! An agent served on port 0 until the test stops it, shared by the kit's integration test modules
//! that stop agents as SIGTERM does (and restart them on the same store).

use std::time::Duration;

use mesh_agent_kit::AgentApp;
use tokio::sync::oneshot;

/// Longest a test's request to the agent may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

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
