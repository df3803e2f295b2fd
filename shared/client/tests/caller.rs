//! The mesh caller and the circuit breakers over a scripted transport: which instance is called,
//! how often, with which headers, and what the caller answers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use mesh_client::{
    BoxFuture, CallError, CallReportSettings, CallReporter, CallScope, CallerSettings, CircuitSettings, CircuitWord,
    Circuits, Discovery, HttpClient, MeshCaller, Passage, RegistryClient, Target, Transport, TransportError,
};
use mesh_graph::LinkCache;
use mesh_protocol::call::{CALL_CHAIN_HEADER, CALL_DEADLINE_MS_HEADER, CallContext};
use mesh_protocol::graph::{CallReports, GraphMode, GraphPolicy, Link, LinkDirection, LinkRelationship, LinkSource};
use mesh_protocol::seed::TaskRequest;
use serde_json::json;

const REGISTRY: &str = "http://registry";

/// How a scripted instance answers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Behaviour {
    Answer,
    Refuse,
    Fail503,
    Hang,
}

/// One request to an agent: the agent, and its call-chain and deadline headers.
type Logged = (String, Option<String>, Option<String>);

/// A transport answering the registry's discovery and each agent by a script, and logging requests.
#[derive(Debug, Default)]
struct Scripted {
    agents: Mutex<Vec<(&'static str, Behaviour)>>,
    log: Mutex<Vec<Logged>>,
    /// Paths of the failure reports the registry got.
    reports: Mutex<Vec<String>>,
    /// Call reports the registry got.
    calls: Mutex<Vec<mesh_protocol::graph::CallReport>>,
}

impl Scripted {
    fn new(agents: &[(&'static str, Behaviour)]) -> Arc<Self> {
        Arc::new(Self { agents: Mutex::new(agents.to_vec()), ..Self::default() })
    }

    fn set(&self, agent: &str, behaviour: Behaviour) {
        for entry in self.agents.lock().unwrap().iter_mut().filter(|(name, _)| *name == agent) {
            entry.1 = behaviour;
        }
    }

    /// The agents called, in order.
    fn called(&self) -> Vec<String> {
        self.log.lock().unwrap().iter().map(|(agent, ..)| agent.clone()).collect()
    }
}

fn json_response(status: StatusCode, body: serde_json::Value) -> Response<Bytes> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Bytes::from(body.to_string()))
        .unwrap()
}

/// The transport handle on a shared script.
#[derive(Debug, Clone)]
struct Script(Arc<Scripted>);

impl Transport for Script {
    fn send(
        &self,
        request: Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Response<Bytes>, TransportError>> {
        let script = self.0.clone();
        Box::pin(async move {
            let uri = request.uri().clone();
            let host = uri.host().unwrap_or_default().to_owned();
            if host == "registry" {
                let agents: Vec<_> = script
                    .agents
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|(name, _)| {
                        json!({"name": name, "url": format!("http://{name}"), "health_status": "healthy",
                               "process_endpoint": format!("http://{name}/tasks/send"),
                               "agent_card_url": format!("http://{name}/.well-known/agent-card.json")})
                    })
                    .collect();
                if uri.path() == "/api/events/calls" {
                    let reports: CallReports = serde_json::from_slice(request.body()).unwrap();
                    let accepted = reports.calls.len();
                    script.calls.lock().unwrap().extend(reports.calls);
                    return Ok(json_response(StatusCode::ACCEPTED, json!({"accepted": accepted})));
                }
                if uri.path().ends_with("/failures") {
                    script.reports.lock().unwrap().push(format!("{}?{}", uri.path(), uri.query().unwrap_or_default()));
                    return Ok(json_response(StatusCode::OK, json!({"status": "success", "message": "checked"})));
                }
                if let Some(name) = uri.path().strip_prefix("/agents/") {
                    let record = agents.iter().find(|a| a["name"] == name).cloned();
                    return Ok(match record {
                        Some(mut record) => {
                            record["capabilities"] = json!(["work"]);
                            record["health_endpoint"] = json!("/health");
                            record["registered_at"] = json!("2026-01-01T00:00:00Z");
                            record["updated_at"] = json!("2026-01-01T00:00:00Z");
                            json_response(StatusCode::OK, record)
                        }
                        None => json_response(
                            StatusCode::NOT_FOUND,
                            json!({"status": "ERROR", "error_code": "AGENT_NOT_FOUND", "error_message": name}),
                        ),
                    });
                }
                return Ok(json_response(
                    StatusCode::OK,
                    json!({"status": "success", "capability": "work", "agents": agents}),
                ));
            }
            let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
            script.log.lock().unwrap().push((host.clone(), header(CALL_CHAIN_HEADER), header(CALL_DEADLINE_MS_HEADER)));
            let behaviour = script.agents.lock().unwrap().iter().find(|(n, _)| *n == host).map(|(_, b)| *b);
            match behaviour {
                Some(Behaviour::Answer) => Ok(json_response(
                    StatusCode::OK,
                    json!({"id": "t", "status": "SUCCESS", "messages": [{"role": "agent", "parts": [{"type": "data", "data": {"by": host}}]}],
                           "metadata": {"agent": host, "processing_time_ms": 1.0}}),
                )),
                Some(Behaviour::Fail503) => Ok(json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({"status": "ERROR", "error_code": "DEPENDENCY_UNAVAILABLE", "error_message": "down"}),
                )),
                Some(Behaviour::Hang) => {
                    tokio::time::sleep(timeout).await;
                    Err(TransportError::Timeout { timeout_ms: u64::try_from(timeout.as_millis()).unwrap() })
                }
                Some(Behaviour::Refuse) | None => Err(TransportError::Connect("connection refused".into())),
            }
        })
    }
}

