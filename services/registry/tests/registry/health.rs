//! Health polling: transitions between healthy, unhealthy and unreachable, and recovery.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use mesh_protocol::registry::HealthStatus;

use crate::common::{FakeAgent, HealthProbe, TestRegistry, eventually};

async fn health_of(registry: &TestRegistry, name: &str) -> HealthStatus {
    registry.client.agent(name).await.unwrap().health_status
}

async fn wait_for(registry: &TestRegistry, name: &str, expected: HealthStatus) {
    eventually(&format!("{name} is {expected:?}"), || async { health_of(registry, name).await == expected }).await;
}

#[tokio::test]
async fn an_agent_answering_500_becomes_unhealthy_and_recovers() {
    let registry = TestRegistry::start().await;
    let agent = FakeAgent::start("search_agent").await;
    registry.client.register(&agent.registration(&["search"])).await.unwrap();
    wait_for(&registry, "search_agent", HealthStatus::Healthy).await;

    agent.answer_health(500);
    wait_for(&registry, "search_agent", HealthStatus::Unhealthy).await;
    assert!(registry.client.pick("search").await.unwrap().fallback, "an unhealthy agent leaves the rotation");

    agent.answer_health(200);
    wait_for(&registry, "search_agent", HealthStatus::Healthy).await;
    assert!(!registry.client.pick("search").await.unwrap().fallback, "a recovered agent is back in rotation");
    registry.stop().await;
}

#[tokio::test]
async fn an_agent_that_stops_answering_becomes_unreachable_and_recovers() {
    let registry = TestRegistry::start().await;
    let agent = FakeAgent::start("search_agent").await;
    registry.client.register(&agent.registration(&["search"])).await.unwrap();
    wait_for(&registry, "search_agent", HealthStatus::Healthy).await;

    agent.stop_answering_health();
    wait_for(&registry, "search_agent", HealthStatus::Unreachable).await;
    let record = registry.client.agent("search_agent").await.unwrap();
    assert!(record.last_health_check.is_some());

    agent.answer_health(200);
    wait_for(&registry, "search_agent", HealthStatus::Healthy).await;
    registry.stop().await;
}

#[tokio::test]
async fn a_dead_agent_is_unreachable_and_leaves_the_rotation() {
    let registry = TestRegistry::start().await;
    let alive = FakeAgent::start("search-1").await;
    let doomed = FakeAgent::start("search-2").await;
    registry.client.register(&alive.registration(&["search"])).await.unwrap();
    registry.client.register(&doomed.registration(&["search"])).await.unwrap();
    wait_for(&registry, "search-2", HealthStatus::Healthy).await;
    wait_for(&registry, "search-1", HealthStatus::Healthy).await;

    doomed.kill().await;
    wait_for(&registry, "search-2", HealthStatus::Unreachable).await;
    for _ in 0..4 {
        assert_eq!(registry.client.pick("search").await.unwrap().agent.name, "search-1");
    }
    let stats = registry.client.stats().await.unwrap();
    assert_eq!((stats.total_agents, stats.healthy_agents, stats.unreachable_agents), (2, 1, 1));
    registry.stop().await;
}

#[tokio::test]
async fn polls_are_bounded_and_one_slow_agent_does_not_hold_back_the_others() {
    // One poller slot only: a hanging agent must still give way to the others within its timeout.
    let registry = TestRegistry::start_with(|c| c.health_check_concurrency_max = 1).await;
    // The hanging agent counts apart: a request the registry gave up on stays open on its side
    // (it never answers), so its count says nothing of the registry's own checks in flight.
    let hanging = FakeAgent::start_observed("hanging", Arc::new(HealthProbe::default())).await;
    let probe = Arc::new(HealthProbe::default());
    let failing = FakeAgent::start_observed("failing", probe.clone()).await;
    let healthy = FakeAgent::start_observed("healthy", probe.clone()).await;
    for agent in [&hanging, &failing, &healthy] {
        registry.client.register(&agent.registration(&["search"])).await.unwrap();
        wait_for(&registry, &agent.name, HealthStatus::Healthy).await;
    }
    // From here on only the poller checks (the checks made at registration are done).
    probe.max_in_flight.store(0, Ordering::SeqCst);
    hanging.stop_answering_health();
    failing.answer_health(503);
    wait_for(&registry, "hanging", HealthStatus::Unreachable).await;
    wait_for(&registry, "failing", HealthStatus::Unhealthy).await;
    wait_for(&registry, "healthy", HealthStatus::Healthy).await;
    // Slow enough that checks taken up to two claim ticks apart overlap, were they let run together.
    failing.answer_health_after(60);
    healthy.answer_health_after(60);
    let checked = probe.requests.load(Ordering::SeqCst);
    eventually("both checked several times", || async { probe.requests.load(Ordering::SeqCst) >= checked + 8 }).await;
    assert_eq!(probe.max_in_flight.load(Ordering::SeqCst), 1, "never more than one health check at a time");
    registry.stop().await;
}

