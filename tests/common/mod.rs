//! What the suite's end-to-end tests share: starting the whole suite and waiting until every
//! agent is registered and healthy.

use std::time::{Duration, Instant};

use a2a_mesh::{RunningSuite, SuiteConfig, start};
use mesh_client::{HttpClient, RegistryClient};

/// Upper bound for any condition a test waits for.
pub const WAIT_DEADLINE_MS: u64 = 10_000;
/// The agents of the suite: orchestrator, search, entity extraction, profile selection.
pub const SUITE_AGENTS: usize = 4;

/// Starts the suite and waits until the registry reports all its agents healthy, asking it with
/// `bearer` when the suite requires authentication.
pub async fn start_healthy(config: SuiteConfig, bearer: Option<&str>) -> RunningSuite {
    let suite = start(config).await.unwrap();
    let http = HttpClient::with_reqwest().unwrap().with_bearer(bearer).unwrap();
    let registry = RegistryClient::new(&suite.urls.registry, http).unwrap();
    let deadline = Instant::now() + Duration::from_millis(WAIT_DEADLINE_MS);
    while registry.stats().await.map(|s| s.healthy_agents).unwrap_or(0) < SUITE_AGENTS {
        assert!(Instant::now() < deadline, "the agents never all registered as healthy");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    suite
}
