//! The whole suite with authentication on (one HS256 secret, as `MESH_AUTH_JWT_HS256_SECRET`
//! gives `up`), and the callers the security and attack tests play: an admin, `alice` of tenant
//! `acme` and `bob` of tenant `globex`. Included by path from each (`#[path]`).

use std::time::{Duration, Instant};

use a2a_mesh::{RunningSuite, SuiteConfig, start};
use mesh_auth::{AuthConfig, Claims, Role, mint_hs256};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

pub const SECRET: &str = "a-test-secret-of-at-least-32-bytes!!";
pub const WAIT_DEADLINE: Duration = Duration::from_secs(20);

pub fn token(subject: &str, tenant: &str, roles: &[Role]) -> String {
    mint_hs256(SECRET.as_bytes(), &Claims::new(subject, tenant, roles, 600)).unwrap()
}

pub struct Mesh {
    pub suite: RunningSuite,
    pub http: reqwest::Client,
    pub admin: String,
    pub alice: String,
    pub bob: String,
}

impl Mesh {
    pub async fn start() -> (Self, tempfile::TempDir) {
        Self::start_with(|_| {}).await
    }

    /// The suite as [`Mesh::start`] starts it, with `configure` applied to its configuration first.
    pub async fn start_with(configure: impl FnOnce(&mut SuiteConfig)) -> (Self, tempfile::TempDir) {
        let data = tempfile::tempdir().unwrap();
        let mut config = SuiteConfig::ephemeral(data.path());
        configure(&mut config);
        // Ownership is decided before any card is fetched; these tests register names nobody serves.
        config.registry.verify_registrations = false;
        config.share_auth(&AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() }).unwrap();
        let suite = start(config).await.unwrap();
        let mesh = Self {
            suite,
            http: reqwest::Client::new(),
            admin: token("ops", "", &[Role::Admin]),
            alice: token("alice", "acme", &[Role::User]),
            bob: token("bob", "globex", &[Role::User]),
        };
        let deadline = Instant::now() + WAIT_DEADLINE;
        loop {
            let stats = mesh.call(Method::GET, &mesh.registry("/stats"), Some(&mesh.admin), None).await.1;
            if stats["healthy_agents"].as_u64() == Some(4) {
                break;
            }
            assert!(Instant::now() < deadline, "the agents never registered with their own tokens: {stats}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (mesh, data)
    }

    pub fn registry(&self, path: &str) -> String {
        format!("{}{path}", self.suite.urls.registry)
    }

    pub async fn call(
        &self,
        method: Method,
        url: &str,
        bearer: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.http.request(method, url).header("A2A-Version", "1.0");
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub async fn rpc(&self, agent: &str, bearer: &str, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        self.call(Method::POST, agent, Some(bearer), Some(body)).await.1
    }
}

pub fn message(text: &str) -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]}})
}
