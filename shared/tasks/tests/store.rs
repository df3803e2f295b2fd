//! The task store on SQLite (always), PostgreSQL (when `MESH_TEST_POSTGRES_URL` is set) and in
//! memory; a buffered store's writes committed within its flush interval and on a flush.

mod common;

use std::time::Duration;

use mesh_protocol::a2a::v1::{ListTasksRequest, Message, Role, Task, TaskState, TaskStatus};
use mesh_storage::SQLITE_WAL_CHECKPOINT_PAGES;
use mesh_tasks::model::now_timestamp;
use mesh_tasks::{TaskError, TaskStore};

fn task(id: &str, context_id: &str, state: TaskState) -> Task {
    Task {
        id: id.into(),
        context_id: context_id.into(),
        status: TaskStatus { state, message: None, timestamp: Some(now_timestamp()) },
        artifacts: Vec::new(),
        history: vec![
            Message::text(Role::User, format!("{id}-m1"), "hi"),
            Message::text(Role::Agent, format!("{id}-m2"), "hello"),
        ],
        metadata: None,
    }
}

#[tokio::test]
async fn concurrent_saves_commit_and_read_back() {
    for (backend, store, _dir) in common::stores("test-agent").await {
        let saves = (0..200).map(|i| {
            let store = store.clone();
            async move { store.save("", task(&format!("t{i:03}"), "c1", TaskState::Completed)).await }
        });
        for result in futures::future::join_all(saves).await {
            result.unwrap();
        }
        // More rows than one INSERT statement carries: every one of them lands.
        let listed = store.list("", &ListTasksRequest::default()).await.unwrap();
        assert_eq!(listed.total_size, 200, "{backend}");
        let read = store.get("", "t042").await.unwrap().expect("saved task");
        let mut expected = task("t042", "c1", TaskState::Completed);
        expected.status.timestamp.clone_from(&read.status.timestamp);
        assert_eq!(read, expected, "{backend}");
        assert_eq!(store.get("other-tenant", "t042").await.unwrap(), None, "{backend}: tenants are apart");
        assert_eq!(store.get("", "missing").await.unwrap(), None);
    }
}

#[tokio::test]
async fn a_task_id_is_created_once_per_tenant_and_each_store_says_what_it_is() {
    for (backend, store, _dir) in common::stores("test-agent").await {
        let new = task("once", "c1", TaskState::Submitted);
        assert!(store.create("", &new).await.unwrap(), "{backend}");
        assert!(!store.create("", &new).await.unwrap(), "{backend}: the id is taken");
        assert!(store.create("other", &new).await.unwrap(), "{backend}: free in another tenant");
        assert_eq!(store.check_room(), Ok(()), "{backend}");
        store.ping().await.unwrap();
        let expected = match backend.as_str() {
            "memory" => (Some((2, mesh_tasks::MEMORY_TASKS_MAX_DEFAULT)), false),
            "sqlite" => (None, false),
            // Replicas of an agent share PostgreSQL, and hear each other's task events through it.
            _ => (None, true),
        };
        assert_eq!((store.memory_occupancy(), store.shares_events()), expected, "{backend}");
    }
}

/// A store's writer ends with the store: dropped, it leaves no task behind (a writer that kept
/// polling its closed queue would spin for the life of the process).
#[tokio::test]
async fn a_dropped_stores_writer_ends() {
    let tasks = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
    let before = tasks();
    let store = TaskStore::open(mesh_storage::SQLITE_MEMORY_URL, "dropped").await.unwrap();
    store.save("", task("t1", "c1", TaskState::Completed)).await.unwrap();
    assert!(tasks() > before, "the writer runs");
    drop(store);
    mesh_test_support::eventually("the writer's end", Duration::from_secs(30), async || tasks() == before).await;
}

