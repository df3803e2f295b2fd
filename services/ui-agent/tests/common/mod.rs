//! What the UI agent's integration tests share: serving a real agent on port 0 until told to
//! stop, and waiting for a condition with a deadline.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use ui_agent::{UiAgent, UiAgentConfig, UiError};

/// Longest a test waits for a condition to become true.
pub const WAIT_DEADLINE: Duration = Duration::from_secs(10);

/// Builds the agent `config` describes and serves it until the returned sender is used: its URL,
/// that sender, and the serving task (which ends once the agent stopped).
pub async fn serve(config: &UiAgentConfig) -> (String, oneshot::Sender<()>, JoinHandle<Result<(), UiError>>) {
    let agent = UiAgent::build(config).await.unwrap();
    let url = agent.url().to_owned();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(agent.run_until_stopped(async {
        let _ = stopped.await;
    }));
    (url, stop, run)
}

/// Polls `probe` until it holds, failing the test with `what` after [`WAIT_DEADLINE`].
pub async fn eventually(what: &str, mut probe: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + WAIT_DEADLINE;
    while !probe().await {
        assert!(Instant::now() < deadline, "{what} within {WAIT_DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
