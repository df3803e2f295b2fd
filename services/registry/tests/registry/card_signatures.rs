//! Signed agent cards (A2A 1.0 §8.4) at registration, on real servers on port 0: with
//! `require_signed_cards`, the registry admits a card signed by a trusted key, by this project's
//! signer or by the official Python SDK's (`a2a.utils.signing`), and refuses an unsigned card, a
//! card changed after signing and a card signed by a key it does not trust. The SDK's verifier
//! accepts a card this project signed.
//!
//! The SDK runs on the Python named by `MESH_A2A_PYTHON` (`.ci/run` builds its virtualenv with
//! the `signing` extra); without it the SDK half says why it skips, and under CI it fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use mesh_auth::{CardSigner, CardSigningKey, JwtPublicKey, KeyAlgorithm};
use mesh_protocol::a2a::v1::AgentCard;
use registry::{Application, RegistryConfig};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/auth/testdata").join(name)
}

fn trusted(kid: &str, algorithm: KeyAlgorithm, file: &str) -> JwtPublicKey {
    JwtPublicKey { kid: Some(kid.into()), algorithm, pem_file: testdata(file) }
}

/// An agent whose card is whatever the test puts in it.
struct CardHost {
    url: String,
    card: Arc<Mutex<Value>>,
}

impl CardHost {
    async fn start() -> Self {
        let card = Arc::new(Mutex::new(Value::Null));
        let served = card.clone();
        let router = Router::new()
            .route(
                "/.well-known/agent-card.json",
                get(move || {
                    let card = served.lock().unwrap().clone();
                    async move { axum::Json(card) }
                }),
            )
            .route("/health", get(|| async { StatusCode::OK }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Self { url, card }
    }

    /// A 1.0 card of agent `name` served here, as this project renders cards.
    fn card(&self, name: &str) -> Value {
        json!({
            "name": name, "description": "Finds documents — für alle", "version": "1.0.0",
            "supportedInterfaces": [{"url": self.url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {"streaming": true, "pushNotifications": false},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["application/json"],
            "skills": [{"id": "search", "name": "Search", "description": "Searches the corpus", "tags": ["search"]}]
        })
    }

    fn serve(&self, card: Value) {
        *self.card.lock().unwrap() = card;
    }
}

async fn start_registry(data: &Path, require_signed_cards: bool) -> String {
    let config = RegistryConfig {
        port: 0,
        database_url: format!("sqlite://{}", data.join("registry.db").display()),
        trusted_card_keys: vec![
            trusted("mesh-es", KeyAlgorithm::ES256, "card-es256.pub.pem"),
            trusted("mesh-ed", KeyAlgorithm::EdDSA, "card-ed25519.pub.pem"),
        ],
        require_signed_cards,
        ..RegistryConfig::default()
    };
    let app = Application::build(&config).await.unwrap();
    let url = app.url();
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    url
}

/// Registers `name` at `url`; the status and the error code (empty on success).
async fn register(registry: &str, name: &str, url: &str) -> (StatusCode, String) {
    let body = json!({"name": name, "url": url, "capabilities": ["search"]});
    let response = reqwest::Client::new().post(format!("{registry}/register")).json(&body).send().await.unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    (status, body["error_code"].as_str().unwrap_or_default().to_owned())
}

fn signer(kid: &str, algorithm: KeyAlgorithm, file: &str) -> CardSigner {
    CardSigner::load(&CardSigningKey { kid: kid.into(), algorithm, pem_file: testdata(file) }).unwrap()
}

/// Signs `card` as this project's agents do (`auth.card_signing_key`).
fn signed_here(card: Value, signer: &CardSigner) -> Value {
    let card: AgentCard = serde_json::from_value(card).unwrap();
    serde_json::to_value(mesh_a2a_server::sign_card(card, signer).unwrap()).unwrap()
}

#[tokio::test]
async fn only_cards_signed_by_a_trusted_key_are_admitted() {
    let data = tempfile::tempdir().unwrap();
    let registry = start_registry(data.path(), true).await;
    let host = CardHost::start().await;

    host.serve(host.card("unsigned_agent"));
    assert_eq!(
        register(&registry, "unsigned_agent", &host.url).await,
        (StatusCode::UNPROCESSABLE_ENTITY, "AGENT_CARD_SIGNATURE_INVALID".into())
    );

    for (kid, algorithm, key) in [
        ("mesh-es", KeyAlgorithm::ES256, "card-es256.key.pem"),
        ("mesh-ed", KeyAlgorithm::EdDSA, "card-ed25519.key.pem"),
    ] {
        let name = format!("signed_{kid}").replace('-', "_");
        let signed = signed_here(host.card(&name), &signer(kid, algorithm, key));
        host.serve(signed.clone());
        assert_eq!(register(&registry, &name, &host.url).await, (StatusCode::OK, String::new()), "{kid}");

        let mut changed = signed;
        changed["skills"][0]["description"] = "Sends your documents elsewhere".into();
        host.serve(changed);
        assert_eq!(
            register(&registry, &name, &host.url).await.1,
            "AGENT_CARD_SIGNATURE_INVALID",
            "{kid}: changed after signing"
        );
    }

    // A signature by a key the registry does not trust, under a kid it does trust.
    let impostor = signed_here(host.card("impostor"), &signer("mesh-es", KeyAlgorithm::EdDSA, "card-ed25519.key.pem"));
    host.serve(impostor);
    assert_eq!(register(&registry, "impostor", &host.url).await.1, "AGENT_CARD_SIGNATURE_INVALID");
}

#[tokio::test]
async fn with_signatures_not_required_an_unsigned_card_is_admitted_and_a_bad_signature_is_not() {
    let data = tempfile::tempdir().unwrap();
    let registry = start_registry(data.path(), false).await;
    let host = CardHost::start().await;
    host.serve(host.card("unsigned_agent"));
    assert_eq!(register(&registry, "unsigned_agent", &host.url).await, (StatusCode::OK, String::new()));
    let impostor = signed_here(host.card("impostor"), &signer("mesh-es", KeyAlgorithm::EdDSA, "card-ed25519.key.pem"));
    host.serve(impostor);
    assert_eq!(register(&registry, "impostor", &host.url).await.1, "AGENT_CARD_SIGNATURE_INVALID");
}

#[test]
fn signed_cards_need_keys_and_card_fetches() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let data = tempfile::tempdir().unwrap();
    for config in [
        RegistryConfig { require_signed_cards: true, ..RegistryConfig::default() },
        RegistryConfig {
            require_signed_cards: true,
            verify_registrations: false,
            trusted_card_keys: vec![trusted("mesh-es", KeyAlgorithm::ES256, "card-es256.pub.pem")],
            ..RegistryConfig::default()
        },
    ] {
        let config = RegistryConfig {
            port: 0,
            database_url: format!("sqlite://{}", data.path().join("r.db").display()),
            ..config
        };
        let Err(error) = runtime.block_on(Application::build(&config)) else { panic!("started without what it needs") };
        assert!(error.to_string().contains("require_signed_cards"), "{error}");
    }
}

/// Runs `tests/interop/card_signing.py` with `args`, `card` on its standard input; its output
/// when it succeeds.
async fn sdk(python: &str, args: &[&str], card: &Value) -> Result<String, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/card_signing.py");
    let mut child = tokio::process::Command::new(python)
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(card.to_string().as_bytes()).await.unwrap();
    let output = child.wait_with_output().await.unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() { Ok(text) } else { Err(String::from_utf8_lossy(&output.stderr).into_owned()) }
}

#[tokio::test]
async fn cards_signed_by_the_python_sdk_verify_here_and_ours_verify_there() {
    let Some(python) = mesh_test_support::a2a_sdk_python() else { return };
    let data = tempfile::tempdir().unwrap();
    let registry = start_registry(data.path(), true).await;
    let host = CardHost::start().await;
    let key = testdata("card-es256.key.pem");

    let signed =
        sdk(&python, &["sign", key.to_str().unwrap(), "mesh-es", "ES256"], &host.card("sdk_signed")).await.unwrap();
    let signed: Value = serde_json::from_str(&signed).unwrap();
    assert_eq!(signed["signatures"].as_array().map(Vec::len), Some(1), "{signed}");
    host.serve(signed.clone());
    assert_eq!(register(&registry, "sdk_signed", &host.url).await, (StatusCode::OK, String::new()));
    let mut changed = signed;
    changed["description"] = "Changed".into();
    host.serve(changed);
    assert_eq!(register(&registry, "sdk_signed", &host.url).await.1, "AGENT_CARD_SIGNATURE_INVALID");

    let public = testdata("card-es256.pub.pem");
    let ours = signed_here(host.card("ours"), &signer("mesh-es", KeyAlgorithm::ES256, "card-es256.key.pem"));
    sdk(&python, &["verify", public.to_str().unwrap(), "ES256"], &ours).await.expect("the SDK verifies our signature");
    let mut tampered = ours;
    tampered["name"] = "someone_else".into();
    assert!(sdk(&python, &["verify", public.to_str().unwrap(), "ES256"], &tampered).await.is_err());
}
