//! Registry replicas sharing one database (issue #16): each agent is checked by one replica per
//! interval, and by the others when one dies; a change made through one replica is seen by the
//! others within the sync interval; picks spread evenly over the agents whichever replica a
//! caller asks.
//!
//! On PostgreSQL (`MESH_TEST_POSTGRES_URL`, a database of its own per test; without it the tests
//! say why they skip, and under CI they fail), and the polling test on a shared SQLite file too.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mesh_client::ClientError;
use mesh_protocol::registry::HealthStatus;
use mesh_test_support::ScratchDatabase;

use crate::common::{FakeAgent, HealthProbe, TestRegistry, eventually};

/// The replicas' health interval: long enough that one replica's checks cannot hide in the
/// others' (three replicas each checking would triple the count).
const INTERVAL_MS: u64 = 400;
/// How often the replicas read whether the registrations changed.
const SYNC_INTERVAL_MS: u64 = 100;
const REPLICAS: usize = 3;

async fn replicas(database_url: &str) -> Vec<TestRegistry> {
    let mut replicas = Vec::new();
    for _ in 0..REPLICAS {
        replicas.push(
            TestRegistry::start_on(database_url.to_owned(), None, |config| {
                config.health_check_interval_ms = INTERVAL_MS;
                config.sync_interval_ms = SYNC_INTERVAL_MS;
            })
            .await,
        );
    }
    replicas
}

async fn stop_all(replicas: Vec<TestRegistry>) {
    for replica in replicas {
        replica.stop().await;
    }
}

/// Agents registered through the first replica, each counting its health checks.
async fn observed_agents(replicas: &[TestRegistry], count: usize) -> Vec<(FakeAgent, Arc<HealthProbe>)> {
    let mut agents = Vec::new();
    for n in 0..count {
        let probe = Arc::new(HealthProbe::default());
        let agent = FakeAgent::start_observed(&format!("agent-{n}"), probe.clone()).await;
        replicas[0].client.register(&agent.registration(&["search"])).await.unwrap();
        agents.push((agent, probe));
    }
    agents
}

/// Checks per agent over `window`: about one per interval, never one per replica per interval.
async fn checks_over(agents: &[(FakeAgent, Arc<HealthProbe>)], window: Duration) -> Vec<usize> {
    let before: Vec<usize> = agents.iter().map(|(_, probe)| probe.requests.load(Ordering::SeqCst)).collect();
    tokio::time::sleep(window).await;
    agents.iter().zip(before).map(|((_, probe), before)| probe.requests.load(Ordering::SeqCst) - before).collect()
}

fn assert_once_per_interval(counts: &[usize], window: Duration, what: &str) {
    let intervals = window.as_millis() as usize / INTERVAL_MS as usize;
    // One check per interval, give or take one at either end of the window; three replicas each
    // checking would give three times as many.
    for &count in counts {
        assert!(
            (intervals - 1..=intervals + 1).contains(&count),
            "{what}: {count} checks in {intervals} intervals (every agent: {counts:?})"
        );
    }
}

async fn each_agent_is_checked_once_per_interval_and_by_the_survivors_when_a_replica_dies(database_url: &str) {
    let mut replicas = replicas(database_url).await;
    let agents = observed_agents(&replicas, 6).await;
    for replica in &replicas {
        eventually("every replica sees every agent healthy", || async {
            replica.client.stats().await.is_ok_and(|stats| stats.healthy_agents == agents.len())
        })
        .await;
    }
    let window = Duration::from_millis(INTERVAL_MS * 8);
    assert_once_per_interval(&checks_over(&agents, window).await, window, "three replicas");
    // The replica that checked last is as likely as any other to go; its checks move on.
    replicas.remove(0).stop().await;
    tokio::time::sleep(Duration::from_millis(INTERVAL_MS)).await; // checks it had taken fall due
    assert_once_per_interval(&checks_over(&agents, window).await, window, "two replicas, one gone");
    stop_all(replicas).await;
}

#[tokio::test]
async fn postgres_each_agent_is_checked_once_per_interval_and_by_the_survivors_when_a_replica_dies() {
    let Some(database) = ScratchDatabase::create("mesh_registry_test").await else { return };
    each_agent_is_checked_once_per_interval_and_by_the_survivors_when_a_replica_dies(&database.url).await;
    database.drop_database().await;
}

