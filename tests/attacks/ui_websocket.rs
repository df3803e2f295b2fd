//! Issue #34, finding 3: the UI agent's WebSocket must not grow without bound. Attacked: the
//! handshake `GET /ws?agent=&instance=` naming agents and instances nobody runs, many sockets of
//! one tenant and in all, oversize messages and message floods. What must hold: a refused
//! handshake (a JSON body: 400 or 404 for a bad name, 429 over the tenant's socket cap, 503 over
//! the cap in all) leaves no topic, participant or conversation behind; a conversation is written
//! at its first message, not at the handshake; the sockets of one topic share one participant,
//! which ends with the last of them; a message over the size cap closes the socket unstored; a
//! socket's messages are read no faster than its rate allows.
//!
//! A real registry and UI agent on port 0 with authentication on; the agent the sockets talk to is
//! a name registered in the registry (`echo`), whose topic the UI agent writes to.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use mesh_auth::{AuthConfig, Role};
use mesh_bus::{BusError, ConversationBus, LogBus};
use mesh_docmem::{Docmem, DocmemError};
use registry::{Application, RegistryConfig};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use ui_agent::{UiAgent, UiAgentConfig};

use crate::secured::{SECRET, token};

/// The registered agent the sockets name.
pub(crate) const AGENT: &str = "echo";
const WAIT_DEADLINE: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_millis(50);

pub(crate) type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A registry with [`AGENT`] registered and a UI agent pointed at it, on one SQLite folder.
pub(crate) struct Ui {
    pub url: String,
    pub docmem: Docmem,
    pub bus_url: String,
    http: reqwest::Client,
    stops: Vec<oneshot::Sender<()>>,
    runs: Vec<JoinHandle<()>>,
    _data: tempfile::TempDir,
}

