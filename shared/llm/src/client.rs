use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_openai::types::chat::{ChatCompletionStreamOptions, CreateChatCompletionRequest, ResponseFormat};
use backon::{ExponentialBuilder, Retryable};
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tracing::Instrument;

use crate::chat::{ChatAnswer, ChatMessage, ChatRequest, WireCompletion, wire_messages, wire_tools};
use crate::config::LlmConfig;
use crate::error::LlmError;
use crate::http::{BoundedExchange, EndpointConfig, Failure, classify, http_client};
use crate::stream::ChatStream;
use crate::telemetry::CallTelemetry;

/// The chat-completions path under the base URL.
const CHAT_PATH: &str = "/chat/completions";
/// First wait before a retry; doubled for each further one, with jitter.
const RETRY_DELAY_MIN_MS: u64 = 100;
/// Longest wait between two attempts, a server's `Retry-After` included: a longer wait is no
/// retry within a call but a failure to report.
const RETRY_DELAY_MAX_MS: u64 = 5_000;
/// The Markdown code fence some models wrap JSON in even when asked for a bare JSON object.
const CODE_FENCE: &str = "```";

/// The API key from the environment variable named by `config.api_key_env`; `None` when it is
/// unset or not valid Unicode. Separate from [`LlmClient::new`] so tests can pass a key directly.
pub fn api_key_from_env(config: &LlmConfig) -> Option<String> {
    std::env::var(&config.api_key_env).ok()
}

/// A client of one OpenAI-compatible chat-completions endpoint (OpenRouter, vLLM, Ollama,
/// llama.cpp's server, OpenAI), built on async-openai. Every call has the config's timeout
/// (retries included), retries 429 and 5xx answers with backoff, refuses answers over
/// `answer_bytes_max`, and is observed as a GenAI span and metrics.
///
/// Cheap to clone. The API key is sent only to `base_url` (redirects are not followed) and never
/// shown: not by `Debug`, not in errors, not in logs.
#[derive(Clone)]
pub struct LlmClient {
    inner: Arc<Inner>,
}

struct Inner {
    config: LlmConfig,
    /// The `service` label of the metrics: the agent that calls.
    service: String,
    endpoint: String,
    /// Parsed once for the span's `server.address` and `server.port`.
    server: url::Url,
    openai: async_openai::Client<EndpointConfig>,
}

impl fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmClient")
            .field("endpoint", &self.inner.endpoint)
            .field("model", &self.inner.config.model)
            .field("service", &self.inner.service)
            .finish_non_exhaustive()
    }
}

impl LlmClient {
    /// A client for `service` (the label its metrics carry) using the API key from the
    /// environment variable the config names (see [`api_key_from_env`]); without one, requests
    /// carry no `Authorization` header, which is what local servers usually expect.
    pub fn new(config: LlmConfig, service: &str) -> Result<Self, LlmError> {
        let api_key = api_key_from_env(&config);
        Self::with_api_key(config, service, api_key)
    }

    /// A client using `api_key` as given; `None` or a blank key sends no `Authorization` header.
    ///
    /// Fails with [`LlmError::NotConfigured`] when `base_url` or `model` is empty, and with
    /// [`LlmError::InvalidConfig`] when `base_url` is not an http(s) URL, `timeout_ms` or
    /// `answer_bytes_max` is 0, or the key cannot be sent in a header.
    pub fn with_api_key(config: LlmConfig, service: &str, api_key: Option<String>) -> Result<Self, LlmError> {
        if !config.is_configured() {
            return Err(LlmError::NotConfigured);
        }
        if config.timeout_ms == 0 {
            return Err(LlmError::InvalidConfig(
                "`timeout_ms` is 0, so every call would time out; set it above 0".into(),
            ));
        }
        if config.answer_bytes_max == 0 {
            return Err(LlmError::InvalidConfig("`answer_bytes_max` is 0, so every answer would be refused".into()));
        }
        let endpoint_config = EndpointConfig::new(&config.base_url, api_key, &config.api_key_env)?;
        let endpoint = endpoint_config.display_url(CHAT_PATH);
        let server = url::Url::parse(&endpoint).map_err(|e| LlmError::InvalidConfig(e.to_string()))?;
        let exchange = BoundedExchange::new(http_client()?, config.answer_bytes_max);
        let openai = async_openai::Client::with_config(endpoint_config).with_http_service(exchange);
        Ok(Self { inner: Arc::new(Inner { config, service: service.to_owned(), endpoint, server, openai }) })
    }

