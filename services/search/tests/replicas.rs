//! Search replicas serving one corpus: each keeps its own index, built from the document log they
//! share (a SQLite file here, PostgreSQL in the `_on_postgres` variants), on real servers on port 0.
//!
//! Convergence is awaited through `/health`'s `document_log` component (`applied_sequence` reaching
//! the sequence a write was logged at), with a deadline, never with a sleep. BM25 only: no model.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use mesh_agent_kit::testing::{CALL_TIMEOUT, JSON, RunningAgent, local_agent_config};
use mesh_client::reply_data;
use mesh_protocol::agents::SearchResults;
use mesh_protocol::seed::TaskRequest;
use search::config::DenseConfig;
use search::{IndexLocation, SearchConfig, SearchIndex, index_directory};
use serde_json::{Value, json};

/// The sync interval of the replicas under test.
const SYNC_INTERVAL_MS: u64 = 200;
/// How long a replica may take to show another's write: the interval plus generous apply time
/// on a loaded 2-core machine.
const CONVERGENCE_DEADLINE_MS: u64 = SYNC_INTERVAL_MS + 5_000;

/// A replica named `name` keeping its index in `data`, on the log at `log_url`.
fn config(name: &str, log_url: &str, data: &std::path::Path) -> SearchConfig {
    SearchConfig {
        // A group of the test's own: tests sharing one PostgreSQL database keep to their own log.
        agent: mesh_agent_kit::AgentConfig {
            name: Some(name.to_owned()),
            replica_group: Some(name.to_owned()),
            ..local_agent_config()
        },
        data_dir: Some(data.to_owned()),
        dense: DenseConfig { enabled: false, ..DenseConfig::default() },
        documents_database_url: Some(log_url.to_owned()),
        documents_sync_interval_ms: SYNC_INTERVAL_MS,
        ..SearchConfig::default()
    }
}

async fn start(config: &SearchConfig) -> RunningAgent {
    RunningAgent::start(|http| search::build(config, http)).await
}

async fn call(agent: &RunningAgent, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
    let body = if body.is_null() { String::new() } else { body.to_string() };
    let response = agent.http().send(agent.request(method, path, JSON, body), CALL_TIMEOUT).await.unwrap();
    let answer = serde_json::from_slice(response.body()).unwrap_or(Value::Null);
    (response.status(), answer)
}

async fn health(agent: &RunningAgent) -> Value {
    call(agent, Method::GET, "/health", Value::Null).await.1
}

/// The `document_log` component of the replica's health.
async fn log_status(agent: &RunningAgent) -> Value {
    let health = health(agent).await;
    health["components"]["document_log"].clone()
}