/// `/health` asks the store's ping: a store on PostgreSQL tells when its server stops answering
/// (cut off by a relay) rather than answering from its pool.
#[tokio::test]
async fn a_store_whose_database_stops_answering_fails_its_ping() {
    let Some(url) = mesh_test_support::postgres_url() else { return };
    let (mut relay, through) = mesh_test_support::relay::Relay::in_front_of(&url, 5432).await;
    let agent = format!("ping-{}", uuid::Uuid::new_v4());
    let store = TaskStore::open(&through, &agent).await.unwrap();
    store.ping().await.unwrap();
    relay.cut().await;
    // A pooled connection may take a moment to see its socket gone; each ping then fails within
    // the pool's acquire timeout.
    mesh_test_support::eventually("a failed ping", Duration::from_secs(30), async || store.ping().await.is_err()).await;
}

#[tokio::test]
async fn a_memory_store_full_of_unfinished_tasks_has_no_room_for_another() {
    let store = TaskStore::in_memory("test-agent", 1);
    assert!(store.create("", &task("running", "c1", TaskState::Working)).await.unwrap());
    assert!(matches!(store.check_room(), Err(TaskError::Busy(_))));
    assert_eq!(store.memory_occupancy(), Some((1, 1)));
}

#[tokio::test]
async fn later_saves_of_a_task_win() {
    for (backend, store, _dir) in common::stores("test-agent").await {
        store.save_in_background("", task("t1", "c1", TaskState::Working)).await.unwrap();
        store.save("", task("t1", "c1", TaskState::Completed)).await.unwrap();
        let read = store.get("", "t1").await.unwrap().unwrap();
        assert_eq!(read.status.state, TaskState::Completed, "{backend}");
    }
}

#[tokio::test]
async fn an_older_state_saved_late_never_replaces_a_newer_one() {
    for (backend, store, _dir) in common::stores("test-agent").await {
        let mut working = task("t4", "c4", TaskState::Working);
        working.status.timestamp = Some("2026-11-23T10:00:00.000001Z".into());
        let mut canceled = task("t4", "c4", TaskState::Canceled);
        canceled.status.timestamp = Some("2026-11-23T10:00:00.000002Z".into());
        store.save("", canceled).await.unwrap();
        // In one batch and in separate ones, queued and committed.
        store.save_in_background("", working.clone()).await.unwrap();
        assert_eq!(store.get("", "t4").await.unwrap().unwrap().status.state, TaskState::Canceled, "{backend}");
        store.save("", working).await.unwrap();
        assert_eq!(store.get("", "t4").await.unwrap().unwrap().status.state, TaskState::Canceled, "{backend}");
    }
}

#[tokio::test]
async fn a_background_save_is_read_back_before_and_after_its_commit() {
    for (backend, store, _dir) in common::stores("test-agent").await {
        for state in [TaskState::Working, TaskState::InputRequired] {
            store.save_in_background("tenant", task("t2", "c2", state)).await.unwrap();
            let read = store.get("tenant", "t2").await.unwrap().expect("the queued task");
            assert_eq!(read.status.state, state, "{backend}");
        }
        assert_eq!(store.get("other", "t2").await.unwrap(), None, "{backend}: tenants stay apart");
        // A waited-for save commits after the background ones; the store then reads the table.
        store.save("tenant", task("t3", "c2", TaskState::Completed)).await.unwrap();
        let read = store.get("tenant", "t2").await.unwrap().expect("the committed task");
        assert_eq!(read.status.state, TaskState::InputRequired, "{backend}");
    }
}

