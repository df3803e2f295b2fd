//! The mesh caller, the circuit breakers and discovery over a scripted transport: which instance
//! is called, how often, with which headers, what the caller answers and records, and when the
//! registry is asked.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use mesh_client::{
    BoxFuture, CallError, CallReportSettings, CallReporter, CallScope, CallerSettings, CircuitSettings, CircuitWord,
    Circuits, DISCOVERY_CACHE_ENTRIES_MAX, Discovery, DiscoveryError, HttpClient, MeshCaller, Passage, RegistryClient,
    Target, Transport, TransportError,
};
use mesh_graph::LinkCache;
use mesh_protocol::call::{CALL_CHAIN_HEADER, CALL_DEADLINE_MS_HEADER, CallContext};
use mesh_protocol::graph::{
    CallReports, GraphMode, GraphPolicy, Link, LinkDirection, LinkRelationship, LinkSource, OutcomeStatus,
};
use mesh_protocol::registry::{AGENT_CARD_PATH, AgentSummary};
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
    /// Answers `SendMessage` with a task in this state.
    Task(&'static str),
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
    /// Agents the registry lists as unhealthy (the others: healthy).
    unhealthy: Mutex<Vec<&'static str>>,
    /// The registry answers every request with 503 while set.
    registry_down: AtomicBool,
    /// Lookups (by capability or name) the registry answered or failed.
    lookups: AtomicUsize,
    /// Whether the agents' cards tag the skill `work` idempotent.
    idempotent: AtomicBool,
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
                let lookup = !uri.path().starts_with("/api/") && !uri.path().ends_with("/failures");
                script.lookups.fetch_add(usize::from(lookup), Ordering::SeqCst);
                if script.registry_down.load(Ordering::SeqCst) {
                    return Ok(json_response(
                        StatusCode::SERVICE_UNAVAILABLE,
                        json!({"status": "ERROR", "error_code": "DEPENDENCY_UNAVAILABLE", "error_message": "down"}),
                    ));
                }
                let unhealthy = script.unhealthy.lock().unwrap().clone();
                let agents: Vec<_> = script
                    .agents
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|(name, _)| {
                        let health = if unhealthy.contains(name) { "unhealthy" } else { "healthy" };
                        json!({"name": name, "url": format!("http://{name}"), "health_status": health,
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
            if uri.path() == AGENT_CARD_PATH {
                let tags = if script.idempotent.load(Ordering::SeqCst) { json!(["idempotent"]) } else { json!([]) };
                return Ok(json_response(
                    StatusCode::OK,
                    json!({"name": host, "description": "d", "version": "1", "capabilities": {},
                           "defaultInputModes": [], "defaultOutputModes": [],
                           "skills": [{"id": "work", "name": "work", "description": "d", "tags": tags}]}),
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
                Some(Behaviour::Task(state)) => Ok(json_response(
                    StatusCode::OK,
                    json!({"task": {"id": "t", "contextId": "c", "status": {"state": state}}}),
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
async fn a_timeout_is_repeated_on_another_healthy_agent_only_when_the_skill_is_idempotent() {
    let script = Scripted::new(&[("w1", Behaviour::Hang), ("w2", Behaviour::Answer)]);
    script.idempotent.store(true, Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let answered = caller(&script, settings())
        .call(&scope(&[], Some(4_000)), &Target::capability("work"), &task(), None)
        .await
        .unwrap();
    assert_eq!(answered.agent.name, "w2");
    assert_eq!(script.called(), ["w1", "w2"]);
    let deadlines: Vec<u64> = script
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|(_, _, deadline)| deadline.as_deref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(deadlines, [2_000, 2_000], "each of the two healthy agents gets half of the 4 s");
    assert_eq!(started.elapsed(), Duration::from_millis(2_000), "no pause before the second agent");
    // The instance that hung is reported: the registry checks its health at once.
    tokio::time::timeout(Duration::from_secs(1), async {
        while script.reports.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    assert_eq!(script.reports.lock().unwrap()[0], "/agents/w1/failures?url=http%3A%2F%2Fw1");

    // A skill not known to be safe to repeat: the first agent has the whole deadline, alone.
    script.idempotent.store(false, Ordering::SeqCst);
    script.log.lock().unwrap().clear();
    let started = tokio::time::Instant::now();
    let error = caller(&script, settings())
        .call(&scope(&[], Some(4_000)), &Target::capability("work"), &task(), None)
        .await
        .unwrap_err();
    assert!(error.is_timeout(), "{error}");
    assert_eq!(script.called(), ["w1"]);
    assert_eq!(started.elapsed(), Duration::from_millis(4_000));

    // By name there is no other agent to repeat it on.
    script.idempotent.store(true, Ordering::SeqCst);
    script.log.lock().unwrap().clear();
    let error = caller(&script, settings())
        .call(&scope(&[], Some(1_000)), &Target::Agent("w1".into()), &task(), None)
        .await
        .unwrap_err();
    assert!(error.is_timeout(), "{error}");
    assert_eq!(script.called(), ["w1"]);
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
    let described = format!("{circuits:?}");
    assert!(described.contains("consecutive_failures: 3") && described.contains(endpoint), "{described}");
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
    assert_eq!(error.to_string(), "every instance of capability \"work\" is failing (circuits open)");
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

#[tokio::test(start_paused = true)]
async fn a_preferred_agent_is_called_first_and_an_unknown_preference_changes_nothing() {
    let script = Scripted::new(&[("w1", Behaviour::Answer), ("w2", Behaviour::Answer), ("w3", Behaviour::Answer)]);
    let caller = caller(&script, settings());
    let prefer = |name: &str| Target::Capability { capability: "work".into(), prefer: Some(name.into()) };
    for _ in 0..2 {
        let answered = caller.call(&scope(&[], None), &prefer("w2"), &task(), None).await.unwrap();
        assert_eq!(answered.agent.name, "w2");
    }
    let answered = caller.call(&scope(&[], None), &prefer("gone"), &task(), None).await.unwrap();
    assert_eq!(answered.agent.name, "w1", "the registry's order");
}

/// A caller of one instance that always answers 503, retrying up to `attempts_max` times after
/// pauses of `delay` (and jitter).
fn retrying(attempts_max: usize, delay: Duration) -> (Arc<Scripted>, MeshCaller) {
    let script = Scripted::new(&[("w1", Behaviour::Fail503)]);
    let settings = CallerSettings { attempts_max, retry_delay_min: delay, retry_delay_max: delay, ..settings() };
    let caller = caller(&script, settings);
    (script, caller)
}

#[tokio::test(start_paused = true)]
async fn retries_pause_within_the_configured_delays() {
    let delay = Duration::from_millis(100);
    let (script, caller) = retrying(3, delay);
    let started = tokio::time::Instant::now();
    caller.call(&scope(&[], None), &Target::Agent("w1".into()), &task(), None).await.unwrap_err();
    assert_eq!(script.called().len(), 3);
    // Two pauses of the delay, each with at most as much again of jitter.
    let elapsed = started.elapsed();
    assert!(elapsed >= delay * 2 && elapsed < delay * 4, "{elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn a_pause_that_would_end_past_the_deadline_ends_the_call_at_once() {
    let (script, caller) = retrying(5, Duration::from_secs(10));
    let started = tokio::time::Instant::now();
    let error = caller.call(&scope(&[], Some(1_000)), &Target::Agent("w1".into()), &task(), None).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::ZERO, "no pause that cannot end in time");
    assert_eq!(script.called().len(), 1);
    assert_eq!(error.error_code(), "DEPENDENCY_UNAVAILABLE", "the last failure: {error}");
}

#[tokio::test(start_paused = true)]
async fn a_message_answered_with_a_failed_task_is_reported_as_an_error() {
    use mesh_protocol::a2a::v1::{Message, Role, SendMessageRequest};
    let script = Scripted::new(&[
        ("done", Behaviour::Task("TASK_STATE_COMPLETED")),
        ("bad", Behaviour::Task("TASK_STATE_FAILED")),
    ]);
    let (reporter, flusher) = CallReporter::new(CallReportSettings::default());
    let caller = caller(&script, settings()).with_call_reports(reporter);
    let request = SendMessageRequest {
        tenant: None,
        message: Message::text(Role::User, "m1", "hello"),
        configuration: None,
        metadata: None,
    };
    for agent in ["done", "bad"] {
        let answered = caller.send_message(&scope(&[], None), &Target::Agent(agent.into()), &request, None).await;
        assert_eq!(answered.unwrap().agent.name, agent, "an answer either way");
    }
    drop(caller);
    let http = HttpClient::new(Arc::new(Script(script.clone())));
    flusher.run(RegistryClient::new(REGISTRY, http).unwrap()).await;
    let reported: Vec<_> = script.calls.lock().unwrap().iter().map(|c| (c.to.clone(), c.status)).collect();
    assert_eq!(reported, [("done".to_owned(), OutcomeStatus::Success), ("bad".to_owned(), OutcomeStatus::Error)]);
}

/// What the caller records in the process's metrics, read through a debugging recorder.
mod metrics_recorded {
    use mesh_test_support::metrics::{Reading, read};
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

    use super::*;

    fn labelled(name: &str, labels: &[(&str, &str)]) -> impl Fn(&&Reading) -> bool {
        let mut wanted: Vec<_> = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        wanted.sort_unstable();
        let name = name.to_owned();
        move |(n, labels, _)| *n == name && *labels == wanted
    }

    fn circuit_gauge(readings: &[Reading]) -> Option<&DebugValue> {
        let labels = [("service", "me"), ("callee", "w1"), ("endpoint", "http://w1/tasks/send")];
        readings.iter().find(labelled("mesh_circuit_open", &labels)).map(|(.., value)| value)
    }

    fn calls_timed(readings: &[Reading], capability: &str, status: &str) -> usize {
        let labels = [("service", "me"), ("capability", capability), ("status", status)];
        let timed = readings.iter().filter(labelled("mesh_outbound_call_duration_seconds", &labels));
        timed
            .map(|(.., value)| match value {
                DebugValue::Histogram(values) => values.len(),
                other => panic!("{capability}/{status}: {other:?}"),
            })
            .sum()
    }

    /// Runs `body` on a paused single-thread runtime recording into a debugging recorder of its
    /// own, which `body` reads through the snapshotter it is given; answers what `body` returns.
    fn recorded<F: std::future::Future<Output = Vec<Reading>>>(body: impl FnOnce(Snapshotter) -> F) -> Vec<Reading> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
            runtime.block_on(body(snapshotter))
        })
    }

    #[test]
    fn calls_are_timed_by_outcome_and_a_circuit_sets_its_gauge_when_it_changes() {
        let readings = recorded(|snapshotter| async move {
            let mut readings = Vec::new();
            let script = Scripted::new(&[("w1", Behaviour::Refuse), ("ok", Behaviour::Answer)]);
            let settings = CallerSettings {
                attempts_max: 1,
                circuits: CircuitSettings { consecutive_failures: 2, open: Duration::from_secs(3600) },
                ..settings()
            };
            let caller = caller(&script, settings);
            let w1 = Target::Agent("w1".into());
            caller.call(&scope(&[], None), &w1, &task(), None).await.unwrap_err();
            readings.extend(read(&snapshotter));
            assert_eq!(circuit_gauge(&readings), None, "no change, no gauge");
            caller.call(&scope(&[], None), &w1, &task(), None).await.unwrap_err();
            let now = read(&snapshotter);
            assert_eq!(circuit_gauge(&now), Some(&DebugValue::Gauge(1.0.into())), "opened");
            readings.extend(now);
            caller.call(&scope(&[], None), &w1, &task(), None).await.unwrap_err();
            caller.call(&scope(&[], None), &Target::Agent("ok".into()), &task(), None).await.unwrap();
            readings.extend(read(&snapshotter));
            readings
        });
        assert_eq!(calls_timed(&readings, "w1", "error"), 2);
        assert_eq!(calls_timed(&readings, "w1", "circuit_open"), 1);
        assert_eq!(calls_timed(&readings, "ok", "success"), 1);
    }

    fn counted(readings: &[Reading], name: &str, capability: &str) -> u64 {
        let labels = [("service", "me"), ("capability", capability)];
        let counts = readings.iter().filter(labelled(name, &labels));
        counts
            .map(|(.., value)| match value {
                DebugValue::Counter(n) => *n,
                other => panic!("{name} {capability}: {other:?}"),
            })
            .sum()
    }

    /// The counters the outbound dashboard and its alerts read (deploy/observability).
    #[test]
    fn retries_and_bulkhead_rejections_are_counted_by_capability() {
        let readings = recorded(|snapshotter| async move {
            let script = Scripted::new(&[("w1", Behaviour::Fail503), ("slow", Behaviour::Hang)]);
            let settings = CallerSettings { attempts_max: 3, outbound_calls_max: 1, ..settings() };
            let caller = Arc::new(caller(&script, settings));
            // Three attempts at a failing agent: two retries.
            caller.call(&scope(&[], None), &Target::Agent("w1".into()), &task(), None).await.unwrap_err();
            // The one slot held by a call that hangs: the next call is refused at once.
            let held = {
                let caller = caller.clone();
                tokio::spawn(async move {
                    caller.call(&scope(&[], None), &Target::Agent("slow".into()), &task(), Some(1_000)).await
                })
            };
            while !script.called().iter().any(|agent| agent == "slow") {
                tokio::task::yield_now().await;
            }
            let busy = caller.call(&scope(&[], None), &Target::Agent("slow".into()), &task(), None).await.unwrap_err();
            assert!(matches!(busy, CallError::Busy { limit: 1 }), "{busy}");
            held.await.unwrap().unwrap_err();
            read(&snapshotter)
        });
        assert_eq!(counted(&readings, "mesh_outbound_retries_total", "w1"), 2);
        assert_eq!(
            counted(&readings, "mesh_outbound_retries_total", "slow"),
            0,
            "a timeout of a skill not known idempotent"
        );
        assert_eq!(counted(&readings, "mesh_outbound_bulkhead_rejections_total", "slow"), 1);
        assert_eq!(counted(&readings, "mesh_outbound_bulkhead_rejections_total", "w1"), 0);
    }
}

fn discovery(script: &Arc<Scripted>, ttl: Duration) -> Discovery {
    let http = HttpClient::new(Arc::new(Script(script.clone())));
    Discovery::new(RegistryClient::new(REGISTRY, http.clone()).unwrap(), http, ttl)
}

fn names(agents: &[AgentSummary]) -> Vec<&str> {
    agents.iter().map(|agent| agent.name.as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn discovery_rotates_each_capabilitys_healthy_agents_and_keeps_the_others_last() {
    let script = Scripted::new(&[
        ("sick", Behaviour::Answer),
        ("w1", Behaviour::Answer),
        ("w2", Behaviour::Answer),
        ("w3", Behaviour::Answer),
    ]);
    script.unhealthy.lock().unwrap().push("sick");
    let discovery = discovery(&script, Duration::from_secs(60));
    let (healthy, others) = discovery.listed("work").await.unwrap();
    assert_eq!((names(&healthy), names(&others)), (vec!["w1", "w2", "w3"], vec!["sick"]));
    assert_eq!(names(&discovery.candidates("work").await.unwrap()), ["w1", "w2", "w3", "sick"]);
    assert_eq!(names(&discovery.candidates("work").await.unwrap()), ["w2", "w3", "w1", "sick"]);
    // Another capability turns on its own, without moving this one's turn.
    assert_eq!(names(&discovery.candidates("other").await.unwrap()), ["w1", "w2", "w3", "sick"]);
    assert_eq!(names(&discovery.candidates("work").await.unwrap()), ["w3", "w1", "w2", "sick"]);
    assert_eq!(names(&discovery.candidates("work").await.unwrap()), ["w1", "w2", "w3", "sick"]);
    // The turns are bounded: a full set of cursors starts over only for a capability it lacks.
    for i in 2..DISCOVERY_CACHE_ENTRIES_MAX {
        discovery.candidates(&format!("c{i}")).await.unwrap();
    }
    assert_eq!(names(&discovery.candidates("work").await.unwrap()), ["w2", "w3", "w1", "sick"], "kept when full");
    discovery.candidates("one-more").await.unwrap();
    assert_eq!(names(&discovery.candidates("work").await.unwrap()), ["w1", "w2", "w3", "sick"], "started over");
    // With none healthy, the others take turns.
    script.unhealthy.lock().unwrap().extend(["w1", "w2", "w3"]);
    let fresh = self::discovery(&script, Duration::from_secs(60));
    assert_eq!(names(&fresh.candidates("work").await.unwrap()), ["sick", "w1", "w2", "w3"]);
    assert_eq!(names(&fresh.candidates("work").await.unwrap()), ["w1", "w2", "w3", "sick"]);
}

#[tokio::test(start_paused = true)]
async fn discovery_asks_the_registry_once_a_ttl_and_falls_back_on_what_it_knew() {
    const TTL: Duration = Duration::from_secs(60);
    let script = Scripted::new(&[("w1", Behaviour::Answer)]);
    let discovery = discovery(&script, TTL);
    let lookups = || script.lookups.load(Ordering::SeqCst);
    discovery.candidates("work").await.unwrap();
    discovery.named("w1").await.unwrap();
    tokio::time::advance(TTL - Duration::from_millis(1)).await;
    discovery.candidates("work").await.unwrap();
    discovery.named("w1").await.unwrap();
    assert_eq!(lookups(), 2, "fresh within the TTL");
    tokio::time::advance(Duration::from_millis(1)).await;
    discovery.candidates("work").await.unwrap();
    assert_eq!(lookups(), 3, "stale at the TTL");

    script.registry_down.store(true, Ordering::SeqCst);
    tokio::time::advance(TTL).await;
    assert_eq!(names(&discovery.candidates("work").await.unwrap()), ["w1"], "the last known agents");
    assert_eq!(discovery.named("w1").await.unwrap().name, "w1");
    assert_eq!(lookups(), 5);
    discovery.candidates("work").await.unwrap();
    discovery.named("w1").await.unwrap();
    assert_eq!(lookups(), 5, "a stale answer is trusted for another TTL");
    let error = discovery.candidates("never-seen").await.unwrap_err();
    assert!(matches!(&error, DiscoveryError::Registry { capability, .. } if capability == "never-seen"), "{error}");
    let error = discovery.named("nobody").await.unwrap_err();
    assert!(matches!(&error, DiscoveryError::Registry { .. }), "{error}");
}
