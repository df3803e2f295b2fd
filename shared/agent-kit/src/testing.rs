//! Test support for agent crates: an [`AgentApp`] served in the background, requests built as
//! they are (any method, path, content type and body), and the checks every mesh error answer
//! must pass. Enabled by the `testing` feature; meant for dev-dependencies only.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use ::http::header::{self, HeaderValue};
use ::http::{Method, Request, StatusCode};
use bytes::Bytes;
use mesh_client::{HttpClient, fetch_card, send_task};
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::error::{ErrorBody, FailureStatus};
use mesh_protocol::registry::DEFAULT_PROCESS_PATH;
use mesh_protocol::seed::{TaskRequest, TaskResponse};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::{AgentApp, AgentConfig};

/// Time allowed for one request from a test to the agent.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The path every agent takes tasks on.
pub const TASKS_PATH: &str = DEFAULT_PROCESS_PATH;
/// The JSON content type, as requests carry it.
pub const JSON: &str = "application/json";

/// Task store of test agents: in memory, so tests leave no files behind.
pub const MEMORY_TASK_STORE_URL: &str = mesh_storage::SQLITE_MEMORY_URL;

/// Agent keys for a test: 127.0.0.1 on a free port, no registry.
pub fn local_agent_config() -> AgentConfig {
    AgentConfig {
        port: 0,
        registry_url: None,
        task_store_url: Some(MEMORY_TASK_STORE_URL.into()),
        ..AgentConfig::default()
    }
}

/// An agent served in the background until dropped.
#[derive(Debug)]
pub struct RunningAgent {
    url: String,
    http: HttpClient,
    _stop: oneshot::Sender<()>,
}

impl RunningAgent {
    /// Serves `app` on the current runtime; `http` is the client the app was built with, which
    /// the test's own requests share.
    pub fn spawn(app: AgentApp, http: HttpClient) -> Self {
        let url = app.url().to_owned();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        Self { url, http, _stop: stop }
    }

    /// Builds an agent with `build`, given a new HTTP client the test's requests then share, and
    /// serves it on the current runtime.
    ///
    /// # Panics
    /// When the HTTP client or the agent cannot be built.
    pub async fn start<F, Fut, E>(build: F) -> Self
    where
        F: FnOnce(HttpClient) -> Fut,
        Fut: Future<Output = Result<AgentApp, E>>,
        E: Display,
    {
        let http = HttpClient::with_reqwest().expect("build the HTTP client");
        let app = build(http.clone()).await.unwrap_or_else(|e| panic!("the agent under test did not build: {e}"));
        Self::spawn(app, http)
    }

    /// The agent's base URL, without a trailing slash.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The HTTP client the agent and the test share.
    pub fn http(&self) -> &HttpClient {
        &self.http
    }

    /// Sends `task` to the agent and expects a 2xx task response.
    ///
    /// # Panics
    /// When the agent cannot be reached or does not answer 2xx with a task response.
    pub async fn send(&self, task: &TaskRequest) -> TaskResponse {
        send_task(&self.http, &self.url, task, CALL_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("task {:?} to {}: {e}", task.id, self.url))
    }

    /// A request for `path` carrying `body` as it is, labelled `content_type`.
    ///
    /// # Panics
    /// When `path` does not make a URI with the agent's URL, or `content_type` is not a valid
    /// header value.
    pub fn request(&self, method: Method, path: &str, content_type: &str, body: impl Into<Bytes>) -> Request<Bytes> {
        let uri = format!("{}{path}", self.url);
        let mut request = Request::new(body.into());
        *request.method_mut() = method;
        *request.uri_mut() = uri.parse().unwrap_or_else(|e| panic!("invalid request URI {uri:?}: {e}"));
        let content_type = HeaderValue::from_str(content_type)
            .unwrap_or_else(|e| panic!("invalid content type {content_type:?}: {e}"));
        request.headers_mut().insert(header::CONTENT_TYPE, content_type);
        request
    }

    /// Sends `request` and expects the mesh JSON error body with `status` and `code`, marked as an
    /// error, with a message and the request id.
    ///
    /// # Panics
    /// When any of that does not hold, or the agent cannot be reached.
    pub async fn expect_error(&self, request: Request<Bytes>, status: StatusCode, code: &str) -> ErrorBody {
        let target = format!("{} {}", request.method(), request.uri().path());
        let response =
            self.http.send(request, CALL_TIMEOUT).await.unwrap_or_else(|e| panic!("{target}: no answer: {e}"));
        let content_type = response.headers().get(header::CONTENT_TYPE).map(HeaderValue::as_bytes);
        assert_eq!(content_type, Some(JSON.as_bytes()), "{target}");
        let error: ErrorBody = serde_json::from_slice(response.body())
            .unwrap_or_else(|e| panic!("{target}: not an error body ({e}): {:?}", response.body()));
        assert_eq!((response.status(), error.error_code.as_str()), (status, code), "{target}: {error:?}");
        assert_eq!(error.status, FailureStatus::Error);
        assert!(!error.error_message.is_empty());
        assert!(error.request_id.is_some(), "the request id is stamped into every error body: {error:?}");
        error
    }

    /// Posts the task `body` as JSON and expects a 400 with `code`.
    ///
    /// # Panics
    /// As [`Self::expect_error`].
    pub async fn expect_bad_task(&self, body: Value, code: &str) -> ErrorBody {
        let request = self.request(Method::POST, TASKS_PATH, JSON, body.to_string());
        self.expect_error(request, StatusCode::BAD_REQUEST, code).await
    }

    /// Fetches the agent's card and expects it to carry `name`, a skill `skill`, and the agent's URL.
    ///
    /// # Panics
    /// When any of that does not hold, or the card cannot be fetched.
    pub async fn expect_card(&self, name: &str, skill: &str) -> AgentCard {
        let card = fetch_card(&self.http, &self.url, CALL_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("card of {}: {e}", self.url));
        assert_eq!(card.name, name);
        assert!(card.skills.iter().any(|s| s.id == skill), "{:?}", card.skills);
        assert_eq!(card.url.as_deref(), Some(self.url.as_str()));
        card
    }

    /// Posts what every agent refuses on its task route, whatever the task: a body that is not
    /// JSON (400 `REQUEST_MALFORMED_JSON`), and the well-formed `task` labelled `text/plain`
    /// (415 `REQUEST_UNSUPPORTED_MEDIA_TYPE`).
    ///
    /// # Panics
    /// As [`Self::expect_error`].
    pub async fn expect_unparsed_tasks_refused(&self, task: &str) {
        let cases = [
            (JSON, "{\"messages\": [".to_owned(), StatusCode::BAD_REQUEST, "REQUEST_MALFORMED_JSON"),
            ("text/plain", task.to_owned(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "REQUEST_UNSUPPORTED_MEDIA_TYPE"),
        ];
        for (content_type, body, status, code) in cases {
            self.expect_error(self.request(Method::POST, TASKS_PATH, content_type, body), status, code).await;
        }
    }
}
