//! The communication graph between two real agents (a boss and a worker) on port 0, fed by a
//! small registry stand-in serving the contract's `GET /api/policy` (with `ETag`s), agent
//! lookups, `POST /api/events/calls`, `POST /api/links/{id}/messages` and
//! `POST /api/links/{id}/receipts`: the link check on every binding, before sending, in both
//! modes; agent messages in the link's conversation, and their receipts from the receiver; answers
//! over a one-way link; call reports.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use mesh_agent_kit::agent_message::{SentAgentMessage, WithAgentMessages};
use mesh_agent_kit::call_agent::WithCallAgent;
use mesh_agent_kit::graph::AgentGraph;
use mesh_agent_kit::{AgentApp, AgentConfig, AgentError, AgentExtras, AgentHandler, AgentReply, TaskInput};
use mesh_client::{CallerSettings, Discovery, HttpClient, MeshCaller, RegistryClient};
use mesh_graph::LinkReceipt;
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::call::CALL_CHAIN_HEADER;
use mesh_protocol::graph::{
    CallReport, CallReports, GraphMode, GraphPolicy, Link, LinkDirection, LinkRelationship, LinkSource, NewLinkMessage,
    OutcomeStatus,
};
use mesh_protocol::registry::Registration;
use mesh_protocol::seed::{Part, ResponseStatus, TaskResponse};
use mesh_server::HealthReport;
use mesh_server::links::LINK_DENIED_JSONRPC_CODE;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::common::{HTTP, eventually};

/// Policy polls and call-report flushes this often, so tests see changes quickly.
const REFRESH_MS: u64 = 30;
/// A message with this text makes its receiver's task fail.
const FAILING_TEXT: &str = "fail";
/// The registry stand-in refuses to record the messages of the link with this id.
const UNRECORDED_LINK: &str = "unrecorded";

/// What the registry stand-in holds and was told.
#[derive(Debug)]
struct Registry {
    policy: Mutex<(u64, GraphPolicy)>,
    agents: Mutex<HashMap<String, Registration>>,
    not_modified: Mutex<u64>,
    calls: Mutex<Vec<CallReport>>,
    messages: Mutex<Vec<(String, NewLinkMessage)>>,
    receipts: Mutex<Vec<(String, LinkReceipt)>>,
}

#[derive(Debug)]
struct FakeRegistry {
    url: String,
    state: Arc<Registry>,
}

