//! Replicas sharing one task table: a finished task is never overwritten by a late save of
//! another state (SQLite and PostgreSQL), and on PostgreSQL only the running tasks of replicas
//! whose lease expired are failed, and task events travel between replicas.

mod common;

use std::time::Duration;

use mesh_protocol::a2a::v1::{Message, Role, StreamResponse, Task, TaskState, TaskStatus, TaskStatusUpdateEvent};
use mesh_tasks::model::now_timestamp;
use mesh_tasks::{Lease, Remote, TaskStore};

const DEADLINE: Duration = Duration::from_secs(10);

fn task(id: &str, state: TaskState) -> Task {
    Task {
        id: id.into(),
        context_id: "c1".into(),
        status: TaskStatus { state, message: None, timestamp: Some(now_timestamp()) },
        artifacts: Vec::new(),
        history: vec![Message::text(Role::User, format!("{id}-m1"), "hi")],
        metadata: None,
    }
}

#[tokio::test]
async fn a_finished_task_is_never_overwritten_by_a_later_save_of_another_state() {
    for (backend, store, _dir) in common::stores("replicas-guard").await {
        store.save("", task("t1", TaskState::Working)).await.unwrap();
        store.save("", task("t1", TaskState::Canceled)).await.unwrap();
        // A turn elsewhere ends after the cancellation, its status stamped later.
        store.save("", task("t1", TaskState::Completed)).await.unwrap();
        store.save("", task("t1", TaskState::Working)).await.unwrap();
        let stored = store.get("", "t1").await.unwrap().unwrap();
        assert_eq!(stored.status.state, TaskState::Canceled, "{backend}");
    }
}

/// Two stores of one agent over the test PostgreSQL: two replicas.
async fn replicas(prefix: &str) -> Option<(TaskStore, TaskStore)> {
    let url = mesh_test_support::postgres_url()?;
    let agent = format!("{prefix}-{}", uuid::Uuid::new_v4());
    Some((TaskStore::open(&url, &agent).await.unwrap(), TaskStore::open(&url, &agent).await.unwrap()))
}

#[tokio::test]
async fn only_the_running_tasks_of_replicas_without_a_live_lease_are_failed() {
    let Some((live, starting)) = replicas("replicas-lease").await else { return };
    let lease = Lease { ttl: Duration::from_secs(30), renew_interval: Duration::from_secs(5) };
    let renewing = live.start_lease(lease, Some("restart")).await.unwrap().expect("a lease job on PostgreSQL");
    live.save("", task("runs-on-a-live-replica", TaskState::Working)).await.unwrap();
    // A replica that died: it wrote a running task and holds no lease.
    let url = mesh_test_support::postgres_url().unwrap();
    let dead = TaskStore::open(&url, live.agent()).await.unwrap();
    dead.save("", task("orphaned", TaskState::Working)).await.unwrap();
    // Subscribers following the orphaned task elsewhere, and on the sweeping replica itself.
    let mut elsewhere = live.listen().unwrap();
    let mut sweeper = starting.listen().unwrap();
    for heard in [&mut elsewhere, &mut sweeper] {
        assert_eq!(tokio::time::timeout(DEADLINE, heard.recv()).await.unwrap(), Some(Remote::Resync));
    }
    let job = starting.start_lease(lease, Some("its replica died")).await.unwrap().unwrap();
    let state = |id: &'static str| {
        let starting = starting.clone();
        async move { starting.get("", id).await.unwrap().unwrap().status.state }
    };
    assert_eq!(state("runs-on-a-live-replica").await, TaskState::Working, "a live replica's task is left running");
    assert_eq!(state("orphaned").await, TaskState::Failed, "a dead replica's task is failed");
    // ... and every replica hears so, the one that swept included.
    for heard in [&mut elsewhere, &mut sweeper] {
        match tokio::time::timeout(DEADLINE, heard.recv()).await.unwrap() {
            Some(Remote::Event { id, event, .. }) => {
                let StreamResponse::StatusUpdate(update) = *event else { panic!("a status update: {event:?}") };
                assert_eq!((id.as_str(), update.status.state), ("orphaned", TaskState::Failed));
                let message = update.status.message.expect("the failure says why");
                assert_eq!(message.parts.first().and_then(|part| part.as_text()), Some("its replica died"));
            }
            other => panic!("the failure, not {other:?}"),
        }
    }
    renewing.abort();
    job.abort();
}

