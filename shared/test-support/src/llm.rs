//! A scripted OpenAI-compatible chat-completions server for tests, on 127.0.0.1:0: it answers
//! each `POST /v1/chat/completions` with the next step of its script (text, tool calls, an error
//! status, a malformed tool call, a huge answer, any of them late), as a whole JSON answer or, for
//! a request with `"stream": true`, as server-sent events ending in `data: [DONE]`. It records
//! every request, so a test can check the roles of the messages, the tools offered and the
//! system prompt the model was given.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// The path answered, under the base URL's `/v1`.
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";
/// The message of the error bodies [`LlmStep::error`] sends.
pub const SCRIPTED_ERROR_MESSAGE: &str = "the scripted model is overloaded";
/// The arguments of [`LlmStep::malformed_tool_call`]: JSON cut short.
pub const MALFORMED_ARGUMENTS: &str = "{\"query\": \"robots";
/// Characters of text per event of a streamed answer, for answers up to
/// [`STREAM_SMALL_TEXT_CHARS_MAX`]; larger ones go in [`STREAM_LARGE_CHUNK_CHARS`] pieces.
const STREAM_TEXT_CHUNK_CHARS: usize = 8;
const STREAM_SMALL_TEXT_CHARS_MAX: usize = 4096;
const STREAM_LARGE_CHUNK_CHARS: usize = 4096;
/// Bytes per piece of a whole answer sent without a `Content-Length`.
const UNANNOUNCED_PIECE_BYTES: usize = 16 * 1024;
/// Characters of tool-call arguments per event of a streamed answer.
const STREAM_ARGUMENTS_CHUNK_CHARS: usize = 6;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct LlmStep {
    reply: Reply,
    delay: Duration,
    usage: Option<(u64, u64)>,
    /// A whole answer sent in pieces with no `Content-Length`.
    unannounced: bool,
}