impl FakeRegistry {
    async fn start(policy: GraphPolicy) -> Self {
        let state = Arc::new(Registry {
            policy: Mutex::new((1, policy)),
            agents: Mutex::default(),
            not_modified: Mutex::default(),
            calls: Mutex::default(),
            messages: Mutex::default(),
            receipts: Mutex::default(),
        });
        let router = Router::new()
            .route("/register", post(register))
            .route(
                "/agents/{name}",
                get(agent).delete(|| async { Json(json!({"status": "success", "message": "gone"})) }),
            )
            .route("/capabilities/{capability}", get(capability_agents))
            .route("/api/policy", get(policy_feed))
            .route("/api/events/calls", post(report_calls))
            .route("/api/links/{id}/messages", post(record_message))
            .route("/api/links/{id}/receipts", post(record_receipt))
            .with_state(state.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("the fake registry binds");
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { url, state }
    }

    /// Serves `policy` from now on, under a new `ETag`.
    fn set_policy(&self, policy: GraphPolicy) {
        let mut current = self.state.policy.lock().unwrap();
        *current = (current.0 + 1, policy);
    }
}

async fn register(State(state): State<Arc<Registry>>, Json(registration): Json<Registration>) -> Json<Value> {
    state.agents.lock().unwrap().insert(registration.name.clone(), registration);
    Json(json!({"status": "success", "message": "registered"}))
}

async fn agent(State(state): State<Arc<Registry>>, Path(name): Path<String>) -> Response {
    let Some(url) = state.agents.lock().unwrap().get(&name).map(|r| r.url.clone()) else {
        let body = json!({"status": "ERROR", "error_code": "AGENT_NOT_FOUND", "error_message": name});
        return (StatusCode::NOT_FOUND, Json(body)).into_response();
    };
    Json(json!({"name": name, "url": url, "capabilities": ["work"], "health_endpoint": "/health",
                "process_endpoint": format!("{url}/tasks/send"),
                "agent_card_url": format!("{url}/.well-known/agent-card.json"), "health_status": "healthy",
                "registered_at": "2026-11-24T00:00:00Z", "updated_at": "2026-11-24T00:00:00Z"}))
    .into_response()
}

/// The agents registered with `capability`; a 404 when there is none, as the registry answers.
async fn capability_agents(State(state): State<Arc<Registry>>, Path(capability): Path<String>) -> Response {
    let agents: Vec<Value> = state
        .agents
        .lock()
        .unwrap()
        .values()
        .filter(|r| r.capabilities.contains(&capability))
        .map(|r| {
            json!({"name": r.name, "url": r.url, "health_status": "healthy", "process_endpoint": format!("{}/tasks/send", r.url),
                   "agent_card_url": format!("{}/.well-known/agent-card.json", r.url)})
        })
        .collect();
    if agents.is_empty() {
        let body = json!({"status": "ERROR", "error_code": "AGENT_NOT_FOUND", "error_message": capability});
        return (StatusCode::NOT_FOUND, Json(body)).into_response();
    }
    Json(json!({"status": "success", "capability": capability, "agents": agents})).into_response()
}

async fn policy_feed(State(state): State<Arc<Registry>>, headers: HeaderMap) -> Response {
    let (version, policy) = state.policy.lock().unwrap().clone();
    let etag = format!("\"{version}\"");
    if headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(etag.as_str()) {
        *state.not_modified.lock().unwrap() += 1;
        return StatusCode::NOT_MODIFIED.into_response();
    }
    ([(header::ETAG, etag)], Json(policy)).into_response()
}

async fn report_calls(State(state): State<Arc<Registry>>, Json(reports): Json<CallReports>) -> impl IntoResponse {
    let accepted = reports.calls.len();
    state.calls.lock().unwrap().extend(reports.calls);
    (StatusCode::ACCEPTED, Json(json!({"accepted": accepted})))
}

async fn record_message(
    State(state): State<Arc<Registry>>,
    Path(link_id): Path<String>,
    Json(message): Json<NewLinkMessage>,
) -> Response {
    if link_id == UNRECORDED_LINK {
        let body = json!({"status": "ERROR", "error_code": "SERVICE_UNAVAILABLE", "error_message": "history down"});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    let mut messages = state.messages.lock().unwrap();
    messages.push((link_id.clone(), message.clone()));
    let body = json!({"id": format!("m{}", messages.len()), "link_id": link_id, "from_agent_id": message.from_agent_id,
        "to_agent_id": message.to_agent_id, "relationship": "peer", "context_id": message.context_id,
        "task_id": message.task_id, "text": message.text, "reply": message.reply, "status": message.status,
        "sent_at": "2026-11-24T00:00:00Z"});
    (StatusCode::CREATED, Json(body)).into_response()
}

async fn record_receipt(
    State(state): State<Arc<Registry>>,
    Path(link_id): Path<String>,
    Json(receipt): Json<LinkReceipt>,
) -> impl IntoResponse {
    state.receipts.lock().unwrap().push((link_id, receipt));
    (StatusCode::ACCEPTED, Json(json!({"status": "success", "message": "received"})))
}

fn policy(mode: GraphMode, links: &[(&str, &str, &str, LinkDirection, bool)]) -> GraphPolicy {
    let links = links
        .iter()
        .map(|(id, from, to, direction, enabled)| Link {
            id: (*id).into(),
            from_agent_id: (*from).into(),
            to_agent_id: (*to).into(),
            direction: *direction,
            relationship: LinkRelationship::Superior,
            enabled: *enabled,
            source: LinkSource::Config,
            created_at: "2026-11-24T00:00:00Z".into(),
            updated_at: "2026-11-24T00:00:00Z".into(),
        })
        .collect();
    GraphPolicy { mode, links }
}

/// Answers with its name, the text, and the link context it was given; fails on [`FAILING_TEXT`].
#[derive(Debug)]
struct Echo(&'static str);

impl AgentHandler for Echo {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        if task.text == FAILING_TEXT {
            return Err(AgentError::Unavailable(format!("{} was told to fail", self.0)));
        }
        Ok(AgentReply::data(json!({"agent": self.0, "text": task.text, "link": task.link})))
    }
}

/// A running agent offering `call_agent` and `send_agent_message` over its graph's caller.
#[derive(Debug)]
struct Agent {
    url: String,
    _stop: oneshot::Sender<()>,
}

impl Agent {
    async fn start(registry: &FakeRegistry, name: &'static str) -> Self {
        let config = AgentConfig {
            name: Some(name.into()),
            registry_url: Some(registry.url.clone()),
            task_store_url: Some("sqlite::memory:".into()),
            graph_refresh_ms: REFRESH_MS,
            call_report_flush_ms: REFRESH_MS,
            ..AgentConfig::default()
        };
        let http = HttpClient::with_reqwest().unwrap();
        let graph = AgentGraph::new(&config, http.clone()).unwrap().expect("a registry is configured");
        let client = RegistryClient::new(&registry.url, http.clone()).unwrap();
        let discovery = Discovery::new(client.clone(), http.clone(), Duration::from_secs(60));
        let caller = MeshCaller::new(http.clone(), client, Arc::new(discovery), CallerSettings::default());
        let caller = Arc::new(graph.caller(caller));
        let handler = WithAgentMessages::new(WithCallAgent::new(Echo(name), caller.clone()), caller, graph.clone());
        let card: AgentCard = serde_json::from_value(json!({"name": name, "description": "test", "version": "1",
            "supportedInterfaces": [], "capabilities": {}, "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["application/json"],
            "skills": [{"id": "work", "name": "Work", "description": "work", "tags": ["work"]},
                       {"id": format!("{name}-skill"), "name": "Own", "description": "its own", "tags": []}]}))
        .unwrap();
        let extras = AgentExtras { graph: Some(graph), ..AgentExtras::default() };
        let app = AgentApp::build_with(&config, card, handler, http, extras).await.unwrap();
        let url = app.url().to_owned();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        let agent = Self { url, _stop: stop };
        eventually(&format!("{name} loads the policy and registers"), async || {
            let graph = &agent.health().await.components["graph"];
            graph["links"]["loaded"] == true && registry.state.agents.lock().unwrap().contains_key(name)
        })
        .await;
        agent
    }

    async fn health(&self) -> HealthReport {
        HTTP.get(format!("{}/health", self.url)).send().await.unwrap().json().await.unwrap()
    }

    /// Posts a seed task with `data`, as a call from the agents in `chain`.
    async fn seed(&self, chain: &[&str], data: Value) -> reqwest::Response {
        let body = json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": "hello"}, {"type": "data", "data": data}]}]});
        let mut request = HTTP.post(format!("{}/tasks/send", self.url)).json(&body);
        if !chain.is_empty() {
            request = request.header(CALL_CHAIN_HEADER, chain.join(","));
        }
        request.send().await.unwrap()
    }

    /// Asks this agent to use one of its skills, as a user would, and returns the reply's data.
    async fn ask(&self, data: Value) -> Result<Value, Value> {
        self.ask_whole(data).await.map(data_of)
    }

    /// [`Agent::ask`]'s whole answer: status and warnings with the reply.
    async fn ask_whole(&self, data: Value) -> Result<TaskResponse, Value> {
        let response = self.seed(&[], data).await;
        if !response.status().is_success() {
            return Err(response.json().await.unwrap());
        }
        Ok(response.json().await.unwrap())
    }
}

/// The data part of a reply.
fn data_of(task: TaskResponse) -> Value {
    let data = task.messages.into_iter().flat_map(|m| m.parts).find_map(|part| match part {
        Part::Data { data } => Some(data),
        Part::Text { .. } => None,
    });
    data.expect("a data part")
}

async fn expect_denied(response: reqwest::Response, naming: &str) {
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error_code"], "LINK_DENIED", "{body}");
    assert!(body["error_message"].as_str().unwrap().starts_with(naming), "{body}");
}

#[tokio::test]
async fn enforced_links_govern_every_binding_and_agent_messages_land_in_the_link_conversation() {
    let registry =
        FakeRegistry::start(policy(GraphMode::Enforced, &[("l1", "boss", "worker", LinkDirection::OneWay, true)]))
            .await;
    let boss = Agent::start(&registry, "boss").await;
    let worker = Agent::start(&registry, "worker").await;

    // A user is not an agent: no link is needed.
    assert!(boss.seed(&[], json!({})).await.status().is_success());
    // The worker may not start a conversation with its boss, on any binding.
    expect_denied(boss.seed(&["worker"], json!({})).await, "no enabled link lets worker call boss").await;
    let message = json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
    let rest = HTTP
        .post(format!("{}/message:send", boss.url))
        .header("A2A-Version", "1.0")
        .header(CALL_CHAIN_HEADER, "worker");
    expect_denied(rest.json(&message).send().await.unwrap(), "no enabled link lets worker call boss").await;
    let rpc = json!({"jsonrpc": "2.0", "id": 42, "method": "SendMessage", "params": message});
    let response = HTTP
        .post(format!("{}/", boss.url))
        .header("A2A-Version", "1.0")
        .header(CALL_CHAIN_HEADER, "worker")
        .json(&rpc)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let answer: Value = response.json().await.unwrap();
    assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(42), json!(LINK_DENIED_JSONRPC_CODE)));
    assert_eq!(answer["error"]["data"]["error_code"], "LINK_DENIED");
    // ... and its own caller refuses before sending: the boss serves nothing more.
    let served = boss.health().await.metrics.served;
    let refused = worker.ask(json!({"skill": "call_agent", "agent_id": "boss", "message": "hi"})).await.unwrap_err();
    assert_eq!(refused["error_code"], "LINK_DENIED", "{refused}");
    assert_eq!(boss.health().await.metrics.served, served, "the refused call never reached the boss");

