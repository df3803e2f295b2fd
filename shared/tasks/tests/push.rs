//! Push notification configs and their outbox on SQLite, PostgreSQL (when
//! `MESH_TEST_POSTGRES_URL` is set) and in memory: configs are bounded per task and keyed by
//! tenant, notifications take their config's next sequence number and are handed out one at a
//! time per config, in order, and leave with their task when retention deletes it. Tenants share
//! the outbox fairly: each holds at most its share of it and of the deliveries in flight, claims
//! go round robin across tenants, and the notifications refused or given up are recorded on
//! their config for the task's owner.

mod common;

use std::time::Duration;

use mesh_protocol::a2a::v1::{
    StreamResponse, Task, TaskPushNotificationConfig, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use mesh_tasks::model::now_timestamp;
use mesh_tasks::{
    PUSH_CONFIGS_PER_TASK_MAX, PendingPush, PushLimits, PushOutcome, TaskError, TaskStore, Undelivered, UndeliveredPush,
};

/// Long enough that no claim expires during a test.
const CLAIM: Duration = Duration::from_secs(60);
/// A tenant's share of the deliveries in flight that no test reaches, unless it means to.
const PER_TENANT: usize = 100;

fn config(id: Option<&str>, url: &str) -> TaskPushNotificationConfig {
    TaskPushNotificationConfig {
        tenant: None,
        id: id.map(str::to_owned),
        task_id: None,
        url: url.to_owned(),
        token: Some("secret".into()),
        authentication: None,
    }
}

fn task(id: &str, state: TaskState) -> Task {
    Task {
        id: id.into(),
        context_id: "c".into(),
        status: TaskStatus { state, message: None, timestamp: Some(now_timestamp()) },
        artifacts: Vec::new(),
        history: Vec::new(),
        metadata: None,
    }
}

fn update(task_id: &str, state: TaskState) -> StreamResponse {
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task_id.into(),
        context_id: "c".into(),
        status: TaskStatus { state, message: None, timestamp: Some(now_timestamp()) },
        metadata: None,
    })
}

/// Claims what is due and describes it as `(config id, sequence)`.
async fn claim(store: &TaskStore) -> Vec<PendingPush> {
    let mut claimed = store.claim_push(100, PER_TENANT, CLAIM).await.unwrap();
    claimed.sort_by(|a, b| (a.config_id(), a.sequence).cmp(&(b.config_id(), b.sequence)));
    claimed
}

fn described(claimed: &[PendingPush]) -> Vec<(String, i64)> {
    claimed.iter().map(|push| (push.config_id().to_owned(), push.sequence)).collect()
}

#[tokio::test]
async fn configs_are_stored_per_tenant_task_bounded_and_deleted_idempotently() {
    for (backend, store, _dir) in common::stores("push-configs").await {
        // No id: the task's own, as the official SDK names it; the same id replaces.
        let stored = store.put_push_config("a", "t1", &config(None, "http://one.test/")).await.unwrap();
        assert_eq!((stored.id.as_deref(), stored.task_id.as_deref()), (Some("t1"), Some("t1")), "{backend}");
        store.put_push_config("a", "t1", &config(None, "http://two.test/")).await.unwrap();
        store.put_push_config("a", "t1", &config(Some("extra"), "http://three.test/")).await.unwrap();
        let urls: Vec<String> = store.push_configs("a", "t1").await.unwrap().into_iter().map(|c| c.url).collect();
        assert_eq!(urls, ["http://three.test/", "http://two.test/"], "{backend}: ordered by id");
        assert!(store.push_configs("b", "t1").await.unwrap().is_empty(), "{backend}: tenants stay apart");

        for n in 2..PUSH_CONFIGS_PER_TASK_MAX {
            store.put_push_config("a", "t1", &config(Some(&format!("c{n}")), "http://x.test/")).await.unwrap();
        }
        let refused = store.put_push_config("a", "t1", &config(Some("one-too-many"), "http://x.test/")).await;
        assert!(
            matches!(&refused, Err(TaskError::InvalidParams(why)) if why.contains(&PUSH_CONFIGS_PER_TASK_MAX.to_string())),
            "{backend}: {refused:?}"
        );
        // Replacing an existing one is no new config.
        store.put_push_config("a", "t1", &config(Some("extra"), "http://four.test/")).await.unwrap();

        store.delete_push_config("a", "t1", "extra").await.unwrap();
        store.delete_push_config("a", "t1", "extra").await.unwrap();
        assert_eq!(store.push_configs("a", "t1").await.unwrap().len(), PUSH_CONFIGS_PER_TASK_MAX - 1, "{backend}");
        assert!(store.has_push_configs("a", "t1").await.unwrap());
        assert!(!store.has_push_configs("a", "t2").await.unwrap());
    }
}

