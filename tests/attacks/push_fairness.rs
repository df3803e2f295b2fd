//! Issue #34, finding 4: one tenant blocking every tenant's push notifications, played against a
//! kit agent with authentication on (tenants `acme` and `globex`, as `alice` and `bob`) and
//! webhook receivers of the test's own, all on port 0.
//!
//! Attacked: the agent's outbox, which acme fills with notifications to a webhook that never
//! answers; its delivery slots, which acme's hanging webhooks hold; a webhook that keeps failing,
//! which every retry of every notification hammers; and the outbound address policy of
//! webhooks, which let a tenant aim the agent at private, loopback, shared (CGNAT) and metadata
//! addresses, literal or behind a name.
//!
//! Must hold: each tenant has its own share of the outbox and of the deliveries in flight, so
//! globex's notifications go out whatever acme does; a destination that keeps failing gets no
//! more requests once its circuit opens; a notification refused or given up is visible to its
//! owner on the task (`GetTask`'s metadata) and in `/metrics` by tenant and reason; and webhooks
//! on non-public addresses are refused unless `push_allowed_networks` opts their network in.
//!
//! The agents are configured from TOML, as the agent binaries read their files, so that the
//! settings this fix adds are plain keys.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use mesh_agent_kit::{AgentApp, AgentConfig, TaskEvents, TaskHandler, Turn};
use mesh_auth::{AuthConfig, Role};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::{AgentCard, TaskState};
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};

use crate::secured::{SECRET, token};

/// Longest wait for something the test expects to happen.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Webhook configs a task may have (`PUSH_CONFIGS_PER_TASK_MAX`).
const CONFIGS_PER_TASK: usize = 10;
/// The metadata key of a task's undelivered notifications.
const UNDELIVERED_KEY: &str = "meshPushUndelivered";

/// `ask` waits for the user; `flood N` reports N working states, then waits for the user;
/// anything else works and completes (three notifications per webhook: the task, working,
/// completed).
#[derive(Debug)]
struct Worker;

impl TaskHandler for Worker {
    async fn run(&self, turn: Turn, events: TaskEvents) {
        let text = turn.message.parts.iter().filter_map(|p| p.as_text()).collect::<String>();
        if text == "ask" {
            let _ = events.status(TaskState::InputRequired, Some("which one?")).await;
            return;
        }
        if let Some(count) = text.strip_prefix("flood ") {
            for _ in 0..count.parse::<usize>().unwrap() {
                let _ = events.status(TaskState::Working, None).await;
            }
            let _ = events.status(TaskState::InputRequired, Some("more?")).await;
            return;
        }
        let _ = events.status(TaskState::Working, None).await;
        let _ = events.status(TaskState::Completed, None).await;
    }
}

fn card(name: &str) -> AgentCard {
    serde_json::from_value(json!({
        "name": name, "description": "push fairness test agent", "version": "1",
        "supportedInterfaces": [], "capabilities": {"streaming": true},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "work", "name": "Work", "description": "works", "tags": ["test"]}]
    }))
    .unwrap()
}

/// A kit agent named `name` on port 0, its tasks in memory, configured by `toml` (the keys of
/// an agent's configuration file), with bearer tokens signed by the secured suite's secret.
struct Agent {
    name: String,
    url: String,
    http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl Agent {
    async fn start(name: &str, toml: &str) -> Self {
        // Once per process; the agents' `/metrics` render nothing without it.
        let _ = mesh_telemetry::install_metrics();
        let mut config: AgentConfig = toml::from_str(&format!("task_durability = \"memory\"\n{toml}")).unwrap();
        config.auth = AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() };
        let app =
            AgentApp::build_tasks(&config, card(name), Worker, HttpClient::with_reqwest().unwrap()).await.unwrap();
        let url = app.url().to_owned();
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(async move {
            app.run_until_stopped(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        let http = reqwest::Client::builder().timeout(2 * TIMEOUT).build().unwrap();
        Self { name: name.to_owned(), url, http, stop: Some(stop), done }
    }

    /// A JSON-RPC 1.0 call as the holder of `bearer`; the whole response.
    async fn rpc(&self, bearer: &str, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let response = self
            .http
            .post(format!("{}/", self.url))
            .header("A2A-Version", "1.0")
            .bearer_auth(bearer)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        response.json().await.unwrap()
    }

    /// Sends `text` in a new task (or the task `task_id` when given), with a webhook at `webhook`
    /// when given; the answered task.
    async fn send(&self, bearer: &str, text: &str, task_id: Option<&str>, webhook: Option<&str>) -> Value {
        let mut message =
            json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]});
        if let Some(task_id) = task_id {
            message["taskId"] = json!(task_id);
        }
        let mut params = json!({"message": message});
        if let Some(url) = webhook {
            params["configuration"] = json!({"taskPushNotificationConfig": {"url": url, "token": "t"}});
        }
        let answer = self.rpc(bearer, "SendMessage", params).await;
        let task = answer["result"]["task"].clone();
        assert!(task.is_object(), "no task: {answer}");
        task
    }