#[tokio::test]
async fn events_published_by_one_replica_are_heard_by_the_other_whole_and_in_order() {
    let Some((a, b)) = replicas("replicas-fanout").await else { return };
    assert!(a.shares_events() && b.shares_events());
    let mut heard = b.listen().unwrap();
    let mut own = a.listen().unwrap();
    let first = tokio::time::timeout(DEADLINE, heard.recv()).await.unwrap();
    assert_eq!(first, Some(Remote::Resync), "listening starts with reading what is followed again");
    assert_eq!(tokio::time::timeout(DEADLINE, own.recv()).await.unwrap(), Some(Remote::Resync));
    let status = |state, text: String| {
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t1".into(),
            context_id: "c1".into(),
            status: TaskStatus {
                state,
                message: Some(Message::text(Role::Agent, "m", text)),
                timestamp: Some(now_timestamp()),
            },
            metadata: None,
        })
    };
    // Larger than one notification, then small ones: all arrive, in order.
    let events = [
        status(TaskState::Working, "x".repeat(50_000)),
        status(TaskState::Working, "step".into()),
        status(TaskState::Completed, "done".into()),
    ];
    for event in &events {
        a.publish("tenant", "t1", event).await;
    }
    for event in events {
        let got = tokio::time::timeout(DEADLINE, heard.recv()).await.unwrap().unwrap();
        assert_eq!(got, Remote::Event { tenant: "tenant".into(), id: "t1".into(), event: Box::new(event) });
    }
    // A replica does not hear itself: the first event `a` hears is the one `b` sent after.
    let marker = status(TaskState::Canceled, "from b".into());
    b.publish("tenant", "t2", &marker).await;
    let got = tokio::time::timeout(DEADLINE, own.recv()).await.unwrap().unwrap();
    assert_eq!(got, Remote::Event { tenant: "tenant".into(), id: "t2".into(), event: Box::new(marker) });
}

#[tokio::test]
async fn a_listener_whose_connection_drops_reconnects_and_asks_for_a_re_read() {
    let Some((a, b)) = replicas("replicas-reconnect").await else { return };
    let mut heard = b.listen().unwrap();
    assert_eq!(tokio::time::timeout(DEADLINE, heard.recv()).await.unwrap(), Some(Remote::Resync));
    // The server ends the listening session, as a restart or a network cut would.
    let url = mesh_test_support::postgres_url().unwrap();
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    let ended = sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE $1 AND pid <> pg_backend_pid()",
    )
    // The channel keeps the start of the agent's name (PostgreSQL cuts names to 63 bytes).
    .bind(format!("LISTEN %{}%", &b.agent()[..40]))
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(ended.len(), 1, "one listening session");
    assert_eq!(tokio::time::timeout(DEADLINE, heard.recv()).await.unwrap(), Some(Remote::Resync));
    // Listening again: events are heard.
    let canceled = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: "t1".into(),
        context_id: "c1".into(),
        status: TaskStatus { state: TaskState::Canceled, message: None, timestamp: Some(now_timestamp()) },
        metadata: None,
    });
    a.publish("", "t1", &canceled).await;
    let got = tokio::time::timeout(DEADLINE, heard.recv()).await.unwrap().unwrap();
    assert_eq!(got, Remote::Event { tenant: String::new(), id: "t1".into(), event: Box::new(canceled) });
}
