//! `retention_days`: a UI agent deletes the conversations untouched for longer, as soon as it
//! starts and then on a schedule, and keeps the others: a real agent on port 0, on a SQLite file
//! of the test's own.

mod common;

use std::time::{Duration, SystemTime};

use common::{eventually, serve};
use mesh_bus::BusConfig;
use mesh_docmem::DocmemError;
use ui_agent::UiAgentConfig;

const RETENTION_DAYS: u64 = 1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_untouched_past_the_retention_are_deleted_and_the_others_kept() {
    let data = tempfile::tempdir().unwrap();
    let database = data.path().join("bus.db");
    let bus = BusConfig { database_url: format!("sqlite://{}", database.display()), ..BusConfig::default() };
    let (_, docmem) = mesh_bus::open_bus(&bus).await.unwrap();
    let context = mesh_bus::conversation_root_context("agent.echo-1");
    let old = docmem.create_root("", &context, "").await.unwrap();
    let reply =
        docmem.append_child(&old.id, &mesh_docmem::Context::agent_text("echo-1"), "an old answer").await.unwrap();
    let fresh = docmem.create_root("", &context, "").await.unwrap();
    // Last touched two days ago: docmem stamps every write with the current time, so the stored
    // timestamp is set directly.
    let two_days_ago = mesh_docmem::timestamp(SystemTime::now() - Duration::from_secs(2 * 86_400));
    let pool = sqlx::SqlitePool::connect(&bus.database_url).await.unwrap();
    sqlx::query("UPDATE docmem_nodes SET updated_at = ? WHERE id = ?")
        .bind(&two_days_ago)
        .bind(&old.id)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;

    let config = UiAgentConfig {
        port: 0,
        bus,
        retention_days: Some(RETENTION_DAYS),
        shutdown_unready_ms: 0,
        ..UiAgentConfig::default()
    };
    let (url, stop, run) = serve(&config).await;

    eventually("the old conversation deleted", async || {
        matches!(docmem.get(&old.id).await, Err(DocmemError::NotFound(_)))
    })
    .await;
    // Its whole tree went with it; the fresh one stays, node for node.
    assert!(matches!(docmem.get(&reply.id).await, Err(DocmemError::NotFound(_))), "the old conversation's message");
    assert_eq!(docmem.get(&fresh.id).await.unwrap().id, fresh.id);
    let listed: serde_json::Value = reqwest::get(format!("{url}/conversations")).await.unwrap().json().await.unwrap();
    let ids: Vec<&str> =
        listed["conversations"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [fresh.id.as_str()], "{listed}");

    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}