/// Waits until the replica has applied the log up to `sequence`; returns how long that took.
async fn converged(agent: &RunningAgent, sequence: u64) -> Duration {
    let started = Instant::now();
    let deadline = started + Duration::from_millis(CONVERGENCE_DEADLINE_MS);
    loop {
        let status = log_status(agent).await;
        if status["applied_sequence"].as_u64().is_some_and(|applied| applied >= sequence) {
            return started.elapsed();
        }
        assert!(Instant::now() < deadline, "not at sequence {sequence} within {CONVERGENCE_DEADLINE_MS} ms: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Documents in the replica's index.
async fn documents(agent: &RunningAgent) -> u64 {
    health(agent).await["components"]["index"]["documents"].as_u64().unwrap()
}

/// The ids BM25 ranks for `query`.
async fn bm25_ids(agent: &RunningAgent, query: &str) -> Vec<String> {
    let data = json!({"profiles": ["bm25"], "top_k": 10});
    let response = agent.send(&TaskRequest::from_text(None, query, Some(data))).await;
    let results: SearchResults = reply_data(agent.url(), &response).unwrap();
    results.results.into_iter().map(|hit| hit.id).collect()
}

/// Ingests one document through `agent`; returns the log sequence of the write.
async fn ingest(agent: &RunningAgent, id: &str, text: &str) -> u64 {
    let batch = json!({"documents": [{"_id": id, "title": id, "text": text}]});
    let (status, answer) = call(agent, Method::POST, "/documents", batch).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer["sequence"].as_u64().unwrap_or_else(|| panic!("no sequence in {answer}"))
}

/// The replicas' story on the log at `log_url`, under the agent name `name`.
async fn replicas_serve_one_corpus(log_url: &str, name: &str) {
    let (data_a, data_b, data_c) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (config_a, config_b, config_c) = (
        config(name, log_url, data_a.path()),
        config(name, log_url, data_b.path()),
        config(name, log_url, data_c.path()),
    );

    // Two replicas starting at once on an empty log: the bundled sample goes in once.
    let (a, b) = tokio::join!(start(&config_a), start(&config_b));
    let sample = search::read_corpus(None).unwrap().len() as u64;
    for replica in [&a, &b] {
        let status = log_status(replica).await;
        assert_eq!(status["status"], "ok", "{status}");
        assert_eq!(status["log_sequence"].as_u64(), Some(sample), "seeded once, not once per replica: {status}");
        assert_eq!(documents(replica).await, sample);
    }

    // Ingested through A: found on A at once, on B within the bound.
    let written = ingest(&a, "okapi-1", "an okapi crosses the savanna at dawn").await;
    assert_eq!(written, sample + 1);
    assert_eq!(bm25_ids(&a, "okapi savanna").await, ["okapi-1"], "read-your-writes on the replica that ingested");
    let took = converged(&b, written).await;
    eprintln!("replica B applied A's write within {} ms (sync interval {SYNC_INTERVAL_MS} ms)", took.as_millis());
    assert_eq!(bm25_ids(&b, "okapi savanna").await, ["okapi-1"]);
    let (status, stored) = call(&b, Method::GET, "/documents/okapi-1", Value::Null).await;
    assert_eq!((status, stored["text"].as_str()), (StatusCode::OK, Some("an okapi crosses the savanna at dawn")));

    // Deleted through B: gone on A within the bound.
    let (status, answer) = call(&b, Method::DELETE, "/documents/okapi-1", Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let deleted = answer["sequence"].as_u64().unwrap();
    assert!(deleted > written, "{answer}");
    converged(&a, deleted).await;
    assert!(bm25_ids(&a, "okapi savanna").await.is_empty());
    let (status, _) = call(&a, Method::GET, "/documents/okapi-1", Value::Null).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, answer) = call(&a, Method::DELETE, "/documents/okapi-1", Value::Null).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "deleted already, on every replica: {answer}");

    // A replica started after all this builds the same index from the log.
    let tenant_write = {
        let batch = json!({"documents": [{"_id": "zebra-9", "title": "Zebra", "text": "a zebra grazing"}]});
        let (status, answer) = call(&a, Method::POST, "/documents?tenant=acme", batch).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        answer["sequence"].as_u64().unwrap()
    };
    let c = start(&config_c).await;
    assert!(log_status(&c).await["applied_sequence"].as_u64().unwrap() >= tenant_write, "built before it serves");
    converged(&b, tenant_write).await;
    for query in ["robots playing soccer", "volcano", "music concert"] {
        let on_a = bm25_ids(&a, query).await;
        assert_eq!(bm25_ids(&b, query).await, on_a, "{query}");
        assert_eq!(bm25_ids(&c, query).await, on_a, "{query}");
    }
    let total = sample + 1;
    for replica in [&a, &b, &c] {
        assert_eq!(documents(replica).await, total, "the sample and acme's zebra, not the deleted okapi");
    }

    // C stops; writes go on through A; C comes back on its own index, resumes from the position
    // it persisted and applies only what it missed, duplicating nothing.
    let applied_at_stop = log_status(&c).await["applied_sequence"].as_u64().unwrap();
    drop(c);
    let persisted = wait_for_index(data_c.path()).await;
    assert_eq!(persisted, applied_at_stop, "the position is persisted with the index");
    let missed = ingest(&a, "okapi-2", "a second okapi, while replica C was away").await;
    ingest(&a, "okapi-2", "a second okapi, replaced while replica C was away").await;
    let c = start(&config_c).await;
    converged(&c, missed + 1).await;
    assert_eq!(documents(&c).await, total + 1);
    assert_eq!(bm25_ids(&c, "okapi").await, ["okapi-2"], "one copy of each document");
    let (_, stored) = call(&c, Method::GET, "/documents/okapi-2", Value::Null).await;
    assert_eq!(stored["text"], "a second okapi, replaced while replica C was away");
}

/// Opens the index a stopped replica left in `data` (once the replica has let go of it) and
/// returns the log position it holds.
async fn wait_for_index(data: &std::path::Path) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match SearchIndex::open(&IndexLocation::Directory(index_directory(data)), None, 1) {
            Ok(index) => return index.applied_sequence(),
            Err(error) => {
                assert!(Instant::now() < deadline, "the stopped replica still holds its index: {error}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// A name no other test (or earlier run on the same PostgreSQL) uses: the log is per name.
fn unique_name() -> String {
    format!("search-replicas-{}", uuid::Uuid::new_v4().simple())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_a_shared_sqlite_file_serve_one_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("documents.db").display());
    replicas_serve_one_corpus(&url, &unique_name()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_postgres_serve_one_corpus() {
    let Some(url) = mesh_test_support::postgres_url() else { return };
    replicas_serve_one_corpus(&url, &unique_name()).await;
}

/// A replica down while a deletion was made and its tombstone compacted away (retention 0) drops
/// the document when it comes back, by comparing its index with what the log holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_missed_a_compacted_deletion_drops_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("documents.db").display());
    let name = unique_name();
    let (data_a, data_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config_a = SearchConfig { documents_tombstone_retention_ms: 0, ..config(&name, &url, data_a.path()) };
    let config_b = config(&name, &url, data_b.path());
    let a = start(&config_a).await;
    let b = start(&config_b).await;
    let written = ingest(&a, "okapi-1", "an okapi crosses the savanna").await;
    converged(&b, written).await;
    drop(b);
    wait_for_index(data_b.path()).await;
    let (status, answer) = call(&a, Method::DELETE, "/documents/okapi-1", Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let deleted = answer["sequence"].as_u64().unwrap();
    // A compacts at every interval with a retention of 0: the tombstone goes.
    let deadline = Instant::now() + Duration::from_millis(CONVERGENCE_DEADLINE_MS);
    while log_status(&a).await["tombstones_through"].as_u64() < Some(deleted) {
        assert!(Instant::now() < deadline, "the tombstone was not compacted: {}", log_status(&a).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = start(&config_b).await;
    let (status, _) = call(&b, Method::GET, "/documents/okapi-1", Value::Null).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the deletion reached B without its tombstone");
    assert_eq!(documents(&b).await, documents(&a).await);
}

/// A replica process, SIGKILLed when dropped (a failing test leaves none behind).
struct ReplicaProcess(Child);

impl ReplicaProcess {
    fn kill(&mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for ReplicaProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A replica process on `port`, its index in `data`, on the log at `url`.
fn replica_process(name: &str, url: &str, data: &std::path::Path, port: u16) -> ReplicaProcess {
    let child = Command::new(env!("CARGO_BIN_EXE_search"))
        .args(["--port", &port.to_string(), "--data-dir", &data.display().to_string()])
        .env("MESH_SEARCH_NAME", name)
        .env("MESH_SEARCH_REPLICA_GROUP", name)
        .env("MESH_SEARCH_DOCUMENTS_DATABASE_URL", url)
        .env("MESH_SEARCH_DOCUMENTS_SYNC_INTERVAL_MS", "50")
        .env("MESH_SEARCH_DENSE__ENABLED", "false")
        .env("MESH_SEARCH_TASK_STORE_URL", "sqlite::memory:")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    ReplicaProcess(child)
}

/// The process's `document_log` health, once it answers.
async fn process_log_status(port: u16) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(response) = reqwest::get(format!("http://127.0.0.1:{port}/health")).await {
            let health: Value = response.json().await.unwrap();
            return health["components"]["document_log"].clone();
        }
        assert!(Instant::now() < deadline, "the replica process did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the process on `port` has applied the log up to `sequence`.
async fn process_converged(port: u16, sequence: u64) {
    let deadline = Instant::now() + Duration::from_millis(CONVERGENCE_DEADLINE_MS * 4);
    while process_log_status(port).await["applied_sequence"].as_u64() < Some(sequence) {
        assert!(Instant::now() < deadline, "not at {sequence}: {}", process_log_status(port).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A replica process SIGKILLed while it applies a stream of writes comes back on its own index,
/// resumes from the position committed with it, and ends with every document exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_while_applying_resumes_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("documents.db").display());
    let name = unique_name();
    let (data_a, data_p) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(&config(&name, &url, data_a.path())).await;
    let port = mesh_test_support::free_port();
    let mut process = replica_process(&name, &url, data_p.path(), port);
    process_log_status(port).await;
    let mut last = 0;
    for batch in 0..10 {
        let documents: Vec<Value> = (0..200)
            .map(|i| json!({"_id": format!("bulk-{batch}-{i}"), "text": format!("bulk document tag{batch}x{i}")}))
            .collect();
        let (status, answer) = call(&a, Method::POST, "/documents", json!({"documents": documents})).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        last = answer["sequence"].as_u64().unwrap();
        if batch == 4 {
            process.kill();
        }
    }
    let persisted = wait_for_index(data_p.path()).await;
    assert!(persisted <= last, "{persisted} > {last}");
    let port = mesh_test_support::free_port();
    let mut process = replica_process(&name, &url, data_p.path(), port);
    process_converged(port, last).await;
    let health: Value = reqwest::get(format!("http://127.0.0.1:{port}/health")).await.unwrap().json().await.unwrap();
    assert_eq!(health["components"]["index"]["documents"].as_u64(), Some(documents(&a).await), "{health}");
    process.kill();
    let index = SearchIndex::open(&IndexLocation::Directory(index_directory(data_p.path())), None, 1).unwrap();
    assert_eq!(index.applied_sequence(), last);
    let (hits, _) = index.rank_timed("bm25", "tag7x3", None, 10, None).unwrap();
    assert_eq!(hits.len(), 1, "every document once in the index: {hits:?}");
    assert_eq!(index.document(None, "bulk-7-3").unwrap().text, "bulk document tag7x3");
}

/// A replica whose document log cannot be read refuses writes with 503 (nothing was logged, so
/// nothing was acknowledged), keeps answering searches from its index, and says so in `/health`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_log_a_replica_refuses_writes_and_reports_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("documents.db");
    let url = format!("sqlite://{}", file.display());
    let data = tempfile::tempdir().unwrap();
    let a = start(&config(&unique_name(), &url, data.path())).await;
    ingest(&a, "okapi-1", "an okapi crosses the savanna").await;
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("DROP TABLE search_document_log_heads").execute(&pool).await.unwrap();
    let batch = json!({"documents": [{"_id": "okapi-2", "text": "another okapi"}]});
    let error = a
        .expect_error(
            a.request(Method::POST, "/documents", JSON, batch.to_string()),
            StatusCode::SERVICE_UNAVAILABLE,
            "DEPENDENCY_UNAVAILABLE",
        )
        .await;
    assert!(error.error_message.contains("document log"), "{error:?}");
    a.expect_error(
        a.request(Method::DELETE, "/documents/okapi-1", JSON, ""),
        StatusCode::SERVICE_UNAVAILABLE,
        "DEPENDENCY_UNAVAILABLE",
    )
    .await;
    assert_eq!(bm25_ids(&a, "okapi").await, ["okapi-1"], "searches go on");
    let health = health(&a).await;
    assert_eq!(
        (health["status"].as_str(), health["components"]["document_log"]["status"].as_str()),
        (Some("degraded"), Some("degraded")),
        "{health}"
    );
}
