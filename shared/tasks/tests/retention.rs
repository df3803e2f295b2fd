//! Retention of the task store, on SQLite (always), PostgreSQL (when `MESH_TEST_POSTGRES_URL`
//! is set) and in memory: finished tasks past their time to live are purged, fresh and unfinished
//! ones kept; tasks a crash left running are failed with the reason (in a database: in memory,
//! none outlives the process).

mod common;

use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use mesh_protocol::a2a::v1::{ListTasksRequest, Message, Role, Task, TaskState, TaskStatus};
use mesh_tasks::TaskStore;

const DAY_MS: u64 = 24 * 3_600_000;

fn task(id: &str, state: TaskState, age: Duration) -> Task {
    let at = Utc::now() - chrono::Duration::from_std(age).unwrap();
    Task {
        id: id.into(),
        context_id: "c".into(),
        status: TaskStatus { state, message: None, timestamp: Some(at.to_rfc3339_opts(SecondsFormat::Micros, true)) },
        artifacts: Vec::new(),
        history: vec![Message::text(Role::User, format!("{id}-m1"), "hi")],
        metadata: None,
    }
}

async fn ids(store: &TaskStore, tenant: &str) -> Vec<String> {
    let mut ids: Vec<String> =
        store.list(tenant, &ListTasksRequest::default()).await.unwrap().tasks.into_iter().map(|t| t.id).collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn the_purge_removes_old_finished_tasks_and_keeps_fresh_and_unfinished_ones() {
    let ttl = Duration::from_millis(7 * DAY_MS);
    let old = Duration::from_millis(8 * DAY_MS);
    let fresh = Duration::from_millis(DAY_MS);
    for (backend, store, _dir) in common::stores("retention").await {
        for (tenant, id, state, age) in [
            ("", "old-completed", TaskState::Completed, old),
            ("", "old-failed", TaskState::Failed, old),
            ("acme", "old-canceled", TaskState::Canceled, old),
            ("acme", "old-rejected", TaskState::Rejected, old),
            ("", "old-input-required", TaskState::InputRequired, old),
            ("", "old-working", TaskState::Working, old),
            ("", "fresh-completed", TaskState::Completed, fresh),
            ("acme", "fresh-failed", TaskState::Failed, fresh),
        ] {
            store.save(tenant, task(id, state, age)).await.unwrap();
        }
        let purged = store.purge_finished(ttl).await.unwrap();
        assert_eq!(purged, 4, "{backend}");
        assert_eq!(ids(&store, "").await, ["fresh-completed", "old-input-required", "old-working"], "{backend}");
        assert_eq!(ids(&store, "acme").await, ["fresh-failed"], "{backend}");
        assert_eq!(store.purge_finished(ttl).await.unwrap(), 0, "{backend}: nothing left to purge");
    }
}

#[tokio::test]
async fn a_purge_larger_than_one_batch_removes_everything_due() {
    for (backend, store, _dir) in common::stores("retention").await {
        let saves = (0..12_345).map(|i| {
            let store = store.clone();
            async move {
                store
                    .save_in_background(
                        "",
                        task(&format!("t{i:05}"), TaskState::Completed, Duration::from_millis(2 * DAY_MS)),
                    )
                    .await
            }
        });
        for saved in futures::future::join_all(saves).await {
            saved.unwrap();
        }
        store.save("", task("kept", TaskState::Completed, Duration::ZERO)).await.unwrap();
        assert_eq!(store.purge_finished(Duration::from_millis(DAY_MS)).await.unwrap(), 12_345, "{backend}");
        assert_eq!(ids(&store, "").await, ["kept"], "{backend}");
    }
}

#[tokio::test]
async fn tasks_left_running_by_a_crash_are_failed_with_the_reason_at_start() {
    for (backend, store, _dir) in common::sql_stores("retention").await {
        for (tenant, id, state) in [
            ("", "working", TaskState::Working),
            ("acme", "submitted", TaskState::Submitted),
            ("", "waiting", TaskState::InputRequired),
            ("", "done", TaskState::Completed),
        ] {
            store.save(tenant, task(id, state, Duration::from_secs(5))).await.unwrap();
        }
        let failed = store.fail_interrupted("the agent restarted", std::time::Duration::from_secs(30)).await.unwrap();
        assert_eq!(failed, 2, "{backend}");
        for (tenant, id, expected) in [
            ("", "working", TaskState::Failed),
            ("acme", "submitted", TaskState::Failed),
            ("", "waiting", TaskState::InputRequired),
            ("", "done", TaskState::Completed),
        ] {
            let task = store.get(tenant, id).await.unwrap().unwrap();
            assert_eq!(task.status.state, expected, "{backend}: {id}");
            if expected == TaskState::Failed {
                let reason = task.status.message.expect("the failure says why");
                assert_eq!(reason.role, Role::Agent);
                assert!(serde_json::to_string(&reason.parts).unwrap().contains("the agent restarted"), "{backend}");
            }
        }
        assert_eq!(
            store.fail_interrupted("again", std::time::Duration::from_secs(30)).await.unwrap(),
            0,
            "{backend}: nothing is left running"
        );
    }
}
