//! The registry's outbound address policy (SSRF) on real servers on port 0: redirects are not
//! followed, names are checked on what they resolve to, the odd spellings of the metadata
//! address are refused, refusals do not echo transport details or fetched content, and the
//! registrations are capped.
//!
//! Names resolve through a fixed table ([`StaticLookup`]) handed to the registry's guarded
//! client, in place of the system resolver: it stands for a DNS server answering
//! `metadata.test` with 169.254.169.254, which no test machine has. The check under test is the
//! production one (the `reqwest` resolver filtering resolved addresses); only the source of the
//! answers differs. Agents bind 127.0.0.2 (loopback, like all of 127.0.0.0/8 on Linux) where a
//! test needs an allowed address apart from 127.0.0.1.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use mesh_client::{AddressPolicy, HttpClient, OutboundGuard, StaticLookup};
use registry::{Application, RegistryConfig};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Serves `router` on `ip`, port 0; returns the base URL.
async fn serve_on(ip: &str, router: Router) -> String {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

fn card(name: &str) -> Value {
    json!({
        "name": name, "description": "test agent", "version": "1.0.0",
        "supportedInterfaces": [], "capabilities": {},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["application/json"],
        "skills": [{"id": "search", "name": "Search", "description": "search", "tags": []}]
    })
}

/// An agent serving a card naming `name` and a `/health`; counts card requests in `hits`.
fn agent(name: &str, hits: Arc<AtomicUsize>) -> Router {
    let card = card(name);
    Router::new()
        .route(
            "/.well-known/agent-card.json",
            get(move || {
                hits.fetch_add(1, Ordering::SeqCst);
                let card = card.clone();
                async move { axum::Json(card) }
            }),
        )
        .route("/health", get(|| async { StatusCode::OK }))
}

struct Registry {
    url: String,
    http: reqwest::Client,
    stop: oneshot::Sender<()>,
    _data: tempfile::TempDir,
}

impl Registry {
    async fn start(allowed: &[&str], hosts: &[(&str, &[&str])], adjust: impl FnOnce(&mut RegistryConfig)) -> Self {
        let data = tempfile::tempdir().unwrap();
        let mut config = RegistryConfig {
            port: 0,
            database_url: format!("sqlite://{}", data.path().join("registry.db").display()),
            allowed_networks: allowed.iter().map(|n| n.to_string()).collect(),
            card_fetch_timeout_ms: 2_000,
            ..RegistryConfig::default()
        };
        adjust(&mut config);
        let hosts = hosts.iter().map(|(name, ips)| {
            (name.to_string(), ips.iter().map(|ip| ip.parse::<IpAddr>().unwrap()).collect::<Vec<_>>())
        });
        let policy = AddressPolicy::from_networks(&config.allowed_networks).unwrap();
        let guard = OutboundGuard::new(policy, Arc::new(StaticLookup::new(hosts)));
        let app = Application::build_with_client(&config, HttpClient::guarded(guard).unwrap()).await.unwrap();
        let url = app.url();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
        Self { url, http, stop, _data: data }
    }

    /// Registers `name` at `url` with the default endpoints; the status and the error code
    /// and message (empty on success).
    async fn register(&self, name: &str, url: &str) -> (u16, String, String) {
        self.register_body(json!({"name": name, "url": url, "capabilities": ["search"]})).await
    }

    async fn register_body(&self, body: Value) -> (u16, String, String) {
        let response = self.http.post(format!("{}/register", self.url)).json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body: Value = response.json().await.unwrap();
        let text = |key: &str| body[key].as_str().unwrap_or_default().to_owned();
        (status, text("error_code"), text("error_message"))
    }
}

#[tokio::test]
async fn a_card_redirect_to_loopback_is_not_followed_when_loopback_is_not_allowed() {
    let registry = Registry::start(&["127.0.0.2/32"], &[], |_| {}).await;
    let internal_hits = Arc::new(AtomicUsize::new(0));
    let internal = serve_on("127.0.0.1", agent("internal", internal_hits.clone())).await;
    let target = format!("{internal}/.well-known/agent-card.json");
    let redirector = Router::new().route(
        "/.well-known/agent-card.json",
        get(move || {
            let target = target.clone();
            async move { (StatusCode::FOUND, [(header::LOCATION, target)]).into_response() }
        }),
    );
    let redirecting = serve_on("127.0.0.2", redirector).await;

    let (status, code, message) = registry.register("internal", &redirecting).await;
    assert_eq!((status, code.as_str()), (422, "AGENT_CARD_UNREACHABLE"), "{message}");
    // Loopback itself, asked directly, is refused before anything is sent.
    let (status, code, _) = registry.register("internal", &internal).await;
    assert_eq!((status, code.as_str()), (422, "AGENT_ADDRESS_REFUSED"));
    assert_eq!(internal_hits.load(Ordering::SeqCst), 0, "no request reached the loopback server");

    // What the policy allows registers as usual.
    let allowed_hits = Arc::new(AtomicUsize::new(0));
    let allowed = serve_on("127.0.0.2", agent("allowed", allowed_hits.clone())).await;
    assert_eq!(registry.register("allowed", &allowed).await.0, 200);
    assert_eq!(allowed_hits.load(Ordering::SeqCst), 1);
    let _ = registry.stop.send(());
}

#[tokio::test]
async fn a_name_resolving_to_the_metadata_address_is_refused_and_only_allowed_addresses_are_dialled() {
    let hits = Arc::new(AtomicUsize::new(0));
    let agent_url = serve_on("127.0.0.1", agent("mixed", hits.clone())).await;
    let port = agent_url.rsplit(':').next().unwrap().to_owned();
    let registry = Registry::start(
        &[],
        &[("metadata.test", &["169.254.169.254"]), ("mixed.test", &["169.254.169.254", "127.0.0.1"])],
        |_| {},
    )
    .await;
    let unverified =
        Registry::start(&[], &[("metadata.test", &["169.254.169.254"])], |c| c.verify_registrations = false).await;
    for registry in [&registry, &unverified] {
        let (status, code, message) = registry.register("metadata", &format!("http://metadata.test:{port}")).await;
        assert_eq!((status, code.as_str()), (422, "AGENT_ADDRESS_REFUSED"), "{message}");
        assert!(!message.contains("169.254"), "what the name resolves to is not told: {message}");
    }
    let _ = unverified.stop.send(());
    // A name with a refused and an allowed address is served from the allowed one only.
    let (status, code, message) = registry.register("mixed", &format!("http://mixed.test:{port}")).await;
    assert_eq!(status, 200, "{code}: {message}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let _ = registry.stop.send(());
}

#[tokio::test]
async fn ipv4_mapped_and_odd_spellings_of_the_metadata_address_are_refused() {
    for verify in [true, false] {
        let registry = Registry::start(&[], &[], |c| c.verify_registrations = verify).await;
        for url in [
            "http://169.254.169.254/",
            "http://[::ffff:169.254.169.254]:8080",
            "http://[::ffff:a9fe:a9fe]/",
            "http://[fe80::1]:8000/",
            "http://2852039166/",
            "http://0xa9fea9fe:80/",
            "http://0251.0376.0251.0376/",
            "http://0.0.0.0:8000/",
        ] {
            let (status, code, message) = registry.register("probe", url).await;
            assert_eq!((status, code.as_str()), (422, "AGENT_ADDRESS_REFUSED"), "{url} (verify={verify}): {message}");
        }
        let _ = registry.stop.send(());
    }
}

#[tokio::test]
async fn refusals_do_not_echo_transport_details_or_fetched_content() {
    let registry = Registry::start(&[], &[], |_| {}).await;
    // Nothing listens on a port just released.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let (status, code, message) = registry.register("gone", &closed).await;
    assert_eq!((status, code.as_str()), (422, "AGENT_CARD_UNREACHABLE"));
    for detail in ["refused", "tcp", "os error", "connect", "error sending"] {
        assert!(!message.to_lowercase().contains(detail), "{message:?} tells {detail:?}");
    }
    // An internal JSON service is not a card of the name asked for; what it holds stays unsaid.
    let secret = serve_on("127.0.0.1", agent("s3cr3t-internal-name", Arc::default())).await;
    let (status, code, message) = registry.register("probe", &secret).await;
    assert_eq!((status, code.as_str()), (422, "AGENT_CARD_MISMATCH"));
    assert!(!message.contains("s3cr3t"), "{message}");
    let not_a_card = Router::new()
        .route("/.well-known/agent-card.json", get(|| async { axum::Json(json!({"password": "hunter2"})) }));
    let not_a_card = serve_on("127.0.0.1", not_a_card).await;
    let (status, code, message) = registry.register("probe", &not_a_card).await;
    assert_eq!((status, code.as_str()), (422, "AGENT_CARD_INVALID"));
    assert!(!message.contains("hunter2") && !message.contains("password"), "{message}");
    let _ = registry.stop.send(());
}

#[tokio::test]
async fn endpoints_off_the_registrants_origin_are_refused() {
    let registry = Registry::start(&[], &[], |c| c.verify_registrations = false).await;
    for (field, value) in [
        ("health_endpoint", "http://169.254.169.254/latest/meta-data/"),
        ("process_endpoint", "http://127.0.0.1:9/tasks/send"),
        ("agent_card_url", "http://other.example/card.json"),
    ] {
        let mut body = json!({"name": "a", "url": "http://127.0.0.1:8002", "capabilities": []});
        body[field] = json!(value);
        let (status, code, message) = registry.register_body(body).await;
        assert_eq!((status, code.as_str()), (400, "REGISTRATION_INVALID"), "{field}");
        assert!(message.contains(field) && message.contains("origin"), "{message}");
    }
    let _ = registry.stop.send(());
}

#[tokio::test]
async fn registrations_are_capped_in_total_and_known_names_may_re_register() {
    let registry = Registry::start(&[], &[], |c| {
        c.verify_registrations = false;
        c.registrations_max = 2;
    })
    .await;
    assert_eq!(registry.register("a", "http://127.0.0.1:9001").await.0, 200);
    assert_eq!(registry.register("b", "http://127.0.0.1:9002").await.0, 200);
    let (status, code, _) = registry.register("c", "http://127.0.0.1:9003").await;
    assert_eq!((status, code.as_str()), (409, "REGISTRATIONS_FULL"));
    assert_eq!(registry.register("a", "http://127.0.0.1:9011").await.0, 200, "a known name re-registers");
    let _ = registry.stop.send(());
}
