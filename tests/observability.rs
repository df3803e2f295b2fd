//! End to end: the whole suite exports its spans over OTLP/HTTP to a real receiver (a small
//! Python server decoding with the official `opentelemetry-proto` definitions,
//! `tests/otlp/receiver.py`), and one query sent with a known `traceparent` is one trace across
//! all five services, over the seed binding and over A2A JSON-RPC; a query whose caller did not
//! sample it leaves no span in any service; a streamed answer's server span lasts as long as the
//! stream; a bus record carrying a `traceparent` starts a turn in that trace, and the answer's
//! record carries the trace on; a caller's call span tells a partial answer (an event) and a
//! failure (its `error.type`); a call through the gateway is one trace with the agent's spans,
//! the gateway's span naming the A2A method, the task and its conversation.
//!
//! The receiver runs on the Python named by `MESH_OTLP_PYTHON` (`.ci/run` builds its
//! virtualenv); without it the test says why it skips, and under `CI=true` it fails.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use a2a_mesh::{RunningSuite, SuiteConfig};
use mesh_telemetry::{LogFormat, MetricsSettings, TraceSettings};
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
    /// The names of the span's events.
    events: Vec<String>,
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
    trace_of(receiver, trace_id, &QUERY_SERVICES).await
}

/// The spans of `trace_id`, once each of `services` has exported a server span in it (a server
/// span ends, and is exported, after the spans of the calls it made).
async fn trace_of(receiver: &Receiver, trace_id: &str, services: &[&str]) -> Vec<Span> {
    let deadline = Instant::now() + Duration::from_millis(WAIT_DEADLINE_MS);
    loop {
        mesh_telemetry::flush();
        let trace: Vec<Span> = spans(receiver).await.into_iter().filter(|s| s.trace_id == trace_id).collect();
        let served: BTreeSet<&str> =
            trace.iter().filter(|s| s.kind == SPAN_KIND_SERVER).filter_map(|s| s.service_name.as_deref()).collect();
        if services.iter().all(|s| served.contains(s)) {
            return trace;
        }
        assert!(Instant::now() < deadline, "trace {trace_id} never held {services:?}, only {served:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks the shape of one query's trace: the orchestrator's server span continues the
/// caller's span, the three agents' server spans descend from it, and the two planning calls
/// are children of the planning span.
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
    let planning = trace.iter().find(|s| s.name == "orchestrator.planning").expect("a planning span");
    assert_eq!(selection.parent_span_id, planning.span_id);
    assert_eq!(extraction.parent_span_id, planning.span_id);
    assert!(trace.iter().any(|s| s.name.starts_with("search.profile ")), "no search profile span");
    assert!(trace.iter().any(|s| s.name == "search.rrf_fusion"), "no fusion span");
}

/// Queries to look among for one whose two planning calls overlapped in time. Each call takes a
/// few milliseconds and starts after its own registry lookup (the discovery cache is off here),
/// so on a loaded machine one query's lookups can be far enough apart that even calls made side
/// by side do not overlap; calls made one after the other never do, in any query.
const OVERLAP_ATTEMPTS: usize = 10;

/// Whether the trace's two planning calls ran side by side: each started before the other ended.
fn planning_calls_overlap(trace: &[Span]) -> bool {
    let call = |capability: &str| trace.iter().find(|s| s.name == format!("call {capability}"));
    match (call("profile_selection"), call("entity_extraction")) {
        (Some(selection), Some(extraction)) => {
            selection.start_ns < extraction.end_ns && extraction.start_ns < selection.end_ns
        }
        _ => false,
    }
}

/// The orchestrator makes its two planning calls side by side: in one of a few queries at
/// least, they overlap in time.
async fn check_the_planning_calls_run_side_by_side(receiver: &Receiver, http: &reqwest::Client, suite: &RunningSuite) {
    let mut seen = Vec::new();
    for attempt in 0..OVERLAP_ATTEMPTS {
        let trace_id = uuid::Uuid::new_v4().simple().to_string();
        let parent = &uuid::Uuid::new_v4().simple().to_string()[..16];
        let request_id = format!("observability-overlap-{attempt}");
        ask_orchestrator(http, suite, "jazz piano", format!("00-{trace_id}-{parent}-01"), &request_id).await;
        let spans = trace(receiver, &trace_id).await;
        if planning_calls_overlap(&spans) {
            return;
        }
        let timing = |name: &str| spans.iter().find(|s| s.name == name).map(|s| (s.start_ns, s.end_ns));
        seen.push((timing("call profile_selection"), timing("call entity_extraction")));
    }
    panic!("the planning calls never overlapped in {OVERLAP_ATTEMPTS} queries (start, end ns): {seen:?}");
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
    common::start_healthy(config, None).await
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
        Some(MetricsSettings { metrics_endpoint: Some(format!("{}/v1/metrics", receiver.url)) }),
    );
    assert!(mesh_telemetry::tracing_enabled());
    let data = tempfile::tempdir().unwrap();
    let bus = SuiteConfig::ephemeral(data.path()).ui_agent.bus;
    let suite = start_suite(&data).await;
    let http = reqwest::Client::new();

    // The seed binding.
    let (trace_id, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let request_id = "observability-seed-1";
    let traceparent = format!("00-{trace_id}-{parent}-01");
    let answer = ask_orchestrator(&http, &suite, "show me robots playing soccer", traceparent, request_id).await;
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
    let response = traced_post(&http, format!("{}/", suite.urls.orchestrator), format!("00-{trace_id}-{parent}-01"))
        .header("A2A-Version", "1.0")
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

    check_an_unsampled_query_leaves_no_span(&receiver, &http, &suite).await;
    check_a_stream_span_lasts_as_long_as_the_stream(&receiver, &http, &suite).await;
    check_a_bus_turn_continues_the_record_trace(&receiver, &bus).await;
    check_the_metrics_pushed_over_otlp(&receiver).await;
    check_what_a_call_span_tells_of_its_outcome(&receiver).await;
    // Last: its queries would change the counts checked above.
    check_the_planning_calls_run_side_by_side(&receiver, &http, &suite).await;
    check_a_call_through_the_gateway_is_one_trace(&receiver, &http, &suite).await;
    suite.stop().await.unwrap();
}

/// The same series as `/metrics`, pushed over OTLP: the orchestrator's request histogram counts
/// the two seed queries sent above (its data points are cumulative: the latest export holds
/// them all), and the in-flight gauge is there.
async fn check_the_metrics_pushed_over_otlp(receiver: &Receiver) {
    mesh_telemetry::flush();
    let points: Vec<Value> = reqwest::get(format!("{}/points", receiver.url)).await.unwrap().json().await.unwrap();
    let orchestrator = |name: &str| {
        points
            .iter()
            .filter(|p| p["name"] == name && p["service_name"] == "orchestrator")
            .cloned()
            .collect::<Vec<Value>>()
    };
    let seed_requests = orchestrator("http_server_request_duration_seconds")
        .into_iter()
        .filter(|p| p["kind"] == "histogram" && p["attributes"]["route"] == "/tasks/send")
        .filter(|p| p["attributes"]["status"] == "200" && p["attributes"]["method"] == "POST")
        .filter_map(|p| p["count"].as_u64())
        .max();
    assert_eq!(seed_requests, Some(2), "the orchestrator's seed requests, pushed: {points:?}");
    let in_flight = orchestrator("http_server_active_requests");
    assert!(in_flight.iter().any(|p| p["kind"] == "gauge"), "the in-flight gauge, pushed: {in_flight:?}");
}

/// Routes polled by the registry meanwhile (health checks, card fetches): other traces.
const POLLED_ROUTES: [&str; 6] =
    ["/health", "/health/live", "/health/ready", "/metrics", "/.well-known/agent-card.json", "/agent.json"];

/// Server spans of the agents a query goes through, on any route but the polled ones.
fn task_server_spans(spans: &[Span]) -> usize {
    spans
        .iter()
        .filter(|s| s.kind == SPAN_KIND_SERVER && s.service_name.as_deref().is_some_and(|n| n != "registry"))
        .filter(|s| s.attributes.get("http.route").and_then(Value::as_str).is_some_and(|r| !POLLED_ROUTES.contains(&r)))
        .count()
}

/// Head sampling honours the caller's decision: a query sent with the sampled flag off is not
/// recorded by the orchestrator, and its calls carry the flag on, so no agent records it either
/// (an agent that lost the context would start a sampled trace of its own).
async fn check_an_unsampled_query_leaves_no_span(receiver: &Receiver, http: &reqwest::Client, suite: &RunningSuite) {
    mesh_telemetry::flush();
    let before = task_server_spans(&spans(receiver).await);
    let trace_id = "5e1f0c2b7a9d4e3f8a6b1c0d2e4f6a8b";
    let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-00");
    let answer = ask_orchestrator(http, suite, "jazz piano", traceparent, "observability-unsampled-1").await;
    assert_eq!(find_trace_id(&answer), None, "an unsampled query names no trace: {answer}");
    mesh_telemetry::flush();
    let after = spans(receiver).await;
    assert!(after.iter().all(|s| s.trace_id != trace_id), "spans of the unsampled trace were exported");
    assert_eq!(task_server_spans(&after), before, "an agent recorded a call of the unsampled query");
}

/// A seed query to the orchestrator, carrying `traceparent` and `request_id`: its answer.
async fn ask_orchestrator(
    http: &reqwest::Client,
    suite: &RunningSuite,
    text: &str,
    traceparent: String,
    request_id: &str,
) -> Value {
    let task = json!({"id": request_id, "messages": [{"role": "user", "parts": [{"type": "text", "text": text}]}]});
    let response = traced_post(http, format!("{}/tasks/send", suite.urls.orchestrator), traceparent)
        .header("x-request-id", request_id)
        .json(&task)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// A POST carrying the W3C `traceparent` given.
fn traced_post(http: &reqwest::Client, url: String, traceparent: String) -> reqwest::RequestBuilder {
    http.post(url).header("traceparent", traceparent)
}

/// `SendStreamingMessage` to the orchestrator: its server span ends with the stream, hence after
/// the search agent answered the turn's call (the answer's headers went out before that call).
async fn check_a_stream_span_lasts_as_long_as_the_stream(
    receiver: &Receiver,
    http: &reqwest::Client,
    suite: &RunningSuite,
) {
    let (trace_id, parent) = ("7c3d9e1f2a4b6c8d0e1f3a5b7c9d1e2f", "a1b2c3d4e5f60718");
    let rpc = json!({"jsonrpc": "2.0", "id": 9, "method": "SendStreamingMessage", "params": {"message": {
        "messageId": "m-stream", "role": "ROLE_USER", "parts": [{"text": "cooking pasta"}]
    }}});
    let mut response = traced_post(http, format!("{}/", suite.urls.orchestrator), format!("00-{trace_id}-{parent}-01"))
        .header("A2A-Version", "1.0")
        .json(&rpc)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = String::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(body.contains("TASK_STATE_COMPLETED"), "the stream ends with the completed task: {body}");
    let spans = trace(receiver, trace_id).await;
    let server = spans
        .iter()
        .find(|s| s.kind == SPAN_KIND_SERVER && s.parent_span_id == parent)
        .unwrap_or_else(|| panic!("no orchestrator server span: {spans:#?}"));
    assert_eq!(server.attributes.get("a2a.method"), Some(&json!("SendStreamingMessage")));
    let search = spans
        .iter()
        .find(|s| s.kind == SPAN_KIND_SERVER && s.service_name.as_deref() == Some("search"))
        .unwrap_or_else(|| panic!("no search server span: {spans:#?}"));
    assert!(
        server.end_ns >= search.end_ns,
        "the stream's server span ended {} ms before the search call it streams the answer of",
        (search.end_ns - server.end_ns) as f64 / 1e6
    );
}

/// A call through the gateway to the orchestrator, on both bindings (a stream on HTTP+JSON): the
/// gateway's server span continues the caller's and names the A2A method, the task its answer
/// created and the task's conversation; the orchestrator's server span is its child, in the same
/// trace, and names the same task.
async fn check_a_call_through_the_gateway_is_one_trace(
    receiver: &Receiver,
    http: &reqwest::Client,
    suite: &RunningSuite,
) {
    let gateway = &suite.urls.gateway;
    let message =
        json!({"messageId": "m-gateway-trace", "role": "ROLE_USER", "parts": [{"text": "robots playing soccer"}]});
    let calls = [
        (
            "SendMessage",
            format!("{gateway}/agents/orchestrator/"),
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}),
        ),
        ("SendStreamingMessage", format!("{gateway}/agents/orchestrator/message:stream"), json!({"message": message})),
    ];
    for (method, url, body) in calls {
        let trace_id = uuid::Uuid::new_v4().simple().to_string();
        let parent = &uuid::Uuid::new_v4().simple().to_string()[..16];
        let response = traced_post(http, url, format!("00-{trace_id}-{parent}-01"))
            .header("A2A-Version", "1.0")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{method}");
        let answer = response.text().await.unwrap();
        let spans = trace_of(receiver, &trace_id, &["gateway", "orchestrator"]).await;
        // Server spans of the call: the gateway's, and the orchestrator's for the A2A method (the
        // gateway's reading of the orchestrator's card is in the trace too).
        let server = |service: &str| {
            spans
                .iter()
                .find(|s| {
                    s.kind == SPAN_KIND_SERVER
                        && s.service_name.as_deref() == Some(service)
                        && s.attributes.get("a2a.method") == Some(&json!(method))
                })
                .unwrap_or_else(|| panic!("{method}: no {service} server span of the call: {spans:#?}"))
        };
        let (front, agent) = (server("gateway"), server("orchestrator"));
        assert_eq!(front.parent_span_id, parent, "{method}: the gateway continues the caller's span");
        assert_eq!(agent.parent_span_id, front.span_id, "{method}: the orchestrator's span is the gateway's child");
        let task = front.attributes.get("a2a.task_id").and_then(Value::as_str);
        let task = task.unwrap_or_else(|| panic!("{method}: the gateway's span names no task: {front:#?}"));
        let context = front.attributes.get("a2a.context_id").and_then(Value::as_str);
        let context = context.unwrap_or_else(|| panic!("{method}: the gateway's span names no context: {front:#?}"));
        assert!(answer.contains(task) && answer.contains(context), "{method}: {task} and {context} not in {answer}");
        assert_eq!(agent.attributes.get("a2a.task_id"), Some(&json!(task)), "{method}: {agent:#?}");
    }
}

/// A record produced on an agent's topic with a `traceparent` header: the agent's turn is a
/// server span in that trace, named after the conversation, and its answer's record carries the
/// trace on.
async fn check_a_bus_turn_continues_the_record_trace(receiver: &Receiver, bus: &mesh_bus::BusConfig) {
    let (trace_id, parent) = ("2d4f6a8c0e1b3d5f7a9c1e3b5d7f9a1c", "0f1e2d3c4b5a6978");
    let (log, docmem) = mesh_bus::open_bus(bus).await.unwrap();
    let topic = mesh_bus::agent_topic(&mesh_bus::agent_id("profile_selection", &bus.instance_id));
    let root = docmem.create_root("", &mesh_bus::conversation_root_context(&topic), "").await.unwrap();
    let sender = "tester-1";
    let node = docmem.append_child(&root.id, &mesh_docmem::Context::agent_text(sender), "jazz piano").await.unwrap();
    let mut record = mesh_bus::BusRecord::message(sender, &root.id, &node.id, mesh_bus::ACTION_CREATE);
    record.headers.insert("traceparent".into(), format!("00-{trace_id}-{parent}-01"));
    log.produce(&topic, &record).await.unwrap();

    let deadline = Instant::now() + Duration::from_millis(WAIT_DEADLINE_MS);
    let turn = loop {
        mesh_telemetry::flush();
        let turn = spans(receiver).await.into_iter().find(|s| s.trace_id == trace_id && s.name == "bus.turn");
        if let Some(turn) = turn {
            break turn;
        }
        assert!(Instant::now() < deadline, "no bus turn span in trace {trace_id}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((turn.kind, turn.parent_span_id.as_str()), (SPAN_KIND_SERVER, parent), "{turn:#?}");
    assert_eq!(turn.service_name.as_deref(), Some("profile_selection"), "{turn:#?}");
    assert_eq!(turn.attributes.get("a2a.context_id"), Some(&json!(root.id)), "{turn:#?}");

    let mut replay = log.replay(&topic).await.unwrap();
    let mut answer = None;
    while let Some(batch) = replay.next_batch().await.unwrap() {
        answer = answer.or(batch.into_iter().find(|d| d.record.correlation_id.as_deref() == Some(&node.id)));
    }
    let answer = answer.expect("the answer's record");
    let traceparent = answer.record.headers.get("traceparent").map(String::as_str).unwrap_or_default();
    assert!(traceparent.starts_with(&format!("00-{trace_id}-")), "the answer's record: {:?}", answer.record);
}

/// A transport standing for the registry and three agents, each named after how it answers a
/// seed task: `partial` with a `PARTIAL` answer, `refusing` with a 400 error body, `hanging`
/// not before the call's timeout. The registry lists the agent named as the capability asked for.
#[derive(Debug, Clone, Copy)]
struct ThreeCallees;

fn json_response(status: u16, body: &Value) -> http::Response<bytes::Bytes> {
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(bytes::Bytes::from(body.to_string()))
        .unwrap()
}

impl mesh_client::Transport for ThreeCallees {
    fn send(
        &self,
        request: http::Request<bytes::Bytes>,
        timeout: Duration,
    ) -> mesh_client::BoxFuture<'static, Result<http::Response<bytes::Bytes>, mesh_client::TransportError>> {
        Box::pin(async move {
            let (host, path) = (request.uri().host().unwrap_or_default().to_owned(), request.uri().path().to_owned());
            if host == "registry" {
                // Call reports and failure reports are taken; anything else is a capability's lookup.
                if path == "/api/events/calls" || path.ends_with("/failures") {
                    return Ok(json_response(202, &json!({"accepted": 1})));
                }
                let name = path.trim_start_matches("/capabilities/");
                let agent = json!({"name": name, "url": format!("http://{name}"), "health_status": "healthy",
                                   "process_endpoint": format!("http://{name}/tasks/send"),
                                   "agent_card_url": format!("http://{name}/.well-known/agent-card.json")});
                return Ok(json_response(200, &json!({"status": "success", "capability": name, "agents": [agent]})));
            }
            match host.as_str() {
                "partial" => Ok(json_response(
                    200,
                    &json!({"id": "t", "status": "PARTIAL", "warnings": ["one source timed out"],
                            "messages": [{"role": "agent", "parts": [{"type": "text", "text": "half"}]}],
                            "metadata": {"agent": host, "processing_time_ms": 1.0}}),
                )),
                "refusing" => Ok(json_response(
                    400,
                    &json!({"status": "ERROR", "error_code": "TASK_INVALID", "error_message": "not a task I take"}),
                )),
                _ => {
                    tokio::time::sleep(timeout).await;
                    Err(mesh_client::TransportError::Timeout {
                        timeout_ms: u64::try_from(timeout.as_millis()).unwrap(),
                    })
                }
            }
        })
    }
}

/// What a caller's `call` span tells of the call's outcome (each call a trace of its own): a
/// `PARTIAL` answer is an event on it, a failure its `error.type` (`error` for what the callee
/// refused, `timeout` for an answer that did not come in time); a full answer neither.
async fn check_what_a_call_span_tells_of_its_outcome(receiver: &Receiver) {
    let caller_name = format!("span-caller-{}", uuid::Uuid::new_v4().simple());
    let http = mesh_client::HttpClient::new(std::sync::Arc::new(ThreeCallees));
    let registry = mesh_client::RegistryClient::new("http://registry", http.clone()).unwrap();
    let discovery = mesh_client::Discovery::new(registry.clone(), http.clone(), Duration::from_secs(60));
    let caller = mesh_client::MeshCaller::new(
        http,
        registry,
        std::sync::Arc::new(discovery),
        mesh_client::CallerSettings { attempts_max: 1, ..mesh_client::CallerSettings::default() },
    );
    let scope = mesh_client::CallScope::received(&caller_name, mesh_protocol::call::CallContext::default());
    let task = mesh_protocol::seed::TaskRequest::from_text(None, "work", None);
    for (capability, answered) in [("partial", true), ("refusing", false), ("hanging", false)] {
        let outcome = caller.call(&scope, &mesh_client::Target::capability(capability), &task, Some(200)).await;
        assert_eq!(outcome.is_ok(), answered, "{capability}: {outcome:?}");
    }
    let deadline = Instant::now() + Duration::from_millis(WAIT_DEADLINE_MS);
    let calls = loop {
        mesh_telemetry::flush();
        let calls: Vec<Span> = spans(receiver)
            .await
            .into_iter()
            .filter(|s| s.attributes.get("mesh.caller") == Some(&json!(caller_name)) && s.name.starts_with("call "))
            .collect();
        if calls.len() == 3 {
            break calls;
        }
        assert!(Instant::now() < deadline, "three call spans of {caller_name}, not {calls:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let span = |capability: &str| {
        calls.iter().find(|s| s.name == format!("call {capability}")).unwrap_or_else(|| panic!("{calls:?}"))
    };
    assert_eq!(span("partial").events, ["partial_answer"], "{calls:?}");
    assert_eq!(span("partial").attributes.get("error.type"), None, "{calls:?}");
    assert_eq!(span("refusing").attributes.get("error.type"), Some(&json!("error")), "{calls:?}");
    assert_eq!(span("hanging").attributes.get("error.type"), Some(&json!("timeout")), "{calls:?}");
    for failed in ["refusing", "hanging"] {
        assert!(span(failed).events.iter().all(|e| e != "partial_answer"), "{calls:?}");
    }
}