    /// A new task waiting for the user, with `configs` webhooks at `url`; its id.
    async fn task_with_webhooks(&self, bearer: &str, url: &str, configs: usize) -> String {
        let task_id = self.send(bearer, "ask", None, None).await["id"].as_str().unwrap().to_owned();
        for n in 0..configs {
            let config = json!({"taskId": task_id, "id": format!("hook-{n}"), "url": url});
            let created = self.rpc(bearer, "CreateTaskPushNotificationConfig", config).await;
            assert!(created.get("error").is_none(), "{created}");
        }
        task_id
    }

    async fn get_task(&self, bearer: &str, task_id: &str) -> Value {
        let answer = self.rpc(bearer, "GetTask", json!({"id": task_id})).await;
        answer.get("result").cloned().unwrap_or_else(|| panic!("no task: {answer}"))
    }

    /// The agent's `/metrics` lines of `metric` that name every one of `labels` (`key="value"`).
    async fn metric_lines(&self, metric: &str, labels: &[&str]) -> Vec<String> {
        let text = self.http.get(format!("{}/metrics", self.url)).send().await.unwrap().text().await.unwrap();
        text.lines()
            .filter(|line| line.starts_with(&format!("{metric}{{")))
            .filter(|line| labels.iter().all(|label| line.contains(label)))
            .map(str::to_owned)
            .collect()
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        // Deliveries under way (to hanging webhooks) do not hold the stop.
        self.done.await.unwrap();
    }
}

/// How a webhook receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    Accept,
    /// 503, always.
    Fail,
    /// Never answers.
    Hang,
}

#[derive(Debug)]
struct HookState {
    behaviour: Behaviour,
    /// Requests received, answered or not.
    requests: AtomicUsize,
    /// The bodies of the accepted notifications.
    accepted: Mutex<Vec<Value>>,
    arrived: Notify,
}

/// A webhook receiver on 127.0.0.1, port 0.
struct Hook {
    state: Arc<HookState>,
    addr: SocketAddr,
}