fn caller(script: &Arc<Scripted>, settings: CallerSettings) -> MeshCaller {
    let http = HttpClient::new(Arc::new(Script(script.clone())));
    let registry = RegistryClient::new(REGISTRY, http.clone()).unwrap();
    let discovery = Discovery::new(registry.clone(), http.clone(), Duration::from_secs(60));
    MeshCaller::new(http, registry, Arc::new(discovery), settings)
}

fn settings() -> CallerSettings {
    CallerSettings { jitter_seed: Some(7), ..CallerSettings::default() }
}

fn task() -> TaskRequest {
    TaskRequest::from_text(None, "hello", None)
}

fn scope(chain: &[&str], deadline_ms: Option<u64>) -> CallScope {
    let context = CallContext {
        chain: chain.iter().map(|s| (*s).to_owned()).collect(),
        depth: u32::try_from(chain.len()).unwrap(),
        deadline_ms,
        ..CallContext::default()
    };
    CallScope::received("me", context)
}

#[tokio::test(start_paused = true)]
async fn a_failing_replica_is_retried_on_the_next_one_with_the_context_in_headers() {
    let script = Scripted::new(&[("w1", Behaviour::Refuse), ("w2", Behaviour::Answer)]);
    let caller = caller(&script, settings());
    let answered =
        caller.call(&scope(&["origin"], Some(5_000)), &Target::capability("work"), &task(), None).await.unwrap();
    assert_eq!(answered.agent.name, "w2");
    assert_eq!(answered.attempts, 2);
    assert_eq!(script.called(), ["w1", "w2"]);
    let log = script.log.lock().unwrap().clone();
    assert_eq!(log[1].1.as_deref(), Some("origin,me"), "the caller joins the chain");
    let deadline: u64 = log[1].2.as_deref().unwrap().parse().unwrap();
    assert!(deadline <= 5_000, "never more than the caller has left: {deadline}");
}