/// A registry polling an hour apart, and `search_agent` registered with it and found healthy.
async fn healthy_agent_polled_hourly() -> (TestRegistry, FakeAgent, mesh_protocol::registry::Registration) {
    let registry = TestRegistry::start_with(|config| config.health_check_interval_ms = 3_600_000).await;
    let agent = FakeAgent::start("search_agent").await;
    let registration = agent.registration(&["search"]);
    registry.client.register(&registration).await.unwrap();
    wait_for(&registry, "search_agent", HealthStatus::Healthy).await;
    (registry, agent, registration)
}

#[tokio::test]
async fn a_failure_report_checks_the_agent_at_once_instead_of_at_the_next_poll() {
    // Polls an hour apart: only the report can make the registry notice.
    let (registry, agent, registration) = healthy_agent_polled_hourly().await;
    agent.answer_health(503);
    let answer = registry.client.report_failure("search_agent", &registration.url).await.unwrap();
    assert_eq!(answer.message, "health checked: unhealthy");
    assert_eq!(health_of(&registry, "search_agent").await, HealthStatus::Unhealthy);
    agent.answer_health(200);
    let answer = registry.client.report_failure("search_agent", &registration.url).await.unwrap();
    assert_eq!(answer.message, "health checked: healthy", "a live agent stays in rotation");

    // About another instance, or an unknown agent: refused with a body, nothing checked.
    let error = registry.client.report_failure("search_agent", "http://127.0.0.1:1").await.unwrap_err();
    assert!(
        matches!(&error, mesh_client::ClientError::Status { status: 409, body: Some(b), .. } if b.error_code == "AGENT_INSTANCE_REPLACED"),
        "{error}"
    );
    let error = registry.client.report_failure("nobody", "http://127.0.0.1:1").await.unwrap_err();
    assert!(matches!(&error, mesh_client::ClientError::Status { status: 404, .. }), "{error}");
    registry.stop().await;
}

/// An agent found unreachable that comes back at the same address re-registers unchanged (as an
/// agent does at start): it is checked then, and back in rotation long before its next poll.
#[tokio::test]
async fn an_unreachable_agent_re_registering_is_checked_at_once() {
    // Polls an hour apart: only the registration can make the registry notice.
    let (registry, agent, registration) = healthy_agent_polled_hourly().await;
    agent.answer_health(503);
    registry.client.report_failure("search_agent", &registration.url).await.unwrap();
    assert_eq!(health_of(&registry, "search_agent").await, HealthStatus::Unhealthy);
    agent.answer_health(200);
    registry.client.register(&registration).await.unwrap();
    wait_for(&registry, "search_agent", HealthStatus::Healthy).await;
    assert!(!registry.client.pick("search").await.unwrap().fallback, "back in rotation");
    registry.stop().await;
}

#[tokio::test]
async fn without_its_database_the_registry_is_unhealthy_and_not_ready_but_alive() {
    let registry = TestRegistry::start().await;
    let get = |path: &str| {
        let request = registry.http.get(format!("{}{path}", registry.url));
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<serde_json::Value>().await.unwrap())
        }
    };
    let (status, health) = get("/health").await;
    assert_eq!((status, health["status"].as_str()), (200, Some("healthy")), "{health}");
    assert_eq!(get("/health/ready").await.0, 200);

    registry.service.close_storage().await;
    eventually("the registry reports its database unreachable", || async { get("/health").await.0 == 503 }).await;
    let (_, health) = get("/health").await;
    assert_eq!(health["status"], "unhealthy", "{health}");
    assert_eq!(health["components"]["database"]["status"], "unhealthy", "{health}");
    let (status, ready) = get("/health/ready").await;
    assert_eq!((status, ready["status"].as_str()), (503, Some("not_ready")), "{ready}");
    assert_eq!(get("/health/live").await.0, 200, "a process that answers is alive: no restart is asked for");
    registry.stop().await;
}