#[tokio::test]
async fn lists_page_through_every_task_once_and_filter() {
    for (backend, store, _dir) in common::stores("test-agent").await {
        for i in 0..5 {
            store.save("", task(&format!("a{i}"), "ctx-a", TaskState::Completed)).await.unwrap();
        }
        store.save("", task("b0", "ctx-b", TaskState::InputRequired)).await.unwrap();
        store.save("t2", task("c0", "ctx-a", TaskState::Completed)).await.unwrap();

        let mut seen = Vec::new();
        let mut request =
            ListTasksRequest { context_id: Some("ctx-a".into()), page_size: Some(2), ..Default::default() };
        loop {
            let page = store.list("", &request).await.unwrap();
            assert_eq!(page.total_size, 5, "{backend}");
            assert!(page.tasks.len() <= 2);
            seen.extend(page.tasks.iter().map(|t| t.id.clone()));
            if page.next_page_token.is_empty() {
                break;
            }
            request.page_token = Some(page.next_page_token);
        }
        seen.sort();
        assert_eq!(seen, ["a0", "a1", "a2", "a3", "a4"], "{backend}");

        let waiting =
            ListTasksRequest { status: Some(TaskState::InputRequired), history_length: Some(1), ..Default::default() };
        let page = store.list("", &waiting).await.unwrap();
        assert_eq!(page.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["b0"], "{backend}");
        assert_eq!(page.tasks[0].history.len(), 1, "historyLength trims to the most recent");
        assert_eq!(page.tasks[0].history[0].message_id, "b0-m2");

        let future =
            ListTasksRequest { status_timestamp_after: Some("2999-01-01T00:00:00Z".into()), ..Default::default() };
        assert_eq!(store.list("", &future).await.unwrap().total_size, 0);
        assert_eq!(store.list("t2", &ListTasksRequest::default()).await.unwrap().total_size, 1, "{backend}");
    }
}

#[tokio::test]
async fn bad_list_requests_are_invalid_params() {
    for (_backend, store, _dir) in common::stores("test-agent").await {
        for request in [
            ListTasksRequest { page_size: Some(0), ..Default::default() },
            ListTasksRequest { page_size: Some(101), ..Default::default() },
            ListTasksRequest { page_token: Some("zz".into()), ..Default::default() },
            ListTasksRequest { history_length: Some(-1), ..Default::default() },
            ListTasksRequest { status_timestamp_after: Some("yesterday".into()), ..Default::default() },
        ] {
            let error = store.list("", &request).await.unwrap_err();
            assert!(matches!(error, TaskError::InvalidParams(_)), "{request:?}: {error:?}");
        }
    }
}

#[tokio::test]
async fn tasks_survive_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tasks.db").display());
    {
        let store = TaskStore::open(&url, "agent").await.unwrap();
        store.save("", task("kept", "c1", TaskState::Completed)).await.unwrap();
    }
    let store = TaskStore::open(&url, "agent").await.unwrap();
    assert_eq!(store.get("", "kept").await.unwrap().unwrap().status.state, TaskState::Completed);
    assert_eq!(TaskStore::open(&url, "another-agent").await.unwrap().get("", "kept").await.unwrap(), None);
}

/// Where a buffered store and a durable reader of its table meet: a SQLite file (always) and the
/// test PostgreSQL (when set), with the folder the file lives in.
fn sql_urls() -> Vec<(String, String, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let file = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let mut urls = vec![("sqlite".to_owned(), file, Some(dir))];
    if let Some(url) = mesh_test_support::postgres_url() {
        urls.push(("postgres".to_owned(), url, None));
    }
    urls
}

/// Longest wait for a buffered write to reach the table in a test: far past its flush interval.
const COMMIT_DEADLINE: Duration = Duration::from_secs(10);
/// A flush interval no test outlasts: what such a store commits, a flush committed.
const FLUSH_INTERVAL_NEVER: Duration = Duration::from_secs(3_600);

