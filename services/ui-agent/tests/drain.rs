//! A stopping UI agent turns not ready first (so load balancers stop sending it new sockets)
//! while it still serves for `shutdown_unready_ms`, then stops: a real agent on port 0.

use std::time::{Duration, Instant};

use mesh_bus::BusConfig;
use ui_agent::{UiAgent, UiAgentConfig};

const UNREADY: Duration = Duration::from_millis(1500);
const WAIT_DEADLINE: Duration = Duration::from_secs(10);

async fn status(url: &str) -> Option<u16> {
    reqwest::get(url).await.ok().map(|r| r.status().as_u16())
}

async fn eventually(what: &str, mut probe: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + WAIT_DEADLINE;
    while !probe().await {
        assert!(Instant::now() < deadline, "{what} within {WAIT_DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_shutdown_readiness_turns_false_while_the_agent_still_serves_then_it_stops() {
    let data = tempfile::tempdir().unwrap();
    let config = UiAgentConfig {
        port: 0,
        bus: BusConfig {
            database_url: format!("sqlite://{}", data.path().join("bus.db").display()),
            ..BusConfig::default()
        },
        shutdown_unready_ms: UNREADY.as_millis() as u64,
        ..UiAgentConfig::default()
    };
    let agent = UiAgent::build(&config).await.unwrap();
    let url = agent.url().to_owned();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(agent.run_until_stopped(async {
        let _ = stopped.await;
    }));
    let ready = format!("{url}/health/ready");
    eventually("the agent ready", async || status(&ready).await == Some(200)).await;

    let stopping = Instant::now();
    stop.send(()).unwrap();
    eventually("readiness to turn false", async || status(&ready).await == Some(503)).await;
    let report: serde_json::Value = reqwest::get(&ready).await.unwrap().json().await.unwrap();
    assert_eq!(report["draining"], true, "{report}");
    assert_eq!(status(&format!("{url}/health/live")).await, Some(200), "alive while draining");
    assert_eq!(status(&format!("{url}/conversations")).await, Some(200), "new requests are still served");

    run.await.unwrap().unwrap();
    assert!(stopping.elapsed() >= UNREADY, "stopped after {:?}, before the unready time", stopping.elapsed());
    assert_eq!(status(&ready).await, None, "no longer listening");
}
