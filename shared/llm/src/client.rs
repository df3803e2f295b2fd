use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, StatusCode, Uri};
use mesh_client::{ClientError, HttpClient};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use url::Url;

use crate::config::LlmConfig;
use crate::error::LlmError;

/// Longest excerpt of a non-JSON error body kept in [`LlmError::Http`]; proxies can answer with
/// whole HTML pages, which would drown the log line.
const ERROR_BODY_EXCERPT_MAX_CHARS: usize = 300;
/// The Markdown code fence some models wrap JSON in even when asked for a bare JSON object.
const CODE_FENCE: &str = "```";

/// The API key from the environment variable named by `config.api_key_env`; `None` when it is
/// unset or not valid Unicode. Separate from [`LlmClient::new`] so tests can pass a key directly.
pub fn api_key_from_env(config: &LlmConfig) -> Option<String> {
    std::env::var(&config.api_key_env).ok()
}

/// Calls one OpenAI-compatible chat-completions endpoint for JSON answers. Cheap to clone; the
/// `Debug` output never shows the API key.
#[derive(Debug, Clone)]
pub struct LlmClient {
    config: LlmConfig,
    endpoint: Uri,
    /// `Bearer <key>`, marked sensitive so it is redacted wherever headers are printed.
    authorization: Option<HeaderValue>,
    http: HttpClient,
}

impl LlmClient {
    /// A client using the API key from the environment variable named in the config (see
    /// [`api_key_from_env`]); without one, requests carry no `Authorization` header, which is what
    /// local OpenAI-compatible servers usually expect.
    pub fn new(config: LlmConfig, http: HttpClient) -> Result<Self, LlmError> {
        let api_key = api_key_from_env(&config);
        Self::with_api_key(config, http, api_key)
    }