    // The boss calls its worker, which answers in full: so does the boss.
    let called = boss.ask_whole(json!({"skill": "call_agent", "agent_id": "worker", "message": "work"})).await.unwrap();
    assert_eq!((called.status, called.warnings.as_slice()), (ResponseStatus::Success, &[] as &[String]));
    let called = data_of(called);
    assert_eq!((called["agent"].clone(), called["link"].clone()), (json!("worker"), Value::Null));
    // Its health shows the circuit of the agent it called, through every layer of its handler.
    let circuits = boss.health().await.circuits;
    assert_eq!(circuits.iter().map(|c| c.agent.as_str()).collect::<Vec<_>>(), ["worker"], "{circuits:?}");
    // ... and by capability: the registry names the agent that offers it.
    let called = boss.ask(json!({"skill": "call_agent", "capability": "worker-skill", "message": "work"})).await;
    assert_eq!(called.unwrap()["agent"], "worker");
    // A call names exactly one of an agent and a capability, neither blank: else nothing is sent.
    for target in [
        json!({"agent_id": "  "}),
        json!({"capability": " "}),
        json!({"agent_id": "worker", "capability": "worker-skill"}),
        json!({}),
    ] {
        let mut call = json!({"skill": "call_agent", "message": "work"});
        call.as_object_mut().unwrap().extend(target.as_object().unwrap().clone());
        let refused = boss.ask(call).await.unwrap_err();
        assert_eq!(refused["error_code"], "TASK_INVALID_INPUT", "{target}: {refused}");
    }