    /// The full chat-completions URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    pub fn config(&self) -> &LlmConfig {
        &self.inner.config
    }

    /// One chat completion: the model's text or tool calls, within the config's timeout.
    pub async fn chat(&self, request: &ChatRequest) -> Result<ChatAnswer, LlmError> {
        let telemetry = CallTelemetry::start(&self.inner.service, &self.inner.config.model, &self.inner.server, false);
        let wire = self.wire_request(request, false);
        let deadline = self.deadline();
        let answer = async {
            let attempt = || async {
                let completion: WireCompletion = self
                    .inner
                    .openai
                    .chat()
                    .create_byot(&wire)
                    .await
                    .map_err(|e| classify(e, self.inner.config.answer_bytes_max))?;
                completion.into_answer().map_err(|reason| Failure::from(LlmError::BadResponse(reason)))
            };
            self.within_deadline(deadline, self.with_retries(deadline, attempt)).await
        }
        .instrument(telemetry.span().clone())
        .await;
        telemetry.finish(answer.as_ref());
        answer
    }

    /// A streamed chat completion: text and tool-call deltas as they arrive (see [`ChatStream`]),
    /// assembled into the same [`ChatAnswer`] as [`Self::chat`] gives. The config's timeout covers
    /// the whole stream; retries happen only before the first byte of an answer.
    pub async fn chat_stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError> {
        let telemetry = CallTelemetry::start(&self.inner.service, &self.inner.config.model, &self.inner.server, true);
        let wire = self.wire_request(request, true);
        let deadline = self.deadline();
        let opened = async {
            let attempt = || async {
                self.inner
                    .openai
                    .chat()
                    .create_stream_byot(&wire)
                    .await
                    .map_err(|e| classify(e, self.inner.config.answer_bytes_max))
            };
            self.within_deadline(deadline, self.with_retries(deadline, attempt)).await
        }
        .instrument(telemetry.span().clone())
        .await;
        match opened {
            Ok(events) => Ok(ChatStream::new(events, deadline, &self.inner.config, telemetry)),
            Err(error) => {
                telemetry.finish(Err(&error));
                Err(error)
            }
        }
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
        let request = ChatRequest::new(vec![ChatMessage::system(system), ChatMessage::user(user)]).json_object();
        let answer = self.chat(&request).await?;
        let content = answer.text().ok_or_else(|| {
            LlmError::BadResponse("the model called tools instead of answering with the JSON asked for".into())
        })?;
        let parsed: T = serde_json::from_str(strip_json_fence(content)).map_err(|e| {
            tracing::debug!(model = %self.inner.config.model, %content, "the model's content is not the JSON asked for");
            LlmError::InvalidJson(e.to_string())
        })?;
        validate(&parsed).map_err(LlmError::Rejected)?;
        Ok(parsed)
    }

    fn wire_request(&self, request: &ChatRequest, stream: bool) -> CreateChatCompletionRequest {
        let config = &self.inner.config;
        CreateChatCompletionRequest {
            model: config.model.clone(),
            messages: wire_messages(&request.messages),
            tools: wire_tools(&request.tools),
            // f64 in the config (TOML floats), f32 on the wire; the range is 0-2.
            temperature: Some(config.temperature as f32),
            max_completion_tokens: config.max_output_tokens,
            response_format: request.json_object.then_some(ResponseFormat::JsonObject),
            stream: stream.then_some(true),
            // The usage of a streamed answer comes in a last chunk, sent only when asked for.
            stream_options: stream
                .then_some(ChatCompletionStreamOptions { include_usage: Some(true), ..Default::default() }),
            ..Default::default()
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + Duration::from_millis(self.inner.config.timeout_ms)
    }

    async fn within_deadline<T>(
        &self,
        deadline: Instant,
        work: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, LlmError> {
        match tokio::time::timeout_at(deadline, work).await {
            Ok(done) => done.map_err(|failure| self.explain(failure.error)),
            Err(_) => Err(LlmError::Timeout { timeout_ms: self.inner.config.timeout_ms }),
        }
    }

    /// Points a refused key at the variable it comes from (never at the key itself).
    fn explain(&self, error: LlmError) -> LlmError {
        match error {
            LlmError::Http { status: status @ (401 | 403), message } => LlmError::Http {
                status,
                message: format!(
                    "{message}; check the API key (environment variable {})",
                    self.inner.config.api_key_env
                ),
            },
            other => other,
        }
    }

    /// Runs `attempt` until it succeeds, fails in a way a retry cannot fix, has been retried
    /// `retries_max` times, or the next wait would end after `deadline` (then the last failure is
    /// the answer: more telling than a timeout).
    async fn with_retries<T, F, Fut>(&self, deadline: Instant, attempt: F) -> Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(RETRY_DELAY_MIN_MS))
            .with_max_delay(Duration::from_millis(RETRY_DELAY_MAX_MS))
            .with_max_times(self.inner.config.retries_max as usize)
            .with_jitter();
        attempt
            .retry(backoff)
            .when(|failure: &Failure| failure.error.is_retryable())
            .adjust(|failure: &Failure, next: Option<Duration>| {
                let delay = failure.retry_after.unwrap_or(next?);
                (delay <= Duration::from_millis(RETRY_DELAY_MAX_MS) && Instant::now() + delay < deadline)
                    .then_some(delay)
            })
            .notify(|failure: &Failure, delay: Duration| {
                tracing::warn!(error = %failure.error, delay_ms = delay.as_millis(), "LLM call failed; retrying");
            })
            .await
    }
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
    fn an_unset_or_unusable_config_fails_at_construction() {
        let config = |base_url: &str, timeout_ms| LlmConfig {
            base_url: base_url.into(),
            model: "m".into(),
            timeout_ms,
            ..LlmConfig::default()
        };
        let build = |config: LlmConfig| LlmClient::with_api_key(config, "test", None).map(|_| ());
        assert_eq!(build(LlmConfig::default()), Err(LlmError::NotConfigured));
        assert_eq!(build(LlmConfig { model: String::new(), ..config("http://h/v1", 1) }), Err(LlmError::NotConfigured));
        let no_answer = LlmConfig { answer_bytes_max: 0, ..config("http://h/v1", 1) };
        for bad in [config("not a url", 1), config("ftp://h/v1", 1), config("http://h/v1", 0), no_answer] {
            assert!(matches!(build(bad.clone()), Err(LlmError::InvalidConfig(_))), "{bad:?}");
        }
    }

    #[test]
    fn debug_shows_the_endpoint_and_never_the_key() {
        let config = LlmConfig { base_url: "http://h:1/v1/".into(), model: "m".into(), ..LlmConfig::default() };
        let client = LlmClient::with_api_key(config, "test", Some("sk-very-secret".into())).unwrap();
        let printed = format!("{client:?}");
        assert!(printed.contains("http://h:1/v1/chat/completions") && !printed.contains("sk-very-secret"), "{printed}");
        assert_eq!(client.endpoint(), "http://h:1/v1/chat/completions");
    }
}
