//! End to end: the whole suite exports its spans over OTLP/HTTP to a real receiver (a small
//! Python server decoding with the official `opentelemetry-proto` definitions,
//! `tests/otlp/receiver.py`), and one query sent with a known `traceparent` is one trace across
//! all five services, over the seed binding and over A2A JSON-RPC.
//!
//! The receiver runs on the Python named by `MESH_OTLP_PYTHON` (`.ci/run` builds its
//! virtualenv); without it the test says why it skips, and under `CI=true` it fails.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use a2a_mesh::{RunningSuite, SuiteConfig};
use mesh_telemetry::{LogFormat, TraceSettings};
use serde::Deserialize;
use serde_json::{Value, json};

mod common;

use common::WAIT_DEADLINE_MS;

/// OTLP span kinds (`opentelemetry.proto.trace.v1.Span.SpanKind`).
const SPAN_KIND_SERVER: i32 = 2;
/// The five services of a query's trace.
const QUERY_SERVICES: [&str; 5] = ["registry", "orchestrator", "entity_extraction", "profile_selection", "search"];

#[derive(Debug, Clone, Deserialize)]
struct Span {
    service_name: Option<String>,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    kind: i32,
    start_ns: u64,
    end_ns: u64,
    attributes: HashMap<String, Value>,
}

/// The receiver process, killed when dropped.
struct Receiver {
    child: Child,
    url: String,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the receiver, or says why the test cannot run (a failure under `CI=true`).
fn start_receiver() -> Option<Receiver> {
    let python = mesh_test_support::env_part(
        "the OTLP receiver's Python",
        "MESH_OTLP_PYTHON",
        "a Python with tests/otlp/requirements.txt; .ci/run builds its virtualenv and sets it",
    )?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otlp/receiver.py");
    let mut child = Command::new(&python)
        .arg(script)
        .arg("0")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the OTLP receiver with {python}: {e}"));
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("the receiver's stdout")).read_line(&mut line).unwrap();
    let port = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("the receiver said {line:?}"));
    Some(Receiver { child, url: format!("http://127.0.0.1:{port}") })
}

async fn spans(receiver: &Receiver) -> Vec<Span> {
    reqwest::get(format!("{}/spans", receiver.url)).await.unwrap().json().await.unwrap()
}

