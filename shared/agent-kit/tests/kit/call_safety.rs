//! Call admission over real sockets: the call context an agent refuses before any work (a cycle,
//! the depth limit, a malformed context), the caller's deadline cutting a call off, the context
//! reaching the handler, and the seed 003 envelope of an answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mesh_agent_kit::{AgentApp, AgentConfig, AgentError, AgentHandler, AgentReply, TaskInput};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::call::{
    CALL_CHAIN_HEADER, CALL_DEADLINE_MS_HEADER, CALL_DEPTH_HEADER, CORRELATION_ID_HEADER, PRIORITY_HEADER,
    TENANT_HEADER,
};
use mesh_protocol::error::{ErrorBody, FailureStatus};
use mesh_protocol::seed::{ConfidenceLevel, Part, ResponseStatus, TaskResponse};
use serde_json::{Value, json};
use tokio::sync::oneshot;

const NAME: &str = "guarded";
/// How long the "slow" task works: far beyond the deadlines the tests set.
const SLOW_MS: u64 = 10_000;
/// The deadline the caller gives a slow task.
const DEADLINE_MS: u64 = 200;

#[derive(Debug, Clone, Default)]
struct Recorder {
    handled: Arc<AtomicUsize>,
}

impl AgentHandler for Recorder {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        self.handled.fetch_add(1, Ordering::SeqCst);
        if task.text == "slow" {
            tokio::time::sleep(Duration::from_millis(SLOW_MS)).await;
        }
        let context = task.call.context();
        Ok(AgentReply::data(json!({
            "chain": context.chain, "depth": context.depth, "correlation_id": context.correlation_id,
            "priority": context.priority, "tenant": context.tenant, "request_id": context.request_id,
            "time_left_ms": task.call.time_left().map(|d| d.as_millis() as u64),
        })))
    }
}

struct Running {
    url: String,
    handled: Arc<AtomicUsize>,
    _stop: oneshot::Sender<()>,
}

async fn start() -> Running {
    let card: AgentCard = serde_json::from_value(json!({
        "name": NAME, "description": "d", "version": "1", "supportedInterfaces": [], "capabilities": {},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["application/json"],
        "skills": [{"id": "record", "name": "record", "description": "record", "tags": []}]
    }))
    .unwrap();
    let recorder = Recorder::default();
    let handled = recorder.handled.clone();
    let config = AgentConfig { port: 0, ..AgentConfig::default() };
    let app = AgentApp::build(&config, card, recorder, HttpClient::with_reqwest().unwrap()).await.unwrap();
    let url = app.url().to_owned();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    Running { url, handled, _stop: stop }
}

async fn post(agent: &Running, text: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let body = json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": text}]}]});
    let mut request = reqwest::Client::new().post(format!("{}/tasks/send", agent.url)).json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

async fn expect_refused(agent: &Running, headers: &[(&str, &str)], status: u16, code: &str) -> ErrorBody {
    let before = agent.handled.load(Ordering::SeqCst);
    let response = post(agent, "work", headers).await;
    assert_eq!(response.status().as_u16(), status, "{headers:?}");
    let body: ErrorBody = response.json().await.unwrap();
    assert_eq!(body.error_code, code, "{body:?}");
    assert!(body.request_id.is_some());
    assert_eq!(agent.handled.load(Ordering::SeqCst), before, "refused before any work");
    body
}

#[tokio::test]
async fn a_cycle_a_call_at_the_depth_limit_and_a_malformed_context_are_refused_before_any_work() {
    let agent = start().await;
    let cycle =
        expect_refused(&agent, &[(CALL_CHAIN_HEADER, "orchestrator,guarded,search")], 508, "CALL_CYCLE_DETECTED").await;
    assert!(cycle.error_message.contains("orchestrator -> guarded -> search -> guarded"), "{}", cycle.error_message);
    let depth = expect_refused(&agent, &[(CALL_CHAIN_HEADER, "a,b,c,d,e")], 400, "CALL_DEPTH_EXCEEDED").await;
    assert!(depth.error_message.contains("a -> b -> c -> d -> e"), "{}", depth.error_message);
    expect_refused(&agent, &[(CALL_DEPTH_HEADER, "9")], 400, "CALL_DEPTH_EXCEEDED").await;
    for header in [
        (CALL_DEPTH_HEADER, "deep"),
        (CALL_DEADLINE_MS_HEADER, "soon"),
        (PRIORITY_HEADER, "ASAP"),
        (TENANT_HEADER, "a/b"),
    ] {
        expect_refused(&agent, &[header], 400, "CALL_CONTEXT_INVALID").await;
    }
    // Four hops deep is still admitted.
    let response = post(&agent, "work", &[(CALL_CHAIN_HEADER, "a,b,c,d")]).await;
    assert_eq!(response.status().as_u16(), 200);
}

#[tokio::test]
async fn the_handler_sees_the_context_and_the_answer_carries_the_envelope() {
    let agent = start().await;
    let headers = [
        (CALL_CHAIN_HEADER, "origin"),
        (CALL_DEPTH_HEADER, "1"),
        (CALL_DEADLINE_MS_HEADER, "5000"),
        (CORRELATION_ID_HEADER, "flow-1"),
        (PRIORITY_HEADER, "HIGH"),
        (TENANT_HEADER, "acme"),
        ("x-request-id", "req-42"),
    ];
    let response = post(&agent, "work", &headers).await;
    assert_eq!(response.status().as_u16(), 200);
    let answer: TaskResponse = response.json().await.unwrap();
    assert_eq!(answer.status, ResponseStatus::Success);
    assert_eq!(answer.confidence_level, Some(ConfidenceLevel::High));
    assert_eq!(answer.request_id.as_deref(), Some("req-42"), "the request id is echoed");
    let Some(Part::Data { data }) = answer.messages[0].parts.first() else { panic!("{answer:?}") };
    assert_eq!(data["chain"], json!(["origin"]));
    assert_eq!(data["depth"], 1);
    assert_eq!(data["correlation_id"], "flow-1");
    assert_eq!(data["priority"], "HIGH");
    assert_eq!(data["tenant"], "acme");
    assert_eq!(data["request_id"], "req-42");
    let left = data["time_left_ms"].as_u64().unwrap();
    assert!(left <= 5_000 && left > 0, "{left}");
    // Without a deadline the handler has none.
    let answer: TaskResponse = post(&agent, "work", &[]).await.json().await.unwrap();
    let Some(Part::Data { data }) = answer.messages[0].parts.first() else { panic!("{answer:?}") };
    assert_eq!(data["time_left_ms"], Value::Null);
}

#[tokio::test]
async fn a_call_past_its_callers_deadline_is_cut_off_with_a_timeout_body() {
    let agent = start().await;
    let started = Instant::now();
    let deadline = DEADLINE_MS.to_string();
    let response = post(&agent, "slow", &[(CALL_DEADLINE_MS_HEADER, deadline.as_str())]).await;
    let took = started.elapsed();
    assert_eq!(response.status().as_u16(), 504);
    let body: ErrorBody = response.json().await.unwrap();
    assert_eq!((body.status, body.error_code.as_str()), (FailureStatus::Timeout, "CALL_DEADLINE_EXCEEDED"));
    assert!(took < Duration::from_millis(SLOW_MS / 2), "cut off at the deadline, not after the work: {took:?}");
    expect_refused(&agent, &[(CALL_DEADLINE_MS_HEADER, "0")], 504, "CALL_DEADLINE_EXCEEDED").await;
}