#[tokio::test]
async fn a_buffered_save_is_read_at_once_and_committed_by_a_flush() {
    for (backend, url, _dir) in sql_urls() {
        let agent = format!("buffered-{}", uuid::Uuid::new_v4());
        let buffered = TaskStore::open_buffered(&url, &agent, FLUSH_INTERVAL_NEVER).await.unwrap();
        let table = TaskStore::open(&url, &agent).await.unwrap();
        for i in 0..3 {
            buffered.save("", task(&format!("t{i}"), "c1", TaskState::Completed)).await.unwrap();
        }
        // Answered before any commit: read back from the queue.
        assert_eq!(buffered.get("", "t1").await.unwrap().unwrap().status.state, TaskState::Completed, "{backend}");
        // The writer has taken all three and holds them, waiting out its interval: an unbuffered
        // writer would be committing them by now. Not in the table while it still holds them.
        mesh_test_support::eventually("the writer to hold the three writes", COMMIT_DEADLINE, async || {
            buffered.writes_held() == 3
        })
        .await;
        assert_eq!(table.get("", "t1").await.unwrap(), None, "{backend}: the writer waits out its interval");
        assert_eq!(buffered.writes_held(), 3, "{backend}: held through the read");
        buffered.flush().await.unwrap();
        assert_eq!(table.list("", &ListTasksRequest::default()).await.unwrap().total_size, 3, "{backend}");
    }
}

#[tokio::test]
async fn a_store_on_one_in_memory_connection_reads_between_its_writes() {
    // An in-memory SQLite database is one connection: the writer must not keep it from reads.
    let store = TaskStore::open(mesh_storage::SQLITE_MEMORY_URL, "one-connection").await.unwrap();
    for i in 0..3 {
        let id = format!("t{i}");
        store.save("", task(&id, "c1", TaskState::Completed)).await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(2), store.get("", &id)).await;
        assert_eq!(read.expect("a read waits for no connection").unwrap().unwrap().id, id);
    }
    assert_eq!(store.list("", &ListTasksRequest::default()).await.unwrap().total_size, 3);
}

/// More rows than one upsert statement carries (128), so that one commit runs several
/// statements in a transaction rather than the single statement that commits by itself.
const ROWS_OVER_ONE_STATEMENT: usize = 300;

#[tokio::test]
async fn a_batch_of_more_rows_than_one_statement_carries_commits_whole() {
    for (backend, url, _dir) in sql_urls() {
        let agent = format!("batch-{}", uuid::Uuid::new_v4());
        let buffered = TaskStore::open_buffered(&url, &agent, FLUSH_INTERVAL_NEVER).await.unwrap();
        for i in 0..ROWS_OVER_ONE_STATEMENT {
            buffered.save("", task(&format!("t{i:03}"), "c1", TaskState::Completed)).await.unwrap();
        }
        // The writer holds every save until the flush: they are committed as one batch.
        buffered.flush().await.unwrap();
        let table = TaskStore::open(&url, &agent).await.unwrap();
        let listed = table.list("", &ListTasksRequest::default()).await.unwrap();
        assert_eq!(listed.total_size, i32::try_from(ROWS_OVER_ONE_STATEMENT).unwrap(), "{backend}");
        let last = format!("t{:03}", ROWS_OVER_ONE_STATEMENT - 1);
        assert_eq!(table.get("", &last).await.unwrap().unwrap().id, last, "{backend}");
    }
}

#[tokio::test]
async fn a_buffered_save_is_committed_within_the_flush_interval() {
    for (backend, url, _dir) in sql_urls() {
        let agent = format!("buffered-{}", uuid::Uuid::new_v4());
        let buffered = TaskStore::open_buffered(&url, &agent, Duration::from_millis(50)).await.unwrap();
        let table = TaskStore::open(&url, &agent).await.unwrap();
        buffered.save("tenant", task("t1", "c1", TaskState::Completed)).await.unwrap();
        mesh_test_support::eventually(&format!("{backend}: the commit"), COMMIT_DEADLINE, async || {
            table.get("tenant", "t1").await.unwrap().is_some()
        })
        .await;
    }
}