impl Hook {
    async fn start(behaviour: Behaviour) -> Self {
        let state = Arc::new(HookState {
            behaviour,
            requests: AtomicUsize::new(0),
            accepted: Mutex::new(Vec::new()),
            arrived: Notify::new(),
        });
        let app = axum::Router::new().route("/hook", axum::routing::post(receive)).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { state, addr }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Waits until `count` requests arrived (answered or not); false after `timeout`.
    async fn requests_reach(&self, count: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let arrived = self.state.arrived.notified();
            if self.requests() >= count {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let _ = tokio::time::timeout(left, arrived).await;
        }
    }

    fn accepted(&self) -> Vec<Value> {
        self.state.accepted.lock().unwrap().clone()
    }
}

async fn receive(State(hook): State<Arc<HookState>>, body: axum::body::Bytes) -> StatusCode {
    hook.requests.fetch_add(1, Ordering::SeqCst);
    if hook.behaviour == Behaviour::Accept {
        hook.accepted.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    }
    hook.arrived.notify_waiters();
    match hook.behaviour {
        Behaviour::Accept => StatusCode::OK,
        Behaviour::Fail => StatusCode::SERVICE_UNAVAILABLE,
        Behaviour::Hang => std::future::pending().await,
    }
}

fn alice() -> String {
    token("alice", "acme", &[Role::User])
}

fn bob() -> String {
    token("bob", "globex", &[Role::User])
}

/// The undelivered notifications the task's metadata reports, per webhook config.
fn undelivered(task: &Value) -> Vec<Value> {
    task["metadata"][UNDELIVERED_KEY].as_array().cloned().unwrap_or_default()
}

/// acme floods the outbox with notifications to webhooks that never answer (before the fix it
/// took the agent's whole outbox, 100,000 notifications, and every tenant's were refused from
/// then on); globex's task must still reach its webhook, and acme must be able to read on its
/// task that its notifications were refused, and why.
#[tokio::test]
async fn one_tenant_filling_the_outbox_leaves_other_tenants_notifications_flowing() {
    let agent = Agent::start("push-outbox-share", "push_allowed_networks = [\"127.0.0.0/8\"]\n").await;
    let (alice, bob) = (alice(), bob());
    let dead = Hook::start(Behaviour::Hang).await;
    // 16 webhooks that hang: before the fix they held every delivery, so the flood below ran
    // without the delivery loop reading the outbox; after it, acme holds its share only.
    let flooded = agent.task_with_webhooks(&alice, &dead.url(), CONFIGS_PER_TASK).await;
    let second = agent.task_with_webhooks(&alice, &dead.url(), 6).await;
    agent.send(&alice, "more", Some(&second), None).await;
    // 10,001 events for 10 webhooks: past the 100,000 notifications the outbox held at most.
    let flood = agent.send(&alice, "flood 10001", Some(&flooded), None).await;
    assert_eq!(flood["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{flood}");

    let alive = Hook::start(Behaviour::Accept).await;
    let answer = agent.send(&bob, "report", None, Some(&alive.url())).await;
    assert_eq!(answer["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    assert!(
        alive.requests_reach(3, TIMEOUT).await,
        "globex's webhook received {} of its 3 notifications within {TIMEOUT:?}: acme's flood took the outbox",
        alive.requests()
    );
    let states: Vec<Value> = alive.accepted().iter().map(|n| n["statusUpdate"]["status"]["state"].clone()).collect();
    assert_eq!(states[1..], [json!("TASK_STATE_WORKING"), json!("TASK_STATE_COMPLETED")]);

    // acme reads why its notifications did not go out, per webhook.
    let task = agent.get_task(&alice, &flooded).await;
    let refused = undelivered(&task);
    assert_eq!(refused.len(), CONFIGS_PER_TASK, "one entry per webhook: {}", task["metadata"]);
    for entry in &refused {
        assert_eq!(entry["reason"], "tenant_outbox_full", "{entry}");
        assert!(entry["count"].as_u64().unwrap() > 5_000, "most of the flood was refused: {entry}");
        assert!(entry["message"].as_str().unwrap().contains("acme"), "{entry}");
    }
    let lines = agent
        .metric_lines(
            "mesh_push_notifications_refused_total",
            &[&format!("service=\"{}\"", agent.name), "tenant=\"acme\"", "reason=\"tenant_outbox_full\""],
        )
        .await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    // globex sees nothing of it.
    let hidden = agent.rpc(&bob, "GetTask", json!({"id": flooded})).await;
    assert_eq!(hidden["error"]["code"], -32001, "{hidden}");
    agent.stop().await;
}

/// acme's webhooks hang: before the fix they held every delivery slot for the whole delivery
/// timeout, and globex's notifications waited behind them; now a tenant has its share of the
/// slots, and the next notification claimed is the next tenant's (round robin).
#[tokio::test]
async fn one_tenants_hanging_webhooks_hold_no_other_tenants_deliveries() {
    let toml = "push_allowed_networks = [\"127.0.0.0/8\"]\npush_deliveries_max = 4\n\
                push_deliveries_per_tenant_max = 2\npush_delivery_timeout_ms = 60000\n";
    let agent = Agent::start("push-delivery-share", toml).await;
    let (alice, bob) = (alice(), bob());
    let hanging = Hook::start(Behaviour::Hang).await;
    let task = agent.task_with_webhooks(&alice, &hanging.url(), 8).await;
    agent.send(&alice, "more", Some(&task), None).await;
    assert!(hanging.requests_reach(2, TIMEOUT).await, "acme's webhooks were never called");

    let alive = Hook::start(Behaviour::Accept).await;
    let started = Instant::now();
    agent.send(&bob, "report", None, Some(&alive.url())).await;
    assert!(
        alive.requests_reach(3, TIMEOUT).await,
        "globex's webhook received {} of its 3 notifications within {TIMEOUT:?}; acme's hanging webhooks \
         held {} deliveries",
        alive.requests(),
        hanging.requests()
    );
    assert!(started.elapsed() < TIMEOUT);
    assert!(hanging.requests() <= 2, "acme holds at most its 2 slots: {} requests hang", hanging.requests());
    agent.stop().await;
}

/// A webhook that keeps failing: before the fix every attempt at every notification reached
/// it (30 notifications, 3 attempts each); now its circuit opens after 3 failures in a row and
/// the rest are refused without a request, recorded on the task with their reason, while acme's
/// other destination is served as usual.
#[tokio::test]
async fn a_webhook_that_keeps_failing_is_cut_off_by_its_circuit() {
    let toml = "push_allowed_networks = [\"127.0.0.0/8\"]\npush_delivery_attempts_max = 3\n\
                push_retry_delay_min_ms = 20\npush_retry_delay_max_ms = 100\n\
                push_circuit_failures = 3\npush_circuit_open_ms = 60000\n";
    let agent = Agent::start("push-circuit", toml).await;
    let alice = alice();
    let failing = Hook::start(Behaviour::Fail).await;
    let task = agent.task_with_webhooks(&alice, &failing.url(), CONFIGS_PER_TASK).await;
    agent.send(&alice, "report", Some(&task), None).await;
    // 10 webhooks x 3 notifications (the task as the turn first shows it, working, completed),
    // every one given up in the end.
    let all_given_up = |task: &Value| undelivered(task).iter().filter_map(|e| e["count"].as_u64()).sum::<u64>();
    let deadline = Instant::now() + TIMEOUT;
    let expected = loop {
        let seen = agent.get_task(&alice, &task).await;
        let given_up = all_given_up(&seen);
        // Before the fix nothing is recorded: the requests the webhook received say enough.
        if given_up >= 30 || failing.requests() > 30 {
            break seen;
        }
        assert!(Instant::now() < deadline, "nothing given up within {TIMEOUT:?}: {seen}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // 3 failures open the circuit; deliveries already in flight then (acme's share, 4) end too.
    assert!(
        failing.requests() <= 3 + 4,
        "the failing webhook received {} requests: its circuit never opened",
        failing.requests()
    );
    let reasons: Vec<Value> = undelivered(&expected).iter().map(|e| e["reason"].clone()).collect();
    assert!(reasons.contains(&json!("circuit_open")), "{reasons:?}");

    // Another destination of the same tenant is not cut off.
    let alive = Hook::start(Behaviour::Accept).await;
    agent.send(&alice, "report", None, Some(&alive.url())).await;
    assert!(alive.requests_reach(3, TIMEOUT).await, "acme's healthy webhook got {} notifications", alive.requests());
    let lines = agent
        .metric_lines("mesh_push_notifications_refused_total", &["tenant=\"acme\"", "reason=\"circuit_open\""])
        .await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    agent.stop().await;
}

/// Webhooks on non-public addresses, literal or behind a name, are refused by default (A2A 1.0
/// §13.2); `push_allowed_networks` opts a network in, but never a metadata address.
#[tokio::test]
async fn webhooks_on_private_loopback_shared_and_metadata_addresses_are_refused_by_default() {
    let alice = alice();
    let hook = Hook::start(Behaviour::Accept).await;
    let by_name = format!("http://localhost:{}/hook", hook.addr.port());
    let refused_by_default = [
        "http://127.0.0.1:9/hook",
        "http://10.1.2.3/hook",
        "http://172.16.5.4/hook",
        "http://192.168.1.1/hook",
        "http://100.64.0.1/hook",
        "http://100.100.100.200/latest/meta-data/",
        "http://[::1]:9/hook",
        "http://[fd12:3456::1]/hook",
        "http://[::ffff:10.0.0.1]/hook",
        "http://[::ffff:127.0.0.1]:9/hook",
        "http://[64:ff9b::a00:1]/hook",
        "http://0x7f000001:9/hook",
        by_name.as_str(),
    ];
    let agent = Agent::start("push-addresses", "").await;
    let task = agent.send(&alice, "ask", None, None).await["id"].as_str().unwrap().to_owned();
    let mut accepted = Vec::new();
    for url in refused_by_default {
        let answer = agent.rpc(&alice, "CreateTaskPushNotificationConfig", json!({"taskId": task, "url": url})).await;
        match answer["error"]["code"].as_i64() {
            Some(-32602) => {
                let message = answer["error"]["message"].as_str().unwrap();
                assert!(message.contains("refused by the outbound address policy"), "{url}: {message}");
            }
            _ => accepted.push(format!("{url}: {answer}")),
        }
    }
    assert!(accepted.is_empty(), "webhooks accepted on non-public addresses:\n{}", accepted.join("\n"));
    // Given with a message, the same: refused before any task starts.
    let answer = agent
        .rpc(
            &alice,
            "SendMessage",
            json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "go"}]},
                   "configuration": {"taskPushNotificationConfig": {"url": by_name}}}),
        )
        .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    agent.stop().await;