impl Ui {
    /// `settings`: the UI agent's `MESH_UI_AGENT_*` variables, without the prefix, as an
    /// operator would set them.
    pub(crate) async fn start(settings: &[(&str, &str)]) -> Self {
        let data = tempfile::tempdir().unwrap();
        let sqlite = |file: &str| format!("sqlite://{}", data.path().join(file).display());
        let registry = Application::build(&RegistryConfig {
            port: 0,
            database_url: sqlite("registry.db"),
            // The registered name is served by nobody: no card to fetch.
            verify_registrations: false,
            auth: AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() },
            ..RegistryConfig::default()
        })
        .await
        .unwrap();
        let registry_url = registry.url();
        let bus_url = sqlite("bus.db");
        let ui_credential = token("ui", "", &[Role::Agent]);
        let env: HashMap<String, String> = [
            ("PORT", "0"),
            ("SHUTDOWN_UNREADY_MS", "0"),
            ("BUS__DATABASE_URL", bus_url.as_str()),
            ("AUTH__JWT_HS256_SECRET", SECRET),
            ("AUTH__CREDENTIAL", ui_credential.as_str()),
            ("REGISTRY_URL", registry_url.as_str()),
        ]
        .into_iter()
        .chain(settings.iter().copied())
        .map(|(key, value)| (format!("{}_{key}", ui_agent::ENV_PREFIX), value.to_owned()))
        .collect();
        let config: UiAgentConfig =
            mesh_config::ConfigLoader::new(ui_agent::ENV_PREFIX, None).with_env(env).load().unwrap();
        let ui = UiAgent::build(&config).await.unwrap();
        let url = ui.url().to_owned();
        let (stop_registry, registry_stopped) = oneshot::channel::<()>();
        let (stop_ui, ui_stopped) = oneshot::channel::<()>();
        let runs = vec![
            tokio::spawn(async move {
                registry.run_until_stopped(until(registry_stopped)).await.unwrap();
            }),
            tokio::spawn(async move {
                ui.run_until_stopped(until(ui_stopped)).await.unwrap();
            }),
        ];
        let http = reqwest::Client::new();
        let registered = http
            .post(format!("{registry_url}/register"))
            .bearer_auth(token(AGENT, "", &[Role::Agent]))
            .json(&json!({"name": AGENT, "url": "http://127.0.0.1:9", "capabilities": ["echo"]}))
            .send()
            .await
            .unwrap();
        assert!(registered.status().is_success(), "{}", registered.text().await.unwrap());
        let docmem = Docmem::open(&bus_url).await.unwrap();
        Self { url, docmem, bus_url, http, stops: vec![stop_ui, stop_registry], runs, _data: data }
    }

    pub(crate) fn socket_url(&self, query: &str) -> String {
        format!("{}/ws?{query}", self.url.replacen("http://", "ws://", 1))
    }

    /// The `bus` component of the UI agent's `/health`.
    pub(crate) async fn bus_health(&self) -> Value {
        let health: Value = self.http.get(format!("{}/health", self.url)).send().await.unwrap().json().await.unwrap();
        health["components"]["bus"].clone()
    }

    /// Waits until the UI agent reports `sockets` open sockets and `participants` participants.
    pub(crate) async fn wait_for_counts(&self, sockets: u64, participants: u64) {
        let deadline = Instant::now() + WAIT_DEADLINE;
        loop {
            let bus = self.bus_health().await;
            if bus["open_sockets"] == sockets && bus["participants"] == participants {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "expected {sockets} open sockets and {participants} participants, the UI agent reports {bus}"
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    pub(crate) async fn stop(mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        for run in self.runs.drain(..) {
            run.await.unwrap();
        }
    }
}

async fn until(stop: oneshot::Receiver<()>) {
    let _ = stop.await;
}

/// Opens a socket at `url` as `bearer` with the extra `headers`; returns it and the conversation
/// the upgrade names, or the refusal's status and JSON body.
pub(crate) async fn handshake(
    url: &str,
    bearer: &str,
    headers: &[(&str, &str)],
) -> Result<(Socket, String), (StatusCode, Value)> {
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {bearer}").parse().unwrap());
    for (name, value) in headers {
        request.headers_mut().insert(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, response)) => {
            let id = response.headers()[ui_agent::WS_CONVERSATION_HEADER].to_str().unwrap().to_owned();
            Ok((socket, id))
        }
        Err(WsError::Http(response)) => {
            let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
            let body = response.body().as_deref().unwrap_or_default();
            Err((status, serde_json::from_slice(body).unwrap_or_else(|_| Value::String(format!("{body:?}")))))
        }
        Err(error) => panic!("cannot open {url}: {error}"),
    }
}

/// The refusal of a handshake that must be refused: its status and JSON body.
pub(crate) async fn refusal(url: &str, bearer: &str, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    match handshake(url, bearer, headers).await {
        Ok(_) => panic!("{url} {headers:?}: the socket was opened (101), not refused"),
        Err(refused) => refused,
    }
}

/// The messages stored under conversation `id` (none while it does not exist).
async fn stored_messages(docmem: &Docmem, id: &str) -> Vec<String> {
    match docmem.read_tree(id).await {
        Ok(nodes) => nodes.into_iter().filter(|n| n.parent_id.is_some()).map(|n| n.content).collect(),
        Err(DocmemError::NotFound(_)) => Vec::new(),
        Err(error) => panic!("reading {id}: {error}"),
    }
}

async fn conversations(docmem: &Docmem) -> usize {
    docmem.list_roots(None, None, None, 200).await.unwrap().roots.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_naming_no_running_agent_leave_no_topic_participant_or_conversation() {
    let ui = Ui::start(&[]).await;
    let alice = token("alice", "acme", &[Role::User]);
    let refused = |query: String| {
        let url = ui.socket_url(&query);
        let alice = alice.clone();
        async move { refusal(&url, &alice, &[]).await }
    };
    for i in 0..20 {
        let (status, body) = refused(format!("agent={AGENT}&instance=x{i}")).await;
        assert_eq!((status, body["error_code"].as_str()), (StatusCode::NOT_FOUND, Some("AGENT_NOT_FOUND")), "{body}");
    }
    let (status, body) = refused("agent=nobody".into()).await;
    assert_eq!((status, body["error_code"].as_str()), (StatusCode::NOT_FOUND, Some("AGENT_NOT_FOUND")), "{body}");
    for query in [format!("agent={AGENT}&instance=a%2Fb"), format!("agent={AGENT}&instance="), "agent=".to_owned()] {
        let (status, body) = refused(query.clone()).await;
        assert_eq!(
            (status, body["error_code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("REQUEST_INVALID")),
            "{query}: {body}"
        );
    }

    let bus = LogBus::open(&ui.bus_url, None).await.unwrap();
    for topic in ["echo-x0", "echo-x19", "nobody-1"] {
        assert!(matches!(bus.replay(topic).await, Err(BusError::UnknownTopic(_))), "topic {topic} was created");
    }
    assert_eq!(conversations(&ui.docmem).await, 0, "a refused handshake wrote a conversation");
    ui.wait_for_counts(0, 0).await;

    // The agent on the UI agent's own instance, and on an instance it runs on (whose topic it
    // made when it started), is reachable.
    let (own, _) = handshake(&ui.socket_url(&format!("agent={AGENT}")), &alice, &[]).await.unwrap();
    bus.ensure_topic("echo-pod-7").await.unwrap();
    let (other, _) = handshake(&ui.socket_url(&format!("agent={AGENT}&instance=pod-7")), &alice, &[]).await.unwrap();
    ui.wait_for_counts(2, 2).await;
    drop((own, other));
    ui.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_is_written_at_its_first_message_not_at_the_handshake() {
    let ui = Ui::start(&[]).await;
    let alice = token("alice", "acme", &[Role::User]);
    let (mut socket, id) = handshake(&ui.socket_url(&format!("agent={AGENT}")), &alice, &[]).await.unwrap();
    assert!(matches!(ui.docmem.get(&id).await, Err(DocmemError::NotFound(_))), "{id} written at the handshake");
    assert_eq!(conversations(&ui.docmem).await, 0);

    socket.send(Message::Text("hello".into())).await.unwrap();
    let deadline = Instant::now() + WAIT_DEADLINE;
    while stored_messages(&ui.docmem, &id).await.is_empty() {
        assert!(Instant::now() < deadline, "the first message never reached docmem");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    let root = ui.docmem.get(&id).await.unwrap();
    assert_eq!((root.parent_id, root.tenant.as_str()), (None, "acme"), "the conversation named at the handshake");
    assert_eq!(stored_messages(&ui.docmem, &id).await, ["hello"]);
    socket.close(None).await.unwrap();
    ui.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sockets_of_one_topic_share_one_participant_which_ends_with_the_last() {
    let ui = Ui::start(&[]).await;
    let alice = token("alice", "acme", &[Role::User]);
    let url = ui.socket_url(&format!("agent={AGENT}"));
    let mut sockets = Vec::new();
    for _ in 0..3 {
        sockets.push(handshake(&url, &alice, &[]).await.unwrap().0);
    }
    ui.wait_for_counts(3, 1).await;
    sockets.pop().unwrap().close(None).await.unwrap();
    ui.wait_for_counts(2, 1).await;
    for mut socket in sockets {
        socket.close(None).await.unwrap();
    }
    ui.wait_for_counts(0, 0).await;
    ui.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_sockets_are_capped_per_tenant_and_in_all() {
    let ui = Ui::start(&[("WS_SOCKETS_PER_TENANT_MAX", "2"), ("WS_SOCKETS_MAX", "3")]).await;
    let alice = token("alice", "acme", &[Role::User]);
    let bob = token("bob", "globex", &[Role::User]);
    let url = ui.socket_url(&format!("agent={AGENT}"));
    let mut alices = vec![handshake(&url, &alice, &[]).await.unwrap().0, handshake(&url, &alice, &[]).await.unwrap().0];

    let (status, body) = refusal(&url, &alice, &[]).await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("TENANT_SOCKETS_FULL")),
        "{body}"
    );
    let (mut bobs, _) = handshake(&url, &bob, &[]).await.expect("another tenant has sockets left");
    let (status, body) = refusal(&url, &bob, &[]).await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("SOCKETS_FULL")),
        "{body}"
    );
    ui.wait_for_counts(3, 1).await;

    // A closed socket gives its place back.
    alices.pop().unwrap().close(None).await.unwrap();
    ui.wait_for_counts(2, 1).await;
    alices.push(handshake(&url, &alice, &[]).await.expect("the place freed").0);
    bobs.close(None).await.unwrap();
    for mut socket in alices {
        socket.close(None).await.unwrap();
    }
    ui.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_size_cap_closes_the_socket_unstored() {
    let ui = Ui::start(&[("WS_MESSAGE_BYTES_MAX", "65536")]).await;
    let alice = token("alice", "acme", &[Role::User]);
    let (mut socket, id) = handshake(&ui.socket_url(&format!("agent={AGENT}")), &alice, &[]).await.unwrap();
    let small = "a".repeat(1_024);
    socket.send(Message::Text(small.clone().into())).await.unwrap();
    let deadline = Instant::now() + WAIT_DEADLINE;
    while stored_messages(&ui.docmem, &id).await.is_empty() {
        assert!(Instant::now() < deadline, "the small message never reached docmem");
        tokio::time::sleep(POLL_INTERVAL).await;
    }

    // A megabyte: the socket is closed as too big (1009), and nothing of it is written.
    let _ = socket.send(Message::Text("b".repeat(1 << 20).into())).await;
    let closed = tokio::time::timeout(WAIT_DEADLINE, async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| f.code),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .expect("the socket was not closed");
    assert_eq!(closed, Some(CloseCode::Size));
    ui.wait_for_counts(0, 0).await;
    assert_eq!(stored_messages(&ui.docmem, &id).await, [small]);
    ui.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sockets_messages_are_read_no_faster_than_its_rate() {
    const RATE_PER_S: f64 = 2.0;
    const BURST: f64 = 2.0;
    const SENT: usize = 8;
    let ui = Ui::start(&[("WS_MESSAGES_PER_S", "2"), ("WS_MESSAGES_BURST", "2")]).await;
    let alice = token("alice", "acme", &[Role::User]);
    let (mut socket, id) = handshake(&ui.socket_url(&format!("agent={AGENT}")), &alice, &[]).await.unwrap();
    let started = Instant::now();
    for i in 0..SENT {
        socket.send(Message::Text(format!("message {i}").into())).await.unwrap();
    }
    // However slow the machine, the UI agent may not have taken more than the burst and what the
    // rate allows since: a slower machine only stores fewer.
    let deadline = Instant::now() + WAIT_DEADLINE;
    loop {
        let stored = stored_messages(&ui.docmem, &id).await.len();
        let allowed = BURST + RATE_PER_S * started.elapsed().as_secs_f64() + 1.0;
        assert!(
            stored as f64 <= allowed,
            "{stored} messages stored after {:?}; the rate allows {allowed:.1}",
            started.elapsed()
        );
        if stored == SENT {
            break;
        }
        assert!(Instant::now() < deadline, "only {stored} of {SENT} messages were stored: throttled messages are lost");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    socket.close(None).await.unwrap();
    ui.stop().await;
}
