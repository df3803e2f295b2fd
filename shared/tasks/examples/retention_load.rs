//! Retention at scale (issue #12), run by hand through `scripts/retention.sh`: writes a million
//! finished tasks older than the time to live plus a thousand fresh ones into a SQLite task
//! store, purges, and reports the time taken and the database's size before and after (the file,
//! and the pages holding live data: SQLite keeps freed pages in the file for later writes).
//!
//! ```sh
//! cargo run --release -p mesh-tasks --example retention_load -- --tasks 1000000
//! ```

use std::time::{Duration, Instant};

use chrono::{SecondsFormat, Utc};
use mesh_protocol::a2a::v1::{Message, Role, Task, TaskState, TaskStatus};
use mesh_tasks::TaskStore;
use sqlx::Row;

/// Finished tasks are purged after this long (the default, 7 days).
const TTL: Duration = Duration::from_millis(mesh_tasks::FINISHED_TASK_TTL_MS_DEFAULT);
/// Fresh tasks written beside the old ones; the purge must keep every one.
const FRESH_TASKS: usize = 1_000;
/// Saves in flight at once, so the store's writer commits full batches.
const SAVES_IN_FLIGHT: usize = 2_048;

fn task(id: String, age: Duration) -> Task {
    let at = Utc::now() - chrono::Duration::from_std(age).unwrap_or_default();
    let mut answer = Message::text(Role::Agent, format!("{id}-a"), "a short answer, as most tasks have");
    answer.task_id = Some(id.clone());
    Task {
        context_id: format!("ctx-{id}"),
        status: TaskStatus {
            state: TaskState::Completed,
            message: None,
            timestamp: Some(at.to_rfc3339_opts(SecondsFormat::Micros, true)),
        },
        artifacts: Vec::new(),
        history: vec![Message::text(Role::User, format!("{id}-q"), "what is the weather in Lyon?"), answer],
        metadata: None,
        id,
    }
}

/// The file's size and the bytes of its pages that hold data.
async fn sizes(url: &str, path: &std::path::Path) -> (u64, u64) {
    let file = std::fs::metadata(path).map(|m| m.len()).unwrap_or_default();
    let pool = sqlx::sqlite::SqlitePool::connect(url).await.expect("open the database");
    let pragma = |name: &'static str| {
        let pool = pool.clone();
        async move { sqlx::query(name).fetch_one(&pool).await.expect("pragma").get::<i64, _>(0) }
    };
    let (pages, free, page_size) =
        (pragma("PRAGMA page_count").await, pragma("PRAGMA freelist_count").await, pragma("PRAGMA page_size").await);
    pool.close().await;
    (file, u64::try_from((pages - free) * page_size).unwrap_or_default())
}

#[tokio::main]
async fn main() {
    let tasks: usize = std::env::args()
        .skip_while(|a| a != "--tasks")
        .nth(1)
        .map_or(1_000_000, |n| n.parse().expect("--tasks takes a number"));
    let dir = tempfile::tempdir().expect("a scratch directory");
    let path = dir.path().join("tasks.db");
    let url = format!("sqlite://{}", path.display());
    let store = TaskStore::open(&url, "retention").await.expect("open the store");

    let started = Instant::now();
    let old = TTL + Duration::from_secs(3_600);
    let ids = (0..tasks)
        .map(|i| (format!("old-{i:07}"), old))
        .chain((0..FRESH_TASKS).map(|i| (format!("fresh-{i}"), Duration::ZERO)));
    let mut in_flight = futures::stream::FuturesUnordered::new();
    for (id, age) in ids {
        let store = store.clone();
        in_flight.push(async move { store.save("", task(id, age)).await });
        if in_flight.len() >= SAVES_IN_FLIGHT {
            futures::StreamExt::next(&mut in_flight).await.expect("a save").expect("saved");
        }
    }
    while let Some(saved) = futures::StreamExt::next(&mut in_flight).await {
        saved.expect("saved");
    }
    let write_s = started.elapsed().as_secs_f64();
    let (file_before, data_before) = sizes(&url, &path).await;

    let started = Instant::now();
    let purged = store.purge_finished(TTL).await.expect("purge");
    let purge_s = started.elapsed().as_secs_f64();
    let (file_after, data_after) = sizes(&url, &path).await;
    let kept = store.list("", &Default::default()).await.expect("list").total_size;

    let mb = |bytes: u64| bytes as f64 / 1_048_576.0;
    println!(
        "{}",
        serde_json::json!({
            "tasks_written": tasks + FRESH_TASKS,
            "write_s": (write_s * 10.0).round() / 10.0,
            "writes_per_s": ((tasks + FRESH_TASKS) as f64 / write_s).round(),
            "purged": purged,
            "kept": kept,
            "purge_s": (purge_s * 10.0).round() / 10.0,
            "file_mb_before": mb(file_before).round(),
            "data_mb_before": mb(data_before).round(),
            "file_mb_after": mb(file_after).round(),
            "data_mb_after": (mb(data_after) * 10.0).round() / 10.0,
        })
    );
    assert_eq!(purged as usize, tasks, "every old finished task is purged");
    assert_eq!(kept as usize, FRESH_TASKS, "every fresh task is kept");
}