#[tokio::test(start_paused = true)]
async fn refusals_are_not_retried_and_keep_their_code() {
    let script = Scripted::new(&[("w1", Behaviour::Answer)]);
    let caller = caller(&script, settings());
    // The target is already in the chain: refused before anything is sent.
    let error = caller.call(&scope(&["w1"], None), &Target::Agent("w1".into()), &task(), None).await.unwrap_err();
    assert_eq!(error.error_code(), "CALL_CYCLE_DETECTED");
    assert!(error.to_string().contains("w1 -> me -> w1"), "{error}");
    // At the depth limit: refused before sending too.
    let deep = scope(&["a", "b", "c", "d"], None);
    let error = caller.call(&deep, &Target::Agent("w1".into()), &task(), None).await.unwrap_err();
    assert_eq!(error.error_code(), "CALL_DEPTH_EXCEEDED");
    assert!(script.called().is_empty(), "{:?}", script.called());
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_answers_busy_at_once() {
    let script = Scripted::new(&[("w1", Behaviour::Hang)]);
    let caller = Arc::new(caller(&script, CallerSettings { outbound_calls_max: 1, ..settings() }));
    let first = {
        let caller = caller.clone();
        tokio::spawn(
            async move { caller.call(&scope(&[], None), &Target::Agent("w1".into()), &task(), Some(1_000)).await },
        )
    };
    tokio::task::yield_now().await;
    while script.called().is_empty() {
        tokio::task::yield_now().await;
    }
    let started = tokio::time::Instant::now();
    let busy = caller.call(&scope(&[], None), &Target::Agent("w1".into()), &task(), None).await.unwrap_err();
    assert!(matches!(busy, CallError::Busy { limit: 1 }), "{busy}");
    assert_eq!(busy.error_code(), "CALL_BUSY");
    assert_eq!(started.elapsed(), Duration::ZERO, "no waiting for a slot");
    let timed_out = first.await.unwrap().unwrap_err();
    assert!(timed_out.is_timeout(), "{timed_out}");
    assert_eq!(timed_out.error_code(), "AGENT_TIMEOUT");
}

#[tokio::test(start_paused = true)]
async fn no_time_left_means_no_call() {
    let script = Scripted::new(&[("w1", Behaviour::Answer)]);
    let caller = caller(&script, settings());
    let error = caller.call(&scope(&[], Some(0)), &Target::Agent("w1".into()), &task(), None).await.unwrap_err();
    assert_eq!(error.error_code(), "CALL_DEADLINE_EXCEEDED");
    assert!(error.is_timeout());
    assert!(script.called().is_empty());
}

#[tokio::test(start_paused = true)]
async fn transient_failures_are_retried_with_backoff_up_to_the_attempt_limit() {
    let script = Scripted::new(&[("w1", Behaviour::Fail503)]);
    let caller = caller(&script, CallerSettings { attempts_max: 3, ..settings() });
    let started = tokio::time::Instant::now();
    let error = caller.call(&scope(&[], None), &Target::Agent("w1".into()), &task(), None).await.unwrap_err();
    assert_eq!(script.called().len(), 3);
    assert!(matches!(&error, CallError::Failed { attempts: 3, .. }), "{error}");
    assert_eq!(error.error_code(), "DEPENDENCY_UNAVAILABLE", "the callee's own code is kept");
    assert!(started.elapsed() >= Duration::from_millis(mesh_client::RETRY_DELAY_MIN_MS_DEFAULT), "backed off");
}

#[tokio::test]
async fn a_circuit_opens_after_consecutive_failures_probes_after_the_cool_down_and_closes_on_success() {
    const OPEN_MS: u64 = 50;
    let script = Scripted::new(&[("w1", Behaviour::Refuse)]);
    let http = HttpClient::new(Arc::new(Script(script.clone())));
    let circuits =
        Circuits::new(http, CircuitSettings { consecutive_failures: 3, open: Duration::from_millis(OPEN_MS) });
    let endpoint = "http://w1/tasks/send";
    let send = || async {
        let request = Request::post(endpoint).body(Bytes::new()).unwrap();
        circuits.send("w1", endpoint, request, Duration::from_secs(1)).await
    };
    for _ in 0..3 {
        assert!(matches!(send().await, Passage::Failed(_)));
    }
    assert!(circuits.is_open(endpoint));
    assert_eq!(circuits.report()[0].state, CircuitWord::Open);
    assert!(matches!(send().await, Passage::Refused), "an open circuit sends nothing");
    assert_eq!(script.called().len(), 3);
    script.set("w1", Behaviour::Answer);
    tokio::time::sleep(Duration::from_millis(OPEN_MS * 3)).await;
    assert!(matches!(send().await, Passage::Answered(_)), "the probe goes through");
    assert_eq!(circuits.report()[0].state, CircuitWord::Closed);
    assert!(!circuits.is_open(endpoint));
}

#[tokio::test(start_paused = true)]
async fn every_instance_open_fails_fast_and_the_registry_is_told() {
    let script = Scripted::new(&[("w1", Behaviour::Refuse)]);
    let settings = CallerSettings {
        attempts_max: 1,
        circuits: CircuitSettings { consecutive_failures: 2, open: Duration::from_secs(3600) },
        ..settings()
    };
    let caller = caller(&script, settings);
    for _ in 0..2 {
        let error = caller.call(&scope(&[], None), &Target::capability("work"), &task(), None).await.unwrap_err();
        assert_eq!(error.error_code(), "AGENT_UNAVAILABLE");
    }
    let error = caller.call(&scope(&[], None), &Target::capability("work"), &task(), None).await.unwrap_err();
    assert!(matches!(error, CallError::CircuitOpen { .. }), "{error}");
    assert_eq!(error.error_code(), "AGENT_CIRCUIT_OPEN");
    assert_eq!(script.called().len(), 2, "nothing sent through the open circuit");
    assert_eq!(caller.circuits()[0].state, CircuitWord::Open);
    for _ in 0..100 {
        if !script.reports.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        *script.reports.lock().unwrap(),
        ["/agents/w1/failures?url=http%3A%2F%2Fw1"],
        "reported once, when it opened"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_no_link_allows_never_leaves_and_the_calls_sent_are_reported() {
    let script = Scripted::new(&[("worker", Behaviour::Answer), ("boss", Behaviour::Answer)]);
    let links = Arc::new(LinkCache::new(GraphMode::Open, 10));
    let link = Link {
        id: "l1".into(),
        from_agent_id: "me".into(),
        to_agent_id: "worker".into(),
        direction: LinkDirection::OneWay,
        relationship: LinkRelationship::Superior,
        enabled: true,
        source: LinkSource::Config,
        created_at: "2026-11-24T00:00:00Z".into(),
        updated_at: "2026-11-24T00:00:00Z".into(),
    };
    links.load(&GraphPolicy { mode: GraphMode::Enforced, links: vec![link] }, None).unwrap();
    let (reporter, flusher) = CallReporter::new(CallReportSettings::default());
    let caller = caller(&script, CallerSettings::default()).with_links(links).with_call_reports(reporter);

    let error = caller.call(&scope(&[], None), &Target::Agent("boss".into()), &task(), None).await.unwrap_err();
    assert_eq!(error.error_code(), "LINK_DENIED");
    assert!(error.to_string().starts_with("no enabled link lets me call boss"), "{error}");
    assert!(script.called().is_empty(), "a denied call is never sent");
    // By capability, only the linked agent is a candidate.
    for _ in 0..2 {
        let answered = caller.call(&scope(&[], None), &Target::capability("work"), &task(), None).await.unwrap();
        assert_eq!(answered.agent.name, "worker");
    }
    assert_eq!(script.called(), ["worker", "worker"]);

    drop(caller);
    let http = HttpClient::new(Arc::new(Script(script.clone())));
    let counts = flusher.run(RegistryClient::new(REGISTRY, http).unwrap()).await;
    assert_eq!((counts.sent, counts.dropped_queue_full, counts.dropped_unsent), (2, 0, 0));
    let calls = script.calls.lock().unwrap();
    assert_eq!(calls.len(), 2, "the denied call is not a call made: {calls:?}");
    let report = &calls[0];
    assert_eq!((report.from.as_str(), report.to.as_str()), ("me", "worker"));
    assert_eq!(
        (report.capability.as_deref(), report.status),
        (Some("work"), mesh_protocol::graph::OutcomeStatus::Success)
    );
}