/// The spans of `trace_id`, once every service of the query has exported its part of it.
async fn trace(receiver: &Receiver, trace_id: &str) -> Vec<Span> {
    let deadline = Instant::now() + Duration::from_millis(WAIT_DEADLINE_MS);
    loop {
        mesh_telemetry::flush();
        let trace: Vec<Span> = spans(receiver).await.into_iter().filter(|s| s.trace_id == trace_id).collect();
        let services: BTreeSet<&str> = trace.iter().filter_map(|s| s.service_name.as_deref()).collect();
        if QUERY_SERVICES.iter().all(|s| services.contains(s)) {
            return trace;
        }
        assert!(Instant::now() < deadline, "trace {trace_id} never held all five services: {services:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks the shape of one query's trace: the orchestrator's server span continues the
/// caller's span, the three agents' server spans descend from it, and the two planning calls
/// ran side by side.
fn check_query_trace(trace: &[Span], parent_span_id: &str, request_id: &str) {
    let by_id: HashMap<&str, &Span> = trace.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let servers = |service: &str| -> Vec<&Span> {
        trace.iter().filter(|s| s.kind == SPAN_KIND_SERVER && s.service_name.as_deref() == Some(service)).collect()
    };
    let root = servers("orchestrator");
    assert_eq!(root.len(), 1, "one orchestrator server span: {root:#?}");
    let root = root[0];
    assert_eq!(root.parent_span_id, parent_span_id, "the orchestrator continues the caller's span");
    assert_eq!(root.attributes.get("mesh.request_id"), Some(&json!(request_id)));
    assert_eq!(root.attributes.get("http.response.status_code"), Some(&json!(200)));
    for service in QUERY_SERVICES {
        assert!(trace.iter().any(|s| s.service_name.as_deref() == Some(service)), "no span of {service} in the trace");
    }
    let descends_from_root = |span: &Span| {
        let mut current = span;
        for _ in 0..64 {
            if current.span_id == root.span_id {
                return true;
            }
            match by_id.get(current.parent_span_id.as_str()) {
                Some(parent) => current = parent,
                None => return false,
            }
        }
        false
    };
    for agent in ["profile_selection", "entity_extraction", "search"] {
        let served = servers(agent);
        let task = served.iter().find(|s| s.attributes.get("http.route") == Some(&json!("/tasks/send")));
        let task = task.unwrap_or_else(|| panic!("no /tasks/send server span of {agent}: {served:#?}"));
        assert!(descends_from_root(task), "{agent}'s server span does not descend from the orchestrator's");
        assert_eq!(task.attributes.get("mesh.call_depth"), Some(&json!(1)), "{agent}");
    }
    let call = |capability: &str| {
        trace
            .iter()
            .find(|s| s.name == format!("call {capability}"))
            .unwrap_or_else(|| panic!("no call span for {capability}"))
    };
    let (selection, extraction) = (call("profile_selection"), call("entity_extraction"));
    assert!(
        selection.start_ns < extraction.end_ns && extraction.start_ns < selection.end_ns,
        "the planning calls did not overlap: {selection:?} {extraction:?}"
    );
    let planning = trace.iter().find(|s| s.name == "orchestrator.planning").expect("a planning span");
    assert_eq!(selection.parent_span_id, planning.span_id);
    assert_eq!(extraction.parent_span_id, planning.span_id);
    assert!(trace.iter().any(|s| s.name.starts_with("search.profile ")), "no search profile span");
    assert!(trace.iter().any(|s| s.name == "search.rrf_fusion"), "no fusion span");
}

/// Every span naming `request_id` belongs to `trace_id`: the query made one trace, not several.
async fn check_one_trace(receiver: &Receiver, trace_id: &str, request_id: &str) {
    let all = spans(receiver).await;
    let traces: BTreeSet<&str> = all
        .iter()
        .filter(|s| s.attributes.get("mesh.request_id") == Some(&json!(request_id)))
        .map(|s| s.trace_id.as_str())
        .collect();
    assert_eq!(traces, BTreeSet::from([trace_id]), "the spans of request {request_id} are in several traces");
}

fn find_trace_id(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) => match map.get("trace_id") {
            Some(Value::String(id)) => Some(id.clone()),
            _ => map.values().find_map(find_trace_id),
        },
        Value::Array(items) => items.iter().find_map(find_trace_id),
        _ => None,
    }
}

async fn start_suite(data: &tempfile::TempDir) -> RunningSuite {
    let mut config = SuiteConfig::ephemeral(data.path());
    // Every query asks the registry afresh, so the registry is in every query's trace.
    config.orchestrator.discovery_cache_ttl_ms = 0;
    common::start_healthy(config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_query_is_one_trace_across_all_five_services_on_both_bindings() {
    let Some(receiver) = start_receiver() else { return };
    mesh_telemetry::init_with(
        LogFormat::Text,
        Some(TraceSettings {
            traces_endpoint: Some(format!("{}/v1/traces", receiver.url)),
            ..TraceSettings::default()
        }),
    );
    assert!(mesh_telemetry::tracing_enabled());
    let data = tempfile::tempdir().unwrap();
    let suite = start_suite(&data).await;
    let http = reqwest::Client::new();

    // The seed binding.
    let (trace_id, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let request_id = "observability-seed-1";
    let task = json!({"id": "q-trace", "messages": [{"role": "user", "parts": [{"type": "text", "text": "show me robots playing soccer"}]}]});
    let response = http
        .post(format!("{}/tasks/send", suite.urls.orchestrator))
        .header("traceparent", format!("00-{trace_id}-{parent}-01"))
        .header("x-request-id", request_id)
        .json(&task)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(find_trace_id(&answer).as_deref(), Some(trace_id), "the answer names its trace: {answer}");
    let spans = trace(&receiver, trace_id).await;
    check_query_trace(&spans, parent, request_id);
    check_one_trace(&receiver, trace_id, request_id).await;

    // A2A JSON-RPC.
    let (trace_id, parent) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let request_id = "observability-jsonrpc-1";
    let rpc = json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {
        "messageId": "m-trace", "role": "ROLE_USER", "parts": [{"text": "jazz piano"}]
    }}});
    let response = http
        .post(format!("{}/", suite.urls.orchestrator))
        .header("A2A-Version", "1.0")
        .header("traceparent", format!("00-{trace_id}-{parent}-01"))
        .header("x-request-id", request_id)
        .json(&rpc)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert!(answer.get("error").is_none(), "{answer}");
    assert_eq!(find_trace_id(&answer).as_deref(), Some(trace_id), "the answer names its trace: {answer}");
    let spans = trace(&receiver, trace_id).await;
    check_query_trace(&spans, parent, request_id);
    let root = spans.iter().find(|s| s.kind == SPAN_KIND_SERVER && s.service_name.as_deref() == Some("orchestrator"));
    assert_eq!(root.and_then(|s| s.attributes.get("a2a.method")), Some(&json!("SendMessage")));
    check_one_trace(&receiver, trace_id, request_id).await;

    suite.stop().await.unwrap();
}