#[tokio::test]
async fn sqlite_each_agent_is_checked_once_per_interval_and_by_the_survivors_when_a_replica_dies() {
    let data = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", data.path().join("registry.db").display());
    each_agent_is_checked_once_per_interval_and_by_the_survivors_when_a_replica_dies(&url).await;
}

#[tokio::test]
async fn a_change_through_one_replica_is_seen_by_the_others_within_the_sync_interval() {
    let Some(database) = ScratchDatabase::create("mesh_registry_test").await else { return };
    let replicas = replicas(&database.url).await;
    let agent = FakeAgent::start("moving").await;
    // Bound: the sync interval, plus a reload; the wait allows ten times that on a busy machine,
    // and the measured time is printed.
    let seen_within = |what: &'static str| {
        let replicas = &replicas;
        async move {
            let started = Instant::now();
            for replica in &replicas[1..] {
                match what {
                    "registered" => eventually(what, || async { replica.client.agent("moving").await.is_ok() }).await,
                    "unhealthy" => {
                        eventually(what, || async {
                            replica
                                .client
                                .agent("moving")
                                .await
                                .is_ok_and(|a| a.health_status == HealthStatus::Unhealthy)
                        })
                        .await
                    }
                    _ => {
                        eventually(what, || async {
                            matches!(replica.client.agent("moving").await, Err(ClientError::Status { status: 404, .. }))
                        })
                        .await
                    }
                }
            }
            let took = started.elapsed();
            eprintln!("{what}: seen on every other replica after {} ms", took.as_millis());
            assert!(took < Duration::from_millis(SYNC_INTERVAL_MS * 10), "{what} took {took:?}");
        }
    };
    replicas[0].client.register(&agent.registration(&["search"])).await.unwrap();
    seen_within("registered").await;
    agent.answer_health(503);
    replicas[0].client.report_failure("moving", &agent.url).await.unwrap();
    seen_within("unhealthy").await;
    replicas[0].client.deregister("moving", None).await.unwrap();
    seen_within("removed").await;
    stop_all(replicas).await;
    database.drop_database().await;
}

#[tokio::test]
async fn picks_through_every_replica_share_the_agents_evenly() {
    let Some(database) = ScratchDatabase::create("mesh_registry_test").await else { return };
    let replicas = replicas(&database.url).await;
    let agents = observed_agents(&replicas, 3).await;
    for replica in &replicas {
        eventually("every replica sees every agent healthy", || async {
            replica.client.stats().await.is_ok_and(|stats| stats.healthy_agents == agents.len())
        })
        .await;
    }
    // A caller behind a load balancer: each pick through the next replica.
    let mut counts = BTreeMap::<String, usize>::new();
    for n in 0..30 {
        let pick = replicas[n % REPLICAS].client.pick("search").await.unwrap();
        assert!(!pick.fallback);
        *counts.entry(pick.agent.name).or_default() += 1;
    }
    // Each replica hands out its 10 picks round-robin over 3 agents: at most 4 to any agent.
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert!(counts.values().all(|&n| (6..=12).contains(&n)), "{counts:?}");
    stop_all(replicas).await;
    database.drop_database().await;
}

#[tokio::test]
async fn a_client_given_every_replica_goes_on_through_the_others_when_one_stops() {
    let Some(database) = ScratchDatabase::create("mesh_registry_test").await else { return };
    let mut replicas = replicas(&database.url).await;
    let urls: Vec<String> = replicas.iter().map(|r| r.url.clone()).collect();
    let client =
        mesh_client::RegistryClient::new(&urls.join(","), mesh_client::HttpClient::with_reqwest().unwrap()).unwrap();
    let agent = FakeAgent::start("steady").await;
    client.register(&agent.registration(&["search"])).await.unwrap();
    replicas.remove(0).stop().await;
    // The first replica is gone: the same client registers and looks up through the others.
    client.register(&agent.registration(&["search", "rank"])).await.unwrap();
    eventually("the update is seen", || async {
        client.agent("steady").await.is_ok_and(|a| a.capabilities.contains(&"rank".to_owned()))
    })
    .await;
    assert_eq!(client.discover("rank").await.unwrap().agents.len(), 1);
    stop_all(replicas).await;
    database.drop_database().await;
}