/// A refused config was inserted, counted and found one too many inside its transaction: the
/// transaction must end before the next write, or that write finds SQLite locked.
#[tokio::test]
async fn a_refused_config_leaves_the_store_writable_at_once() {
    for (backend, store, _dir) in common::stores("push-refused").await {
        for n in 0..PUSH_CONFIGS_PER_TASK_MAX {
            store.put_push_config("a", "t1", &config(Some(&format!("c{n}")), "http://x.test/")).await.unwrap();
        }
        for round in 0..100 {
            let refused = store.put_push_config("a", "t1", &config(Some("one-too-many"), "http://x.test/")).await;
            assert!(matches!(refused, Err(TaskError::InvalidParams(_))), "{backend}, round {round}: {refused:?}");
            let other = store.put_push_config("a", &format!("t{round}-other"), &config(None, "http://y.test/")).await;
            assert!(other.is_ok(), "{backend}, round {round}: {other:?}");
        }
        assert_eq!(store.push_configs("a", "t1").await.unwrap().len(), PUSH_CONFIGS_PER_TASK_MAX, "{backend}");
    }
}

#[tokio::test]
async fn notifications_take_sequence_numbers_and_go_out_one_at_a_time_in_order() {
    for (backend, store, _dir) in common::stores("push-outbox").await {
        assert_eq!(store.enqueue_push("", "none", &[update("none", TaskState::Working)]).await.unwrap(), 0);
        store.put_push_config("", "t", &config(Some("x"), "http://x.test/")).await.unwrap();
        store.put_push_config("", "t", &config(Some("y"), "http://y.test/")).await.unwrap();
        let events = [update("t", TaskState::Working), update("t", TaskState::Completed)];
        assert_eq!(store.enqueue_push("", "t", &events).await.unwrap(), 4, "{backend}");

        // The head of each config only, and not again while claimed.
        let first = claim(&store).await;
        assert_eq!(described(&first), [("x".into(), 1), ("y".into(), 1)], "{backend}");
        assert_eq!(first[0].event, events[0]);
        assert_eq!(first[0].config.url, "http://x.test/");
        assert!(claim(&store).await.is_empty(), "{backend}: claimed ones wait for their outcome");

        // x's first is delivered: its second comes. y's fails: due again after its delay only.
        store.settle_push(&first[0], PushOutcome::Done).await.unwrap();
        store.settle_push(&first[1], PushOutcome::RetryIn(Duration::from_millis(300))).await.unwrap();
        let second = claim(&store).await;
        assert_eq!(described(&second), [("x".into(), 2)], "{backend}");
        assert_eq!(second[0].event, events[1]);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let retried = claim(&store).await;
        assert_eq!(described(&retried), [("y".into(), 1)], "{backend}");
        assert_eq!(retried[0].attempts, 1, "{backend}: one attempt made before");

        // Deleting a config takes its pending notifications with it.
        store.delete_push_config("", "t", "y").await.unwrap();
        store.settle_push(&second[0], PushOutcome::Done).await.unwrap();
        assert!(claim(&store).await.is_empty(), "{backend}");
        // A config keeps counting: the next notification is its third.
        store.enqueue_push("", "t", &[update("t", TaskState::Completed)]).await.unwrap();
        assert_eq!(described(&claim(&store).await), [("x".into(), 3)], "{backend}");
    }
}