#[derive(Debug, Clone)]
enum Reply {
    Text(String),
    ToolCalls(Vec<(String, String)>),
    Error { status: StatusCode, retry_after_s: Option<u64> },
    Raw { status: StatusCode, headers: Vec<(&'static str, String)>, body: String },
}

impl LlmStep {
    fn new(reply: Reply) -> Self {
        Self { reply, delay: Duration::ZERO, usage: None, unannounced: false }
    }

    /// A final answer: `text` as the assistant's content.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(Reply::Text(text.into()))
    }

    /// A final answer whose content is `value` as JSON text.
    pub fn json(value: Value) -> Self {
        Self::text(value.to_string())
    }

    /// One call of tool `name` with `arguments` (a JSON object).
    pub fn tool_call(name: &str, arguments: Value) -> Self {
        Self::tool_calls([(name, arguments)])
    }

    /// Several tool calls in one answer, in order.
    pub fn tool_calls<'a>(calls: impl IntoIterator<Item = (&'a str, Value)>) -> Self {
        Self::new(Reply::ToolCalls(calls.into_iter().map(|(name, args)| (name.to_owned(), args.to_string())).collect()))
    }

    /// A call of tool `name` whose arguments are exactly `arguments`, JSON or not.
    pub fn raw_tool_call(name: &str, arguments: &str) -> Self {
        Self::new(Reply::ToolCalls(vec![(name.to_owned(), arguments.to_owned())]))
    }

    /// A call of tool `name` whose arguments are not JSON ([`MALFORMED_ARGUMENTS`]).
    pub fn malformed_tool_call(name: &str) -> Self {
        Self::raw_tool_call(name, MALFORMED_ARGUMENTS)
    }

    /// An OpenAI-shaped error body with [`SCRIPTED_ERROR_MESSAGE`] and `status`.
    pub fn error(status: u16) -> Self {
        Self::new(Reply::Error { status: status_code(status), retry_after_s: None })
    }

    /// A 429 asking the client to wait `retry_after_s` seconds.
    pub fn rate_limited(retry_after_s: u64) -> Self {
        Self::new(Reply::Error { status: StatusCode::TOO_MANY_REQUESTS, retry_after_s: Some(retry_after_s) })
    }

    /// A final answer of `bytes` bytes of text.
    pub fn huge_text(bytes: usize) -> Self {
        Self::text("x".repeat(bytes))
    }

    /// `status` with `body` as it is (a body that is no chat completion, for one).
    pub fn raw(status: u16, content_type: &str, body: impl Into<String>) -> Self {
        let headers = vec![("content-type", content_type.to_owned())];
        Self::new(Reply::Raw { status: status_code(status), headers, body: body.into() })
    }

    /// A temporary redirect to `location`.
    pub fn redirect(location: &str) -> Self {
        let headers = vec![("location", location.to_owned())];
        Self::new(Reply::Raw { status: StatusCode::TEMPORARY_REDIRECT, headers, body: String::new() })
    }

    /// The same answer, sent only after `delay`.
    pub fn delayed(self, delay: Duration) -> Self {
        Self { delay, ..self }
    }

    /// A whole answer sent in pieces without a `Content-Length`, as some proxies send them: a
    /// client cannot refuse it by its declared size and must bound it while reading.
    pub fn without_length(self) -> Self {
        Self { unannounced: true, ..self }
    }

    /// The token usage reported (by default, a quarter of the bytes asked and answered).
    pub fn with_usage(self, input_tokens: u64, output_tokens: u64) -> Self {
        Self { usage: Some((input_tokens, output_tokens)), ..self }
    }
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or_else(|_| panic!("{status} is not an HTTP status"))
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub path: String,
    /// The `Authorization` header, as sent.
    pub authorization: Option<String>,
    /// The JSON body (`null` when it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// The messages sent, in order.
    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"].as_array().cloned().unwrap_or_default()
    }

    /// The role of each message, in order.
    pub fn roles(&self) -> Vec<String> {
        self.messages().iter().map(|m| m["role"].as_str().unwrap_or_default().to_owned()).collect()
    }

    /// The text of the system messages, joined by blank lines; `None` without one.
    pub fn system_prompt(&self) -> Option<String> {
        let system: Vec<String> =
            self.messages().iter().filter(|m| m["role"] == "system").map(|m| content_text(&m["content"])).collect();
        (!system.is_empty()).then(|| system.join("\n\n"))
    }

    /// The names of the tools offered, in order.
    pub fn tool_names(&self) -> Vec<String> {
        let tools = self.body["tools"].as_array().cloned().unwrap_or_default();
        tools.iter().map(|t| t["function"]["name"].as_str().unwrap_or_default().to_owned()).collect()
    }

    /// The text of the last message.
    pub fn last_content(&self) -> Option<String> {
        self.messages().last().map(|m| content_text(&m["content"]))
    }

    pub fn is_streaming(&self) -> bool {
        self.body["stream"] == true
    }
}

/// A message's content as text: a string, or the text of its parts.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""),
        _ => String::new(),
    }
}

#[derive(Debug)]
struct ScriptState {
    script: Mutex<VecDeque<LlmStep>>,
    /// Answered once the script is used up; without it, a further request gets a 400 naming it.
    repeat: Option<LlmStep>,
    requests: Mutex<Vec<RecordedRequest>>,
    received: Notify,
}

/// Locks `mutex`; a test that panicked while holding it left whole entries only.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The scripted server, served until the test's runtime stops.
#[derive(Debug)]
pub struct ScriptedLlm {
    base_url: String,
    state: Arc<ScriptState>,
}

impl ScriptedLlm {
    /// Answers the requests with `steps` in order; a request after the last step gets a 400.
    ///
    /// # Panics
    /// When no local port can be bound: the test environment is broken.
    pub async fn start(steps: impl IntoIterator<Item = LlmStep>) -> Self {
        Self::serve(steps.into_iter().collect(), None).await
    }

    /// Answers every request with `step`.
    pub async fn repeating(step: LlmStep) -> Self {
        Self::serve(VecDeque::new(), Some(step)).await
    }

    async fn serve(script: VecDeque<LlmStep>, repeat: Option<LlmStep>) -> Self {
        let state = Arc::new(ScriptState {
            script: Mutex::new(script),
            repeat,
            requests: Mutex::new(Vec::new()),
            received: Notify::new(),
        });
        // A fallback rather than one route, so a request to a wrong path is recorded (and answered 404).
        let router = Router::new().fallback(answer).with_state(state.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the scripted LLM to a local port");
        let addr = listener.local_addr().expect("the scripted LLM's listener has an address");
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { base_url: format!("http://{addr}/v1"), state }
    }

    /// The base URL to configure, version prefix included (`http://127.0.0.1:<port>/v1`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.requests).clone()
    }