    // The boss messages its worker over the link: the worker's handler sees who and in which
    // relationship, its task store keeps the message in the link's conversation, the registry
    // records it.
    let answer =
        boss.ask_whole(json!({"skill": "send_agent_message", "target": "worker", "message": "status?"})).await.unwrap();
    // Delivered, answered and recorded: a complete answer, without warnings.
    assert_eq!((answer.status, answer.warnings.as_slice()), (ResponseStatus::Success, &[] as &[String]));
    let sent: SentAgentMessage = serde_json::from_value(data_of(answer)).unwrap();
    assert_eq!((sent.link_id.as_str(), sent.context_id.as_str()), ("l1", "link:l1"));
    assert_eq!(sent.relationship, LinkRelationship::Superior);
    assert_eq!(sent.message_id.as_deref(), Some("m1"));
    let reply: Value = serde_json::from_str(sent.reply.as_deref().unwrap()).unwrap();
    assert_eq!(reply["link"], json!({"link_id": "l1", "from_agent_id": "boss", "relationship": "superior"}));
    let tasks: Value = HTTP
        .get(format!("{}/tasks?contextId=link:l1", worker.url))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tasks["tasks"].as_array().map(Vec::len), Some(1), "{tasks}");
    assert_eq!(tasks["tasks"][0]["history"][0]["metadata"]["from_agent_id"], "boss");

    // The worker answers inside the conversation its boss started, as a subordinate.
    let answered: SentAgentMessage = serde_json::from_value(
        worker.ask(json!({"skill": "send_agent_message", "target": "boss", "message": "done"})).await.unwrap(),
    )
    .unwrap();
    assert_eq!((answered.context_id.as_str(), answered.relationship), ("link:l1", LinkRelationship::Subordinate));
    let reply: Value = serde_json::from_str(answered.reply.as_deref().unwrap()).unwrap();
    assert_eq!(reply["link"]["relationship"], "subordinate");
    let messages = registry.state.messages.lock().unwrap().clone();
    let recorded: Vec<(&str, &str, &str)> =
        messages.iter().map(|(link, m)| (link.as_str(), m.from_agent_id.as_str(), m.context_id.as_str())).collect();
    assert_eq!(recorded, [("l1", "boss", "link:l1"), ("l1", "worker", "link:l1")]);
    // A message needs both a target and a text: either one blank is refused before anything is sent.
    for (target, message) in [("worker", "  "), (" ", "status?")] {
        let refused =
            boss.ask(json!({"skill": "send_agent_message", "target": target, "message": message})).await.unwrap_err();
        assert_eq!(refused["error_code"], "TASK_INVALID_INPUT", "{target:?}, {message:?}: {refused}");
    }
    // Each receiver reported that it processed its message, naming the message and its task.
    eventually("both receipts are posted", async || registry.state.receipts.lock().unwrap().len() == 2).await;
    let mut receipts = registry.state.receipts.lock().unwrap().clone();
    receipts.sort_by(|a, b| a.1.to_agent_id.cmp(&b.1.to_agent_id));
    let ends: Vec<(&str, &str, &str, &str)> = receipts
        .iter()
        .map(|(link, r)| (link.as_str(), r.from_agent_id.as_str(), r.to_agent_id.as_str(), r.context_id.as_str()))
        .collect();
    assert_eq!(ends, [("l1", "worker", "boss", "link:l1"), ("l1", "boss", "worker", "link:l1")]);
    let to_worker = &receipts[1].1;
    assert_eq!((to_worker.status, to_worker.tenant.as_deref()), (OutcomeStatus::Success, None));
    assert_eq!(to_worker.task_id, sent.task_id, "the receiver's task that processed it");
    assert!(!to_worker.message_id.is_empty());

    // Every call sent was reported; the refused one was not.
    eventually("the calls are reported", async || registry.state.calls.lock().unwrap().len() >= 4).await;
    // Each agent posts its own reports: sorted, their order across agents does not matter.
    let mut calls: Vec<(String, String)> =
        registry.state.calls.lock().unwrap().iter().map(|c| (c.from.clone(), c.to.clone())).collect();
    calls.sort();
    let expected = [("boss", "worker"), ("boss", "worker"), ("boss", "worker"), ("worker", "boss")];
    assert_eq!(calls, expected.map(|(a, b)| (a.to_owned(), b.to_owned())));
    let graph = &worker.health().await.components["graph"];
    assert_eq!((graph["links"]["mode"].clone(), graph["links"]["links"].clone()), (json!("enforced"), json!(1)));
    assert_eq!(graph["call_reports"]["dropped_queue_full"], 0);
}

