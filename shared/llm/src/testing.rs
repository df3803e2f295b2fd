//! Test support for crates that call an LLM: a fake OpenAI-compatible chat-completions endpoint
//! on 127.0.0.1:0 that answers well, badly, slowly or with an error status, and the matching
//! [`LlmConfig`]. Enabled by the `testing` feature; meant for dev-dependencies only.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use http::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::LlmConfig;

/// The model name [`llm_config`] asks for.
pub const FAKE_MODEL: &str = "fake";
/// The error message the fake endpoint sends with a non-2xx status.
pub const FAKE_ERROR_MESSAGE: &str = "the fake model is overloaded";
/// Words every warning from [`crate::llm_or_rules`] carries after a failed LLM attempt.
pub const FALLBACK_WARNING: &str = "answered with the rules";

/// How the fake chat-completions endpoint answers every request.
#[derive(Debug, Clone)]
pub struct LlmBehaviour {
    /// The HTTP status of every answer.
    pub status: StatusCode,
    /// The assistant message content, for 2xx answers.
    pub content: String,
    /// How long the endpoint waits before answering.
    pub delay: Duration,
}

impl LlmBehaviour {
    /// Answers 200 at once with `content` as the assistant message.
    pub fn answer(content: impl Into<String>) -> Self {
        Self { status: StatusCode::OK, content: content.into(), delay: Duration::ZERO }
    }

    /// Answers 200 at once with `content` serialized as the assistant message.
    pub fn answer_json(content: Value) -> Self {
        Self::answer(content.to_string())
    }

    /// Answers `status` with an OpenAI-style error body carrying [`FAKE_ERROR_MESSAGE`].
    pub fn error(status: StatusCode) -> Self {
        Self { status, ..Self::answer("") }
    }

    /// The same answer, sent only after `delay`.
    pub fn delayed(self, delay: Duration) -> Self {
        Self { delay, ..self }
    }
}

#[derive(Debug)]
struct FakeLlmState {
    behaviour: LlmBehaviour,
    /// Every request body received, in order.
    requests: Mutex<Vec<Value>>,
}

impl FakeLlmState {
    fn requests(&self) -> std::sync::MutexGuard<'_, Vec<Value>> {
        // A panic while holding the lock cannot leave the list half-written: keep using it.
        self.requests.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A fake OpenAI-compatible API on 127.0.0.1:0, served until the test's runtime stops.
#[derive(Debug)]
pub struct FakeLlm {
    base_url: String,
    state: Arc<FakeLlmState>,
}

impl FakeLlm {
    /// Binds a port and serves `POST /v1/chat/completions` answering as `behaviour` says.
    ///
    /// # Panics
    /// When no local port can be bound: the test environment is broken.
    pub async fn start(behaviour: LlmBehaviour) -> Self {
        let state = Arc::new(FakeLlmState { behaviour, requests: Mutex::new(Vec::new()) });
        let router = Router::new().route("/v1/chat/completions", post(chat_completion)).with_state(state.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the fake LLM to a local port");
        let addr = listener.local_addr().expect("the fake LLM's listener has a local address");
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                tracing::error!(%error, "the fake LLM stopped serving");
            }
        });
        Self { base_url: format!("http://{addr}/v1"), state }
    }

    /// The base URL to put in an [`LlmConfig`], version prefix included.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Every request body received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.state.requests().clone()
    }
}

async fn chat_completion(
    State(state): State<Arc<FakeLlmState>>,
    Json(request): Json<Value>,
) -> (StatusCode, Json<Value>) {
    state.requests().push(request);
    let behaviour = &state.behaviour;
    tokio::time::sleep(behaviour.delay).await;
    if !behaviour.status.is_success() {
        return (behaviour.status, Json(json!({"error": {"message": FAKE_ERROR_MESSAGE}})));
    }
    let message = json!({"role": "assistant", "content": behaviour.content});
    (
        behaviour.status,
        Json(json!({"id": "fake", "object": "chat.completion", "choices": [{"index": 0, "message": message}]})),
    )
}

/// The config for model [`FAKE_MODEL`] at `base_url`, giving up after `timeout_ms`.
pub fn llm_config(base_url: &str, timeout_ms: u64) -> LlmConfig {
    LlmConfig { base_url: base_url.to_owned(), model: FAKE_MODEL.into(), timeout_ms, ..Default::default() }
}

/// A base URL on 127.0.0.1 where nothing listens: a port bound, then released.
///
/// # Panics
/// When no local port can be bound: the test environment is broken.
pub fn refused_base_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    let port = listener.local_addr().expect("a bound listener has a local address").port();
    format!("http://127.0.0.1:{port}/v1")
}

/// `warnings` is the one warning [`crate::llm_or_rules`] gives after a failed LLM attempt, and
/// it names `cause`.
///
/// # Panics
/// When it is not.
pub fn assert_rules_fallback_warning(warnings: &[String], cause: &str) {
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = &warnings[0];
    assert!(warning.contains(FALLBACK_WARNING) && warning.contains(cause), "{warning}");
}