    /// The requests, once there are at least `count` of them.
    ///
    /// # Panics
    /// When fewer than `count` have arrived within `timeout`.
    pub async fn wait_for_requests(&self, count: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let waited = tokio::time::timeout(timeout, async {
            loop {
                let notified = self.state.received.notified();
                let requests = self.requests();
                if requests.len() >= count {
                    return requests;
                }
                notified.await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| panic!("{count} requests expected within {timeout:?}, got {:?}", self.requests()))
    }

    /// Steps of the script not used yet.
    pub fn steps_left(&self) -> usize {
        lock(&self.state.script).len()
    }
}

async fn answer(State(state): State<Arc<ScriptState>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let request = RecordedRequest {
        path: uri.path().to_owned(),
        authorization: headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let number = {
        let mut requests = lock(&state.requests);
        requests.push(request.clone());
        requests.len()
    };
    state.received.notify_waiters();
    if request.path != CHAT_COMPLETIONS_PATH {
        return error_response(StatusCode::NOT_FOUND, &format!("no route {}", request.path), None);
    }
    if request.body.is_null() {
        return error_response(StatusCode::BAD_REQUEST, "the body is not JSON", None);
    }
    let step = lock(&state.script).pop_front().or_else(|| state.repeat.clone());
    let Some(step) = step else {
        return error_response(StatusCode::BAD_REQUEST, &format!("the script has no step for request {number}"), None);
    };
    tokio::time::sleep(step.delay).await;
    let model = request.body["model"].as_str().unwrap_or("scripted").to_owned();
    let input_tokens = u64::try_from(body.len() / 4).unwrap_or(u64::MAX);
    let completion = Completion { number, model, input_tokens, usage: step.usage, unannounced: step.unannounced };
    match step.reply {
        Reply::Error { status, retry_after_s } => error_response(status, SCRIPTED_ERROR_MESSAGE, retry_after_s),
        Reply::Raw { status, headers, body } => {
            let mut response = (status, body).into_response();
            for (name, value) in headers {
                let value = HeaderValue::from_str(&value).expect("a scripted header value is valid");
                response.headers_mut().insert(name, value);
            }
            response
        }
        Reply::Text(text) if request.is_streaming() => completion.stream(Some(&text), &[], &request),
        Reply::ToolCalls(calls) if request.is_streaming() => completion.stream(None, &calls, &request),
        Reply::Text(text) => completion.whole(Some(&text), &[]),
        Reply::ToolCalls(calls) => completion.whole(None, &calls),
    }
}

/// A base URL on 127.0.0.1 where nothing listens: a port bound, then released.
///
/// # Panics
/// When no local port can be bound: the test environment is broken.
pub fn refused_base_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    let port = listener.local_addr().expect("a bound listener has an address").port();
    format!("http://127.0.0.1:{port}/v1")
}

fn error_response(status: StatusCode, message: &str, retry_after_s: Option<u64>) -> Response {
    let kind = if status.is_server_error() { "server_error" } else { "invalid_request_error" };
    let body = json!({"error": {"message": message, "type": kind}}).to_string();
    let mut response = (status, [(CONTENT_TYPE, "application/json")], body).into_response();
    if let Some(seconds) = retry_after_s {
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// What an answer to request `number` is made of.
struct Completion {
    unannounced: bool,
    number: usize,
    model: String,
    input_tokens: u64,
    usage: Option<(u64, u64)>,
}

impl Completion {
    fn id(&self) -> String {
        format!("chatcmpl-scripted-{}", self.number)
    }

    fn call_id(&self, index: usize) -> String {
        format!("call_{}_{index}", self.number)
    }

    fn usage(&self, output_bytes: usize) -> Value {
        let (input, output) =
            self.usage.unwrap_or((self.input_tokens, u64::try_from(output_bytes.div_ceil(4)).unwrap_or(u64::MAX)));
        json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output})
    }

    fn whole(&self, text: Option<&str>, calls: &[(String, String)]) -> Response {
        let mut message = json!({"role": "assistant", "content": text});
        if !calls.is_empty() {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| {
                    json!({"id": self.call_id(i), "type": "function", "function": {"name": name, "arguments": arguments}})
                })
                .collect();
            message["tool_calls"] = Value::Array(calls);
        }
        let output_bytes = text.map_or(0, str::len) + calls.iter().map(|(_, a)| a.len()).sum::<usize>();
        let body = json!({
            "id": self.id(),
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(calls)}],
            "usage": self.usage(output_bytes),
        });
        let body = body.to_string();
        if self.unannounced {
            let pieces: Vec<Result<Bytes, Infallible>> = body
                .into_bytes()
                .chunks(UNANNOUNCED_PIECE_BYTES)
                .map(|piece| Ok(Bytes::copy_from_slice(piece)))
                .collect();
            let streamed = axum::body::Body::from_stream(futures::stream::iter(pieces));
            return (StatusCode::OK, [(CONTENT_TYPE, "application/json")], streamed).into_response();
        }
        (StatusCode::OK, [(CONTENT_TYPE, "application/json")], body).into_response()
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id(),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })
    }

    /// The answer as OpenAI streams it: the role, the text or each call's id and name then its
    /// arguments in pieces, the finish reason, the usage when asked for, and `[DONE]`.
    fn stream(&self, text: Option<&str>, calls: &[(String, String)], request: &RecordedRequest) -> Response {
        let mut chunks = vec![self.chunk(json!({"role": "assistant", "content": ""}), None)];
        if let Some(text) = text {
            let size = if text.len() <= STREAM_SMALL_TEXT_CHARS_MAX {
                STREAM_TEXT_CHUNK_CHARS
            } else {
                STREAM_LARGE_CHUNK_CHARS
            };
            for piece in pieces(text, size) {
                chunks.push(self.chunk(json!({"content": piece}), None));
            }
        }
        for (index, (name, arguments)) in calls.iter().enumerate() {
            let opening = json!({"index": index, "id": self.call_id(index), "type": "function",
                "function": {"name": name, "arguments": ""}});
            chunks.push(self.chunk(json!({"tool_calls": [opening]}), None));
            for piece in pieces(arguments, STREAM_ARGUMENTS_CHUNK_CHARS) {
                let fragment = json!({"index": index, "function": {"arguments": piece}});
                chunks.push(self.chunk(json!({"tool_calls": [fragment]}), None));
            }
        }
        chunks.push(self.chunk(json!({}), Some(finish_reason(calls))));
        if request.body["stream_options"]["include_usage"] == true {
            let output_bytes = text.map_or(0, str::len) + calls.iter().map(|(_, a)| a.len()).sum::<usize>();
            chunks.push(json!({"id": self.id(), "object": "chat.completion.chunk", "created": 0,
                "model": self.model, "choices": [], "usage": self.usage(output_bytes)}));
        }
        let events = chunks
            .into_iter()
            .map(|chunk| Event::default().data(chunk.to_string()))
            .chain(std::iter::once(Event::default().data("[DONE]")))
            .map(Ok::<_, Infallible>);
        Sse::new(futures::stream::iter(events)).into_response()
    }
}

