//! A registry killed with SIGKILL and started again lists every agent it had, on SQLite and on
//! PostgreSQL. Runs the real `registry` binary as a child process.
//!
//! The PostgreSQL case needs `MESH_TEST_POSTGRES_URL` (e.g. `postgres://postgres@127.0.0.1:5432/test`);
//! without it the test prints why it skips, and under CI it fails.

use mesh_test_support::ScratchDatabase;

use crate::common::{FakeAgent, RegistryProcess, eventually};

async fn survives_sigkill(database_url: &str) {
    let agents =
        [FakeAgent::start("search-1").await, FakeAgent::start("search-2").await, FakeAgent::start("entity").await];
    let first = RegistryProcess::spawn(database_url).await;
    first.client.register(&agents[0].registration(&["search"])).await.unwrap();
    first.client.register(&agents[1].registration(&["search"])).await.unwrap();
    first.client.register(&agents[2].registration(&["entity_extraction"])).await.unwrap();
    first.client.register(&agents[2].registration(&["entity_extraction", "ner"])).await.unwrap();
    first.client.deregister("search-2", None).await.unwrap();
    let before = first.client.agents().await.unwrap();
    first.kill_9();

    let second = RegistryProcess::spawn(database_url).await;
    let after = second.client.agents().await.unwrap();
    let names = |list: &mesh_protocol::registry::AgentList| {
        list.agents
            .iter()
            .map(|a| (a.name.clone(), a.capabilities.clone(), a.registered_at.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&after), names(&before));
    assert_eq!(
        names(&after).into_iter().map(|(n, c, _)| (n, c)).collect::<Vec<_>>(),
        [
            ("entity".to_string(), vec!["entity_extraction".to_string(), "ner".to_string()]),
            ("search-1".into(), vec!["search".into()])
        ]
    );
    // The restarted registry polls at once and routes to the surviving agents again.
    eventually("agents are healthy after the restart", || async {
        second.client.stats().await.unwrap().healthy_agents == 2
    })
    .await;
    assert_eq!(second.client.pick("search").await.unwrap().agent.name, "search-1");
    second.kill_9();
}

#[tokio::test]
async fn sqlite_registrations_survive_sigkill() {
    let data = tempfile::tempdir().unwrap();
    survives_sigkill(&format!("sqlite://{}", data.path().join("registry.db").display())).await;
}

#[tokio::test]
async fn postgres_registrations_survive_sigkill() {
    let Some(database) = ScratchDatabase::create("mesh_registry_test").await else { return };
    survives_sigkill(&database.url).await;
    database.drop_database().await;
}
