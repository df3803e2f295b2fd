//! `a2a-mesh catalog import` (issue #37), run as a person runs it, against real registries on
//! port 0 and agents serving their cards: the catalogs one registry publishes (its AI Catalog as
//! a file, its ARD manifest by URL) register their agents with another, each read from its own
//! card; a catalog whose agents cannot all be registered is reported entry by entry and the
//! command exits non-zero.

use std::process::Output;

use axum::Router;
use axum::routing::get;
use registry::{Application, RegistryConfig};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

const CARD_PATH: &str = "/.well-known/agent-card.json";

/// A registry on port 0 over a SQLite file of its own, stopped when dropped.
struct Registry {
    url: String,
    _stop: oneshot::Sender<()>,
    _data: tempfile::TempDir,
}

impl Registry {
    async fn start() -> Self {
        let data = tempfile::tempdir().unwrap();
        let config = RegistryConfig {
            port: 0,
            database_url: format!("sqlite://{}", data.path().join("registry.db").display()),
            ..RegistryConfig::default()
        };
        let app = Application::build(&config).await.unwrap();
        let url = app.url();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        Self { url, _stop: stop, _data: data }
    }

    async fn get(&self, path: &str) -> Value {
        reqwest::get(format!("{}{path}", self.url)).await.unwrap().json().await.unwrap()
    }

    async fn register_by_card(&self, card_url: &str) {
        let response = reqwest::Client::new()
            .post(format!("{}/register", self.url))
            .json(&json!({"agent_card_url": card_url}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.text().await.unwrap());
    }

    /// The registered agents' names and card URLs, in name order.
    async fn agents(&self) -> Vec<(String, String)> {
        let listed = self.get("/agents").await;
        let agents = listed["agents"].as_array().unwrap().iter();
        agents
            .map(|a| (a["name"].as_str().unwrap().to_owned(), a["agent_card_url"].as_str().unwrap().to_owned()))
            .collect()
    }
}

/// A standard A2A agent as far as registration sees it: it serves its card named `name`.
async fn card_agent(name: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let card = json!({
        "name": name, "description": "an agent of the catalog test", "version": "1.0.0",
        "supportedInterfaces": [], "capabilities": {},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": format!("{name}-skill"), "name": name, "description": name, "tags": []}]
    });
    let router = Router::new().route(CARD_PATH, get(move || async move { axum::Json(card) }));
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("{base}{CARD_PATH}")
}

/// Runs `a2a-mesh catalog import SOURCE --registry URL` in a directory of its own, with no
/// credential configured (the registries run without authentication).
async fn import(source: &str, registry: &Registry) -> Output {
    let dir = tempfile::tempdir().unwrap();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_a2a-mesh"))
        .args(["catalog", "import", source, "--registry", &registry.url])
        .current_dir(dir.path())
        .env_remove("MESH_CREDENTIAL")
        .env_remove("MESH_AUTH_JWT_HS256_SECRET")
        .env_remove("MESH_AUTH_JWT_HS256_SECRET_FILE")
        .env("RUST_LIB_BACKTRACE", "0")
        .output()
        .await
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn the_catalogs_of_one_registry_register_their_agents_with_another() {
    let (source, target) = (Registry::start().await, Registry::start().await);
    for name in ["alpha", "beta"] {
        source.register_by_card(&card_agent(name).await).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ai-catalog.json");
    std::fs::write(&file, serde_json::to_vec(&source.get("/.well-known/ai-catalog.json").await).unwrap()).unwrap();

    let output = import(file.to_str().unwrap(), &target).await;
    let printed = stdout(&output);
    assert!(output.status.success(), "{printed}{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 3, "{printed}");
    assert!(lines[0].starts_with("registered  alpha  (http://127.0.0.1:"), "{printed}");
    assert!(lines[1].starts_with("registered  beta  (http://127.0.0.1:"), "{printed}");
    assert_eq!(lines[2], "2 registered, 0 failed, 0 skipped");
    assert_eq!(target.agents().await, source.agents().await, "the same agents, at the same cards");
    let imported = target.get("/agents/alpha").await;
    assert_eq!(imported["capabilities"], json!(["alpha-skill"]), "read from its card: {imported}");

    // The ARD manifest, by URL: registering again the same agents changes nothing.
    let output = import(&format!("{}/.well-known/ard.json", source.url), &target).await;
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(stdout(&output).ends_with("2 registered, 0 failed, 0 skipped\n"), "{}", stdout(&output));
    assert_eq!(target.agents().await, source.agents().await);
}

#[tokio::test]
async fn each_entry_is_reported_and_a_failure_makes_the_command_fail() {
    let target = Registry::start().await;
    let live = card_agent("live").await;
    // A port nobody listens on any more: its card cannot be fetched.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = format!("http://{}{CARD_PATH}", closed.local_addr().unwrap());
    drop(closed);
    let catalog = json!({
        "specVersion": "1.0",
        "host": {"displayName": "a catalog of the test"},
        "entries": [
            {"identifier": "urn:air:127.0.0.1:test:live", "displayName": "live",
             "type": "application/a2a-agent-card+json", "url": live},
            {"identifier": "urn:air:127.0.0.1:test:gone", "type": "application/a2a-agent-card+json", "url": gone},
            {"identifier": "urn:air:127.0.0.1:test:inline", "displayName": "inline",
             "type": "application/a2a-agent-card+json", "data": {"name": "inline"}},
            {"identifier": "urn:air:example.com:mcp:weather", "displayName": "weather tools",
             "type": "application/mcp-server-card+json", "url": "https://example.com/mcp/server-card"}
        ]
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("catalog.json");
    std::fs::write(&file, serde_json::to_vec(&catalog).unwrap()).unwrap();

    let output = import(file.to_str().unwrap(), &target).await;
    let printed = stdout(&output);
    assert!(!output.status.success(), "a failed agent fails the command: {printed}");
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 5, "{printed}");
    assert_eq!(lines[0], format!("registered  live  ({live})"));
    assert!(
        lines[1].starts_with("failed      urn:air:127.0.0.1:test:gone: 422 AGENT_CARD_UNREACHABLE"),
        "named by its identifier without a display name, with the registry's refusal: {printed}"
    );
    assert!(lines[2].starts_with("failed      inline: its card is inline (data)"), "{printed}");
    assert!(lines[3].starts_with("skipped     weather tools: not an A2A agent card"), "{printed}");
    assert_eq!(lines[4], "1 registered, 2 failed, 1 skipped");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not every agent of"), "{stderr}");
    assert_eq!(target.agents().await, [("live".to_owned(), live)]);

    // A catalog of a later major version is refused as a whole, nothing registered.
    std::fs::write(&file, serde_json::to_vec(&json!({"specVersion": "2.0", "entries": []})).unwrap()).unwrap();
    let output = import(file.to_str().unwrap(), &target).await;
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("specVersion 2.0"), "{output:?}");
}