fn finish_reason(calls: &[(String, String)]) -> &'static str {
    if calls.is_empty() { "stop" } else { "tool_calls" }
}

/// `text` in pieces of at most `size` characters.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|piece| piece.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_on_characters() {
        assert_eq!(pieces("héllo wörld", 4), ["héll", "o wö", "rld"]);
        assert!(pieces("", 4).is_empty());
    }

    #[test]
    fn recorded_requests_name_roles_tools_and_the_system_prompt() {
        let request = RecordedRequest {
            path: CHAT_COMPLETIONS_PATH.into(),
            authorization: None,
            body: json!({
                "messages": [
                    {"role": "system", "content": "You are the concierge."},
                    {"role": "system", "content": [{"type": "text", "text": "Superiors: none."}]},
                    {"role": "user", "content": "hi"},
                ],
                "tools": [{"type": "function", "function": {"name": "call_agent"}}],
                "stream": true,
            }),
        };
        assert_eq!(request.roles(), ["system", "system", "user"]);
        assert_eq!(request.system_prompt().unwrap(), "You are the concierge.\n\nSuperiors: none.");
        assert_eq!(request.tool_names(), ["call_agent"]);
        assert_eq!(request.last_content().as_deref(), Some("hi"));
        assert!(request.is_streaming());
    }
}