#[tokio::test]
async fn a_message_that_ended_badly_or_went_unrecorded_is_answered_with_warnings() {
    let registry = FakeRegistry::start(policy(
        GraphMode::Enforced,
        &[(UNRECORDED_LINK, "boss", "worker", LinkDirection::OneWay, true)],
    ))
    .await;
    let boss = Agent::start(&registry, "boss").await;
    let _worker = Agent::start(&registry, "worker").await;
    let answer = boss
        .ask_whole(json!({"skill": "send_agent_message", "target": "worker", "message": FAILING_TEXT}))
        .await
        .unwrap();
    // The message went over the link, so the sender answers with what came back, and says
    // twice why that answer is not the whole story.
    let warnings =
        ["the message was delivered but ended ERROR", "the registry did not record the message in the link's history"];
    assert_eq!(
        (answer.status, answer.warnings.as_slice()),
        (ResponseStatus::Partial, warnings.map(String::from).as_slice())
    );
    let sent: SentAgentMessage = serde_json::from_value(data_of(answer)).unwrap();
    assert_eq!((sent.status, sent.message_id), (OutcomeStatus::Error, None));
    assert!(sent.reply.as_deref().unwrap().contains("worker was told to fail"), "{:?}", sent.reply);
}

#[tokio::test]
async fn open_mode_allows_every_call_and_a_disabled_link_denies_once_the_policy_changes() {
    let registry =
        FakeRegistry::start(policy(GraphMode::Open, &[("l1", "boss", "worker", LinkDirection::TwoWay, true)])).await;
    let boss = Agent::start(&registry, "boss").await;
    let worker = Agent::start(&registry, "worker").await;
    assert!(boss.seed(&["stranger"], json!({})).await.status().is_success(), "open: no link needed");
    let called = boss.ask(json!({"skill": "call_agent", "agent_id": "worker", "message": "work"})).await;
    assert_eq!(called.unwrap()["agent"], "worker");
    // Unchanged policies cost a 304.
    eventually("the policy is revalidated", async || *registry.state.not_modified.lock().unwrap() >= 2).await;

    registry.set_policy(policy(GraphMode::Enforced, &[("l1", "boss", "worker", LinkDirection::TwoWay, false)]));
    eventually("the agents load the new policy", async || {
        boss.health().await.components["graph"]["links"]["mode"] == "enforced"
            && worker.health().await.components["graph"]["links"]["mode"] == "enforced"
    })
    .await;
    let refused = boss.ask(json!({"skill": "call_agent", "agent_id": "worker", "message": "work"})).await.unwrap_err();
    assert_eq!(refused["error_code"], "LINK_DENIED");
    assert!(refused["error_message"].as_str().unwrap().contains("link l1 between them is disabled"), "{refused}");
    let refused =
        boss.ask(json!({"skill": "send_agent_message", "target": "worker", "message": "status?"})).await.unwrap_err();
    assert_eq!(refused["error_code"], "LINK_DENIED", "{refused}");
    expect_denied(worker.seed(&["boss"], json!({})).await, "no enabled link lets boss call worker").await;
    assert!(registry.state.messages.lock().unwrap().is_empty(), "nothing went over the disabled link");
}
