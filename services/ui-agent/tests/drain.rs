//! A stopping UI agent turns not ready first (so load balancers stop sending it new sockets)
//! while it still serves for `shutdown_unready_ms`, then stops: a real agent on port 0.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, serve};
use mesh_bus::BusConfig;
use ui_agent::UiAgentConfig;

const UNREADY: Duration = Duration::from_millis(1500);

async fn status(url: &str) -> Option<u16> {
    reqwest::get(url).await.ok().map(|r| r.status().as_u16())
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
    let (url, stop, run) = serve(&config).await;
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
