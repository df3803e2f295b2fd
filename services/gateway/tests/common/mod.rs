//! A mesh for the gateway's tests, every part a real process or server on port 0: a registry
//! with authentication, the gateway in front of it, and official-SDK agents registered with it
//! (Python: `tests/interop/gateway_agent.py`; JS: `tests/js-agent/agent.mjs`).

#![allow(dead_code)] // Each test binary uses its own part of this.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use gateway::{Gateway, GatewayConfig};
use mesh_auth::{AuthConfig, Claims, Role};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The HS256 secret every part verifies tokens with.
pub const SECRET: &str = "gateway-test-secret-of-32-bytes-at-least";
/// Longest wait for an SDK agent (Python or JS) to listen, or a client run to end.
const PYTHON_WAIT_S: u64 = 60;

/// A token for `subject` in `tenant` holding `roles`.
pub fn token(subject: &str, tenant: &str, roles: &[Role]) -> String {
    mesh_auth::mint_hs256(SECRET.as_bytes(), &Claims::new(subject, tenant, roles, 600)).unwrap()
}

pub fn interop_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop").join(name)
}

fn auth() -> AuthConfig {
    AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() }
}

/// The registry, the gateway and the SDK agents started so far.
pub struct Mesh {
    pub python: String,
    pub registry: String,
    pub gateway: String,
    pub http: reqwest::Client,
    agents: Vec<Child>,
    _data: tempfile::TempDir,
}

impl Mesh {
    /// A registry and a gateway configured as `tweak` says (its registry, auth and the loopback
    /// network set already).
    pub async fn start(python: String, tweak: impl FnOnce(GatewayConfig) -> GatewayConfig) -> Self {
        let data = tempfile::tempdir().unwrap();
        let config = registry::RegistryConfig {
            port: 0,
            database_url: format!("sqlite://{}", data.path().join("registry.db").display()),
            auth: auth(),
            ..registry::RegistryConfig::default()
        };
        let app = registry::Application::build(&config).await.unwrap();
        let registry = app.url();
        tokio::spawn(app.run_until_stopped(std::future::pending()));
        let config = tweak(GatewayConfig {
            port: 0,
            registry_url: Some(registry.clone()),
            auth: AuthConfig { credential_self_issued_ttl_s: Some(600), ..auth() },
            upstream_allowed_networks: vec!["127.0.0.0/8".into()],
            ..GatewayConfig::default()
        });
        let gateway = Gateway::build(&config).await.unwrap();
        let url = gateway.url().to_owned();
        tokio::spawn(gateway.run_until_stopped(std::future::pending()));
        Self { python, registry, gateway: url, http: reqwest::Client::new(), agents: Vec::new(), _data: data }
    }

    /// Starts the Python SDK agent `name` (calling through the gateway with an agent token of its
    /// own) and registers it with `capabilities`; its URL, and its index for [`Mesh::kill`].
    pub async fn agent(&mut self, name: &str, capabilities: &[&str]) -> (String, usize) {
        let mut command = Command::new(&self.python);
        command.arg(interop_script("gateway_agent.py")).args([
            "--name",
            name,
            "--gateway",
            &self.gateway,
            "--token",
            &token(name, "", &[Role::Agent]),
        ]);
        self.start_agent(command, name, capabilities).await
    }

    /// Starts the official JS SDK agent `script` (`tests/js-agent/agent.mjs`) as `name` and
    /// registers it with `capabilities`, as [`Mesh::agent`] does.
    pub async fn js_agent(&mut self, script: &str, name: &str, capabilities: &[&str]) -> (String, usize) {
        let mut command = Command::new("node");
        command.arg(script).args(["--name", name]);
        self.start_agent(command, name, capabilities).await
    }

    /// Runs `command`, an agent that prints `PORT <n>` once listening, and registers it as
    /// `name` with `capabilities`.
    async fn start_agent(&mut self, mut command: Command, name: &str, capabilities: &[&str]) -> (String, usize) {
        let mut child =
            command.stdout(Stdio::piped()).kill_on_drop(true).spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = tokio::time::timeout(Duration::from_secs(PYTHON_WAIT_S), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(port) = line.strip_prefix("PORT ") {
                    return port.trim().to_owned();
                }
            }
            panic!("the agent {name} ended before listening")
        })
        .await
        .expect("the agent listens");
        let url = format!("http://127.0.0.1:{port}/");
        let registration = json!({
            "name": name,
            "url": url,
            "capabilities": capabilities,
            // SDK agents serve no /health: the registry polls their card.
            "health_endpoint": "/.well-known/agent-card.json",
            "process_endpoint": "/",
            "agent_card_url": format!("{url}.well-known/agent-card.json"),
        });
        let admin = token("operator", "", &[Role::Admin]);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(PYTHON_WAIT_S);
        // The agent's server may still be starting when it prints its port.
        loop {
            let response = self
                .http
                .post(format!("{}/register", self.registry))
                .bearer_auth(&admin)
                .json(&registration)
                .send()
                .await
                .unwrap();
            if response.status().is_success() {
                break;
            }
            let answer = response.text().await.unwrap_or_default();
            assert!(tokio::time::Instant::now() < deadline, "registering {name} failed: {answer}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.agents.push(child);
        (url, self.agents.len() - 1)
    }

    /// Stops agent `index` and waits until it is gone.
    pub async fn kill(&mut self, index: usize) {
        self.agents[index].kill().await.unwrap();
    }

    /// Runs `tests/interop/gateway_client.py` with `args`; its JSON line.
    pub async fn client(&self, args: &[&str]) -> Value {
        let output = tokio::time::timeout(
            Duration::from_secs(PYTHON_WAIT_S),
            Command::new(&self.python).arg(interop_script("gateway_client.py")).args(args).kill_on_drop(true).output(),
        )
        .await
        .expect("the SDK client ends")
        .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout.lines().last().unwrap_or_default();
        serde_json::from_str(line).unwrap_or_else(|_| {
            panic!("the SDK client printed {stdout:?}; stderr {}", String::from_utf8_lossy(&output.stderr))
        })
    }

    /// A JSON-RPC `SendMessage` of `text` to `path` on the gateway with `token`: status and body.
    pub async fn send(&self, path: &str, token: Option<&str>, text: &str) -> (u16, Value) {
        let request = json!({"jsonrpc": "2.0", "id": "r1", "method": "SendMessage", "params": {"message": {
            "role": "ROLE_USER", "messageId": uuid::Uuid::new_v4().to_string(), "parts": [{"text": text}]}}});
        self.rpc(path, token, &request).await
    }

    pub async fn rpc(&self, path: &str, token: Option<&str>, request: &Value) -> (u16, Value) {
        let mut call = self.http.post(format!("{}{path}", self.gateway)).header("A2A-Version", "1.0").json(request);
        if let Some(token) = token {
            call = call.bearer_auth(token);
        }
        let response = call.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

/// The artifact texts of a JSON-RPC `SendMessage` answer.
pub fn texts(answer: &Value) -> Vec<String> {
    answer["result"]["task"]["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|artifact| artifact["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|part| part["text"].as_str().map(str::to_owned))
        .collect()
}