    // Opted in: loopback, by name as by address, and its notifications delivered; other private
    // networks stay refused, and a metadata address inside an opted-in network too.
    let toml = "push_allowed_networks = [\"127.0.0.0/8\", \"100.64.0.0/10\"]\n";
    let agent = Agent::start("push-addresses-opted-in", toml).await;
    let answer = agent.send(&alice, "report", None, Some(&by_name)).await;
    assert_eq!(answer["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    assert!(hook.requests_reach(3, TIMEOUT).await, "the opted-in webhook got {} notifications", hook.requests());
    let task = agent.send(&alice, "ask", None, None).await["id"].as_str().unwrap().to_owned();
    for url in ["http://10.1.2.3/hook", "http://100.100.100.200/latest/meta-data/", "http://[::1]:9/hook"] {
        let answer = agent.rpc(&alice, "CreateTaskPushNotificationConfig", json!({"taskId": task, "url": url})).await;
        assert_eq!(answer["error"]["code"], -32602, "{url}: {answer}");
    }
    let opted = agent
        .rpc(&alice, "CreateTaskPushNotificationConfig", json!({"taskId": task, "url": "http://100.64.0.1/hook"}))
        .await;
    assert_eq!(opted["result"]["url"], "http://100.64.0.1/hook", "{opted}");
    agent.stop().await;
}