#[tokio::test]
async fn an_expired_claim_is_handed_out_again() {
    for (backend, store, _dir) in common::stores("push-claims").await {
        store.put_push_config("", "t", &config(None, "http://x.test/")).await.unwrap();
        store.enqueue_push("", "t", &[update("t", TaskState::Working)]).await.unwrap();
        let claimed = store.claim_push(10, PER_TENANT, Duration::from_millis(100)).await.unwrap();
        assert_eq!(claimed.len(), 1, "{backend}");
        assert!(store.claim_push(10, PER_TENANT, CLAIM).await.unwrap().is_empty(), "{backend}");
        // The claimer died without a word: after its claim, another process delivers it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let again = store.claim_push(10, PER_TENANT, CLAIM).await.unwrap();
        assert_eq!(described(&again), [("t".into(), 1)], "{backend}");
    }
}

#[tokio::test]
async fn retention_deletes_a_finished_tasks_configs_and_notifications() {
    for (backend, store, _dir) in common::stores("push-retention").await {
        for (id, state) in [("done", TaskState::Completed), ("running", TaskState::Working)] {
            store.save("", task(id, state)).await.unwrap();
            store.put_push_config("", id, &config(None, "http://x.test/")).await.unwrap();
            store.enqueue_push("", id, &[update(id, state)]).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(store.purge_finished(Duration::ZERO).await.unwrap(), 1, "{backend}");
        assert!(store.push_configs("", "done").await.unwrap().is_empty(), "{backend}");
        assert_eq!(store.push_configs("", "running").await.unwrap().len(), 1, "{backend}");
        let left = claim(&store).await;
        assert_eq!(left.iter().map(|p| p.task_id.as_str()).collect::<Vec<_>>(), ["running"], "{backend}");
    }
}

#[tokio::test]
async fn a_task_failed_after_a_crash_tells_its_webhooks() {
    for (backend, store, _dir) in common::sql_stores("push-interrupted").await {
        store.save("", task("left", TaskState::Working)).await.unwrap();
        store.put_push_config("", "left", &config(None, "http://x.test/")).await.unwrap();
        // No process holds a lease on these rows: the task is taken for a crashed process's.
        assert_eq!(store.fail_interrupted("the agent stopped", Duration::from_secs(30)).await.unwrap(), 1, "{backend}");
        let claimed = claim(&store).await;
        assert_eq!(described(&claimed), [("left".into(), 1)], "{backend}");
        let StreamResponse::StatusUpdate(update) = &claimed[0].event else { panic!("{backend}: {claimed:?}") };
        assert_eq!(update.status.state, TaskState::Failed, "{backend}");
    }
}

#[tokio::test]
async fn replicas_sharing_a_store_never_claim_the_same_notification() {
    const TASKS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let mut urls = vec![format!("sqlite://{}", dir.path().join("tasks.db").display())];
    urls.extend(mesh_test_support::postgres_url());
    for url in urls {
        let agent = format!("push-replicas-{}", uuid::Uuid::new_v4());
        let (one, two) = (TaskStore::open(&url, &agent).await.unwrap(), TaskStore::open(&url, &agent).await.unwrap());
        for n in 0..TASKS {
            let id = format!("t{n}");
            one.put_push_config("", &id, &config(None, "http://x.test/")).await.unwrap();
            one.enqueue_push("", &id, &[update(&id, TaskState::Completed)]).await.unwrap();
        }
        // Both claim at once, a few at a time, until nothing is left.
        let drain = |store: TaskStore| async move {
            let mut claimed = Vec::new();
            loop {
                let batch = store.claim_push(3, PER_TENANT, CLAIM).await.unwrap();
                if batch.is_empty() {
                    return claimed;
                }
                claimed.extend(batch.into_iter().map(|push| push.task_id));
            }
        };
        let (mut first, second) = tokio::join!(drain(one), drain(two));
        first.extend(second);
        first.sort();
        let mut expected: Vec<String> = (0..TASKS).map(|n| format!("t{n}")).collect();
        expected.sort();
        assert_eq!(first, expected, "{url}: each notification claimed exactly once");
    }
}

/// `(tenant, task, sequence)` of each claimed notification, in the order claimed.
fn turns(claimed: &[PendingPush]) -> Vec<(String, String, i64)> {
    claimed.iter().map(|push| (push.tenant.clone(), push.task_id.clone(), push.sequence)).collect()
}

#[tokio::test]
async fn claims_go_round_robin_across_tenants_each_within_its_share_of_deliveries() {
    for (backend, store, _dir) in common::stores("push-fair").await {
        // Tenant a has three tasks with due notifications, b one, c two; a's are the oldest.
        let tasks = [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1"), ("c", "c2")];
        for (tenant, id) in tasks {
            store.put_push_config(tenant, id, &config(None, "http://x.test/")).await.unwrap();
            store.enqueue_push(tenant, id, &[update(id, TaskState::Working)]).await.unwrap();
            // Distinct due times: the order within a tenant is the order they were queued.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let first = store.claim_push(4, 2, CLAIM).await.unwrap();
        let expected = [("a", "a1"), ("b", "b1"), ("c", "c1"), ("a", "a2")].map(|(t, id)| (t.into(), id.into(), 1));
        assert_eq!(turns(&first), expected, "{backend}: every tenant's first turn, then the second ones");
        // a has its 2 in delivery, c 1: only c's second is handed out now.
        let second = store.claim_push(10, 2, CLAIM).await.unwrap();
        assert_eq!(turns(&second), [("c".into(), "c2".into(), 1)], "{backend}");
        // One of a's ends: its third goes.
        store.settle_push(&first[0], PushOutcome::Done).await.unwrap();
        let third = store.claim_push(10, 2, CLAIM).await.unwrap();
        assert_eq!(turns(&third), [("a".into(), "a3".into(), 1)], "{backend}");
    }
}

#[tokio::test]
async fn a_tenant_past_its_share_of_the_outbox_is_refused_and_the_refusals_recorded() {
    for (backend, store, _dir) in common::stores("push-share").await {
        let store = store.with_push_limits(PushLimits { outbox_rows_max: 5, outbox_tenant_rows_max: 3 });
        store.put_push_config("a", "t", &config(Some("x"), "http://x.test/")).await.unwrap();
        store.put_push_config("a", "t", &config(Some("y"), "http://y.test/")).await.unwrap();
        let working = [update("t", TaskState::Working)];
        assert_eq!(store.enqueue_push("a", "t", &working).await.unwrap(), 2, "{backend}");
        assert_eq!(store.enqueue_push("a", "t", &working).await.unwrap(), 2, "{backend}: 2 waited, under 3");
        // 4 wait now: a's share is full. Refused, the sequence numbers taken.
        let refused = [update("t", TaskState::Working), update("t", TaskState::Completed)];
        assert_eq!(store.enqueue_push("a", "t", &refused).await.unwrap(), 0, "{backend}");
        let records = store.undelivered_push("a", "t").await.unwrap();
        assert_eq!(records.len(), 2, "{backend}: {records:?}");
        for (record, id) in records.iter().zip(["x", "y"]) {
            assert_eq!((record.config_id.as_str(), record.count, record.sequence), (id, 2, 4), "{backend}");
            assert_eq!(record.reason, "tenant_outbox_full", "{backend}");
            assert!(record.message.contains("\"a\" has 4 push notifications"), "{backend}: {}", record.message);
        }
        // Another tenant still has room, until the whole outbox (5) is full.
        store.put_push_config("b", "u", &config(None, "http://z.test/")).await.unwrap();
        assert_eq!(store.enqueue_push("b", "u", &working).await.unwrap(), 1, "{backend}");
        assert_eq!(store.enqueue_push("b", "u", &working).await.unwrap(), 0, "{backend}");
        assert_eq!(store.undelivered_push("b", "u").await.unwrap()[0].reason, "outbox_full", "{backend}");
        // Delivered, a's notifications make room again; the next one's number tells the gap.
        for _ in 0..2 {
            for push in claim(&store).await.into_iter().filter(|push| push.tenant == "a") {
                store.settle_push(&push, PushOutcome::Done).await.unwrap();
            }
        }
        assert_eq!(store.enqueue_push("a", "t", &working).await.unwrap(), 2, "{backend}");
        let next: Vec<i64> = claim(&store).await.iter().filter(|p| p.tenant == "a").map(|p| p.sequence).collect();
        assert_eq!(next, [5, 5], "{backend}: 3 and 4 were refused");
        assert!(store.undelivered_push("c", "t").await.unwrap().is_empty(), "{backend}");
    }
}

#[tokio::test]
async fn a_notification_given_up_leaves_the_outbox_and_is_recorded_on_its_config() {
    for (backend, store, _dir) in common::stores("push-given-up").await {
        store.put_push_config("", "t", &config(Some("x"), "http://x.test/")).await.unwrap();
        store
            .enqueue_push("", "t", &[update("t", TaskState::Working), update("t", TaskState::Completed)])
            .await
            .unwrap();
        let given_up =
            |message: &str| PushOutcome::Undelivered { reason: Undelivered::CircuitOpen, message: message.to_owned() };
        let first = claim(&store).await;
        store.settle_push(&first[0], given_up("first")).await.unwrap();
        let second = claim(&store).await;
        assert_eq!(described(&second), [("x".into(), 2)], "{backend}: the next one goes");
        store.settle_push(&second[0], given_up("second")).await.unwrap();
        assert!(claim(&store).await.is_empty(), "{backend}");
        let records = store.undelivered_push("", "t").await.unwrap();
        let expected = UndeliveredPush {
            config_id: "x".into(),
            count: 2,
            reason: "circuit_open".into(),
            message: "second".into(),
            sequence: 2,
            at: records.first().map(|r| r.at.clone()).unwrap_or_default(),
        };
        assert_eq!(records, [expected], "{backend}");
        assert!(!records[0].at.is_empty(), "{backend}");
    }
}

/// What operators read of notifications that never reach their webhook:
/// `mesh_push_notifications_refused_total`, by tenant and reason, for those refused when queued
/// (counted by notification) and those given up after a claim.
#[test]
fn refused_and_given_up_notifications_are_counted_by_tenant_and_reason() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        // One thread, so that everything the store records goes to this thread's recorder.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let store = TaskStore::in_memory("counted", mesh_tasks::MEMORY_TASKS_MAX_DEFAULT)
                .with_push_limits(PushLimits { outbox_rows_max: 5, outbox_tenant_rows_max: 1 });
            store.put_push_config("a", "t", &config(Some("x"), "http://x.test/")).await.unwrap();
            store.put_push_config("a", "t", &config(Some("y"), "http://y.test/")).await.unwrap();
            assert_eq!(store.enqueue_push("a", "t", &[update("t", TaskState::Working)]).await.unwrap(), 2);
            // Three events for each of the two webhooks: six notifications refused.
            let refused =
                [TaskState::Working, TaskState::Working, TaskState::Completed].map(|state| update("t", state));
            assert_eq!(store.enqueue_push("a", "t", &refused).await.unwrap(), 0);
            let claimed = claim(&store).await;
            let given_up = PushOutcome::Undelivered { reason: Undelivered::CircuitOpen, message: "open".into() };
            store.settle_push(&claimed[0], given_up).await.unwrap();
        });
    });
    let mut counts: Vec<_> = mesh_test_support::metrics::read(&snapshotter)
        .into_iter()
        .filter(|(name, _, _)| name == "mesh_push_notifications_refused_total")
        .map(|(_, labels, value)| match value {
            DebugValue::Counter(count) => (labels, count),
            other => panic!("a counter, not {other:?}"),
        })
        .collect();
    counts.sort();
    let labels = |reason: &str| -> Vec<(String, String)> {
        [("reason", reason), ("service", "counted"), ("tenant", "a")].map(|(k, v)| (k.into(), v.into())).to_vec()
    };
    assert_eq!(counts, [(labels("circuit_open"), 1), (labels("tenant_outbox_full"), 6)]);
}