    /// A client using `api_key` as given; `None` or a blank key sends no `Authorization` header.
    ///
    /// Fails with [`LlmError::NotConfigured`] when `base_url` or `model` is empty, and with
    /// [`LlmError::InvalidConfig`] when `base_url` is not an http(s) URL, `timeout_ms` is 0 or the
    /// key cannot be sent in a header.
    pub fn with_api_key(config: LlmConfig, http: HttpClient, api_key: Option<String>) -> Result<Self, LlmError> {
        if !config.is_configured() {
            return Err(LlmError::NotConfigured);
        }
        if config.timeout_ms == 0 {
            return Err(LlmError::InvalidConfig(
                "`timeout_ms` is 0, so every call would time out; set it above 0".into(),
            ));
        }
        let endpoint = chat_completions_url(&config.base_url)?;
        let authorization = match api_key.as_deref().map(str::trim).filter(|key| !key.is_empty()) {
            Some(key) => {
                let mut value = HeaderValue::try_from(format!("Bearer {key}")).map_err(|_| {
                    LlmError::InvalidConfig(format!(
                        "the API key (environment variable {}) contains characters that cannot be sent in an \
                         HTTP header",
                        config.api_key_env
                    ))
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        Ok(Self { config, endpoint, authorization, http })
    }

    /// The full chat-completions URL requests go to.
    pub fn endpoint(&self) -> &Uri {
        &self.endpoint
    }

    /// Asks the model for a JSON object, given a `system` prompt (the instructions, which should
    /// describe the JSON wanted) and a `user` message, and returns it as `T` once `validate` accepts it.
    ///
    /// `validate` checks what the type cannot (ranges, references to known ids); its `Err` text
    /// becomes [`LlmError::Rejected`].
    pub async fn complete_json<T: DeserializeOwned>(
        &self,
        system: &str,
        user: &str,
        validate: impl FnOnce(&T) -> Result<(), String>,
    ) -> Result<T, LlmError> {
        let content = self.chat(system, user).await?;
        let answer: T = serde_json::from_str(strip_json_fence(&content)).map_err(|e| {
            tracing::debug!(model = %self.config.model, %content, "the model's content is not the JSON asked for");
            LlmError::InvalidJson(e.to_string())
        })?;
        validate(&answer).map_err(LlmError::Rejected)?;
        Ok(answer)
    }

    /// Sends one chat completion asking for a JSON object and returns the first choice's content.
    async fn chat(&self, system: &str, user: &str) -> Result<String, LlmError> {
        let body = json!({
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "temperature": self.config.temperature,
            "response_format": {"type": "json_object"},
        });
        let mut request = Request::new(Bytes::from(body.to_string()));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.endpoint.clone();
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        if let Some(authorization) = &self.authorization {
            headers.insert(AUTHORIZATION, authorization.clone());
        }

        let started = Instant::now();
        let sent = self.http.send(request, Duration::from_millis(self.config.timeout_ms)).await;
        tracing::debug!(
            model = %self.config.model,
            latency_ms = started.elapsed().as_millis(),
            status = sent.as_ref().ok().map(|response| response.status().as_u16()),
            "LLM call finished"
        );
        let response = sent.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.http_error(status, response.body()));
        }
        first_choice_content(response.body())
    }

    fn transport_error(&self, error: &ClientError) -> LlmError {
        if error.is_timeout() {
            LlmError::Timeout { timeout_ms: self.config.timeout_ms }
        } else {
            LlmError::Transport(error.to_string())
        }
    }

    fn http_error(&self, status: StatusCode, body: &[u8]) -> LlmError {
        let mut message = error_body_message(body);
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            message.push_str(&format!("; check the API key (environment variable {})", self.config.api_key_env));
        }
        LlmError::Http { status: status.as_u16(), message }
    }
}

/// `{base_url}/chat/completions`, whether or not `base_url` ends with `/`; a query (as some
/// hosted APIs need for versioning) is kept.
fn chat_completions_url(base_url: &str) -> Result<Uri, LlmError> {
    let invalid = |reason: String| LlmError::InvalidConfig(format!("`base_url` {base_url:?} {reason}"));
    let mut url = Url::parse(base_url.trim()).map_err(|e| invalid(format!("is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("is not an http(s) URL".into()));
    }
    url.path_segments_mut()
        .map_err(|()| invalid("cannot have paths appended".into()))?
        .pop_if_empty()
        .extend(["chat", "completions"]);
    Uri::try_from(url.as_str()).map_err(|e| invalid(format!("is not a valid request URI: {e}")))
}

/// The part of a chat-completions answer this client reads.
#[derive(Deserialize)]
struct ChatCompletion {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: AssistantMessage,
}

#[derive(Deserialize)]
struct AssistantMessage {
    content: Option<String>,
    /// OpenAI's structured refusal, sent instead of content.
    refusal: Option<String>,
}

fn first_choice_content(body: &[u8]) -> Result<String, LlmError> {
    let completion: ChatCompletion = serde_json::from_slice(body)
        .map_err(|e| LlmError::BadResponse(format!("the body is not a chat completion ({e})")))?;
    let message = completion
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| LlmError::BadResponse("the answer has no choices".into()))?
        .message;
    match (message.content, message.refusal) {
        (Some(content), _) if !content.trim().is_empty() => Ok(content),
        (_, Some(refusal)) => Err(LlmError::BadResponse(format!("the model refused to answer: {refusal}"))),
        _ => Err(LlmError::BadResponse("the first choice has no message content".into())),
    }
}

/// The error text of a non-2xx answer: OpenAI's `{"error": {"message": ...}}`, the
/// `{"error": "..."}` some local servers send, or else the start of the raw body.
fn error_body_message(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let error = parsed.as_ref().map(|value| &value["error"]);
    if let Some(message) = error.and_then(|e| e["message"].as_str().or_else(|| e.as_str())) {
        return message.to_owned();
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() { "(empty body)".to_owned() } else { text.chars().take(ERROR_BODY_EXCERPT_MAX_CHARS).collect() }
}

/// The JSON inside a Markdown code fence (```` ```json ... ``` ````), which some models add even
/// when asked for a bare JSON object; content without a fence is returned trimmed.
fn strip_json_fence(content: &str) -> &str {
    let trimmed = content.trim();
    let Some(fenced) = trimmed.strip_prefix(CODE_FENCE) else {
        return trimmed;
    };
    // The opening fence may carry a language tag (`json`, `JSON`); JSON itself never starts with a letter
    // except for the bare literals true/false/null, which no caller asks for.
    let inner = fenced.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    inner.trim_end().strip_suffix(CODE_FENCE).unwrap_or(inner).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_are_stripped_and_bare_json_is_kept() {
        assert_eq!(strip_json_fence("  {\"a\": 1}\n"), "{\"a\": 1}");
        assert_eq!(strip_json_fence("```json\n{\"a\": 1}\n```"), "{\"a\": 1}");
        assert_eq!(strip_json_fence("```JSON\n{\"a\": 1}\n```\n"), "{\"a\": 1}");
        assert_eq!(strip_json_fence("```\n[1, 2]\n```"), "[1, 2]");
        assert_eq!(strip_json_fence("```json {\"a\": 1}```"), "{\"a\": 1}");
        // A reply cut off before the closing fence still yields the JSON that arrived.
        assert_eq!(strip_json_fence("```json\n{\"a\": 1}"), "{\"a\": 1}");
        // Backticks inside the JSON are content, not a fence.
        assert_eq!(strip_json_fence("{\"code\": \"```\"}"), "{\"code\": \"```\"}");
    }

    #[test]
    fn chat_completions_is_appended_to_the_base_path() {
        for base in ["http://h:1/v1", "http://h:1/v1/", " http://h:1/v1 "] {
            assert_eq!(chat_completions_url(base).unwrap(), "http://h:1/v1/chat/completions", "{base}");
        }
        assert_eq!(chat_completions_url("http://h:1/").unwrap(), "http://h:1/chat/completions");
        assert_eq!(
            chat_completions_url("https://h/openai/v1?api-version=2").unwrap(),
            "https://h/openai/v1/chat/completions?api-version=2"
        );
        for bad in ["not a url", "ftp://h/v1", "mailto:someone@example.com"] {
            assert!(matches!(chat_completions_url(bad), Err(LlmError::InvalidConfig(_))), "{bad}");
        }
    }

    #[test]
    fn error_bodies_yield_their_message() {
        assert_eq!(
            error_body_message(br#"{"error": {"message": "model overloaded", "type": "server"}}"#),
            "model overloaded"
        );
        assert_eq!(error_body_message(br#"{"error": "model not found"}"#), "model not found");
        assert_eq!(error_body_message(b"  Bad Gateway\n"), "Bad Gateway");
        assert_eq!(error_body_message(b""), "(empty body)");
        assert_eq!(error_body_message(&[b'x'; 1000]).len(), ERROR_BODY_EXCERPT_MAX_CHARS);
    }
}