/// A SQLite store's write-ahead log is checkpointed by the writer's commits, rarely (see
/// `SQLITE_WAL_CHECKPOINT_PAGES`) but for good: it stays near that size however much is written.
#[tokio::test]
async fn a_sqlite_stores_write_ahead_log_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tasks.db");
    let store = TaskStore::open(&format!("sqlite://{}", file.display()), "test-agent").await.unwrap();
    // Each save is a commit of its own, and writes several pages to the log (a task's 8 KiB of
    // text alone takes two): the commits write several times the checkpoint's threshold (without
    // checkpoints, 15,000 of them left 550 MB of log).
    let commits = SQLITE_WAL_CHECKPOINT_PAGES as usize / 2;
    for i in 0..commits {
        let mut task = task(&format!("t{i:06}"), "c1", TaskState::Completed);
        task.history.push(Message::text(Role::Agent, format!("t{i}-m3"), "x".repeat(8 * 1024)));
        store.save("", task).await.unwrap();
    }
    // A log frame is a page of 4 KiB and a header of 24 bytes; one commit more may pass the mark.
    let frame_bytes = 4096 + 24;
    let log_bytes = std::fs::metadata(dir.path().join("tasks.db-wal")).unwrap().len();
    let bound_bytes = u64::from(SQLITE_WAL_CHECKPOINT_PAGES + 64) * frame_bytes;
    assert!(log_bytes <= bound_bytes, "{commits} commits left {log_bytes} bytes of log, over {bound_bytes}");
    assert_eq!(store.get("", "t000000").await.unwrap().map(|t| t.status.state), Some(TaskState::Completed));
}

/// The writes a store counts by state, its writer's queue depth and its write durations: what
/// `deploy/observability`'s dashboard and alerts read.
#[test]
fn a_store_counts_its_writes_by_state_and_gauges_its_queue() {
    use mesh_tasks::model::state_name;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // Every snapshot takes the counts and samples recorded since the one before: all are kept.
    let readings = std::cell::RefCell::new(Vec::new());
    // The values the store recorded under `name` whose labels include `labels` (and its service).
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Reading {
        Count(u64),
        Gauge(f64),
        Samples(usize),
    }
    let values = |name: &str, labels: &[(&str, &str)]| -> Vec<Reading> {
        let mut readings = readings.borrow_mut();
        for (name, labels, value) in mesh_test_support::metrics::read(&snapshotter) {
            let value = match value {
                DebugValue::Counter(n) => Reading::Count(n),
                DebugValue::Gauge(g) => Reading::Gauge(g.into_inner()),
                DebugValue::Histogram(samples) => Reading::Samples(samples.len()),
            };
            readings.push((name, labels, value));
        }
        let wanted = |(k, v): &(&str, &str)| (k.to_string(), v.to_string());
        let mut labels: Vec<(String, String)> = labels.iter().map(wanted).collect();
        labels.push(("service".into(), "metered".into()));
        readings
            .iter()
            .filter(|(n, l, _)| n == name && labels.iter().all(|label| l.contains(label)))
            .map(|(_, _, value)| *value)
            .collect()
    };
    let count = |name: &str, labels: &[(&str, &str)]| -> u64 {
        values(name, labels).iter().map(|v| if let Reading::Count(n) = v { *n } else { 0 }).sum()
    };
    metrics::with_local_recorder(&recorder, || {
        // One thread: the writer cannot take from the queue until the test awaits something.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let store = TaskStore::open_buffered(&url, "metered", FLUSH_INTERVAL_NEVER).await.unwrap();
            let saves = [("t1", TaskState::Working), ("t1", TaskState::Completed), ("t2", TaskState::Completed)];
            for (depth, (id, state)) in saves.into_iter().enumerate() {
                store.save("", task(id, "c1", state)).await.unwrap();
                let queued = values("mesh_task_store_queue_depth", &[]).pop();
                assert_eq!(queued, Some(Reading::Gauge(depth as f64 + 1.0)), "after save {depth}");
            }
            assert_eq!(count("mesh_task_writes_total", &[("state", state_name(TaskState::Completed))]), 2);
            assert_eq!(count("mesh_task_writes_total", &[("state", state_name(TaskState::Working))]), 1);
            let durations: usize = values("mesh_task_store_write_duration_seconds", &[])
                .iter()
                .map(|v| if let Reading::Samples(n) = v { *n } else { 0 })
                .sum();
            assert_eq!(durations, 3, "one write duration per save");
            store.flush().await.unwrap();
        });
    });
}
