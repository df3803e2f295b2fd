//! The HTTP exchange under async-openai: its endpoint config (the base URL and key, nothing read
//! from the environment behind the caller's back) and the tower service that sends each request,
//! refuses answers larger than the cap and reads error statuses itself, so an error body is
//! bounded too and a 429's `Retry-After` reaches the retry loop.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_openai::config::Config;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, StatusCode};
use secrecy::SecretString;
use serde_json::Value;
use url::Url;

use crate::error::LlmError;

/// Time allowed to open a TCP connection, shorter than any call timeout so a dead host fails fast.
const CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Idle pooled connections to the endpoint are closed after this long.
const POOL_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Bytes of an error answer read for its message; proxies answer with whole HTML pages.
const ERROR_BODY_BYTES_MAX: usize = 16 * 1024;
/// Longest excerpt of a non-JSON error body kept in [`LlmError::Http`].
const ERROR_BODY_EXCERPT_MAX_CHARS: usize = 300;
/// A streamed answer's raw bytes may exceed its text this many times: each SSE chunk wraps a few
/// characters of text in a JSON envelope of a hundred bytes or more.
const STREAM_OVERHEAD_FACTOR: usize = 16;

/// The endpoint as async-openai sees it: `url(path)` is the base URL's path plus `path`, with the
/// base URL's query (some hosted APIs version through it) sent as query pairs.
#[derive(Clone)]
pub(crate) struct EndpointConfig {
    api_base: String,
    query: Vec<(String, String)>,
    api_key: SecretString,
    /// `Bearer <key>`, marked sensitive; `None` sends no `Authorization` header, which is what
    /// local servers (Ollama, llama.cpp) expect.
    authorization: Option<HeaderValue>,
}

impl fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("api_base", &self.api_base)
            .field("query", &self.query)
            .field("api_key", &if self.authorization.is_some() { "<redacted>" } else { "<none>" })
            .finish()
    }
}

impl EndpointConfig {
    /// Fails when `base_url` is not an http(s) URL or the key cannot be sent in a header
    /// (`api_key_env` names the variable in the message, never the key).
    pub(crate) fn new(base_url: &str, api_key: Option<String>, api_key_env: &str) -> Result<Self, LlmError> {
        let invalid = |reason: String| LlmError::InvalidConfig(format!("`base_url` {base_url:?} {reason}"));
        let mut url = Url::parse(base_url.trim()).map_err(|e| invalid(format!("is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
            return Err(invalid("is not an http(s) URL".into()));
        }
        let query = url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        url.set_query(None);
        url.set_fragment(None);
        let api_base = url.as_str().trim_end_matches('/').to_owned();
        let key = api_key.map(|key| key.trim().to_owned()).filter(|key| !key.is_empty());
        let authorization = match &key {
            Some(key) => {
                let mut value = HeaderValue::try_from(format!("Bearer {key}")).map_err(|_| {
                    LlmError::InvalidConfig(format!(
                        "the API key (environment variable {api_key_env}) contains characters that cannot be sent in \
                         an HTTP header"
                    ))
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        Ok(Self { api_base, query, api_key: SecretString::from(key.unwrap_or_default()), authorization })
    }

    /// The full URL of `path` (e.g. `/chat/completions`), query included, for logs and errors.
    pub(crate) fn display_url(&self, path: &str) -> String {
        let mut url = self.url(path);
        if !self.query.is_empty() {
            let pairs: Vec<String> = self.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
            url = format!("{url}?{}", pairs.join("&"));
        }
        url
    }
}

impl Config for EndpointConfig {
    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(authorization) = &self.authorization {
            headers.insert(AUTHORIZATION, authorization.clone());
        }
        headers
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.api_base)
    }

    fn query(&self) -> Vec<(&str, &str)> {
        self.query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    fn api_base(&self) -> &str {
        &self.api_base
    }

    fn api_key(&self) -> &SecretString {
        &self.api_key
    }
}

/// The reqwest client for one endpoint. Redirects are not followed: the key goes to the
/// configured endpoint only, never to wherever a redirect points.
pub(crate) fn http_client() -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
        .pool_idle_timeout(Duration::from_millis(POOL_IDLE_TIMEOUT_MS))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("a2a-mesh/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| LlmError::InvalidConfig(format!("cannot build the HTTP client: {e}")))
}

/// A non-2xx answer, read by [`BoundedExchange`] and carried through async-openai as a boxed error.
#[derive(Debug, thiserror::Error)]
#[error("HTTP {status}: {message}")]
pub(crate) struct StatusFailure {
    pub status: StatusCode,
    pub message: String,
    /// The server's `Retry-After`, in seconds (the HTTP-date form is not used by LLM endpoints).
    pub retry_after: Option<Duration>,
}

/// An answer whose declared length is over the cap (one without a length is cut by [`Limited`]).
///
/// [`Limited`]: http_body_util::Limited
#[derive(Debug, thiserror::Error)]
#[error("the answer is larger than {bytes_max} bytes")]
pub(crate) struct TooLarge {
    pub bytes_max: usize,
}

/// The tower service async-openai sends through: one reqwest exchange, statuses and sizes checked.
#[derive(Debug, Clone)]
pub(crate) struct BoundedExchange {
    client: reqwest::Client,
    answer_bytes_max: usize,
}

impl BoundedExchange {
    pub(crate) fn new(client: reqwest::Client, answer_bytes_max: usize) -> Self {
        Self { client, answer_bytes_max }
    }
}

type ExchangeFuture = Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send>>;

impl tower::Service<HttpRequestFactory> for BoundedExchange {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = ExchangeFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let (client, answer_bytes_max) = (self.client.clone(), self.answer_bytes_max);
        Box::pin(async move {
            let request = factory.build().await?;
            let response = client.execute(request).await.map_err(OpenAIError::Reqwest)?;
            let status = response.status();
            if !status.is_success() {
                return Err(OpenAIError::Boxed(Box::new(status_failure(response).await)));
            }
            let streamed = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .is_some_and(|value| value.starts_with("text/event-stream"));
            let bytes_max =
                if streamed { answer_bytes_max.saturating_mul(STREAM_OVERHEAD_FACTOR) } else { answer_bytes_max };
            if response.content_length().is_some_and(|length| length > bytes_max as u64) {
                return Err(OpenAIError::Boxed(Box::new(TooLarge { bytes_max: answer_bytes_max })));
            }
            let (parts, body) = http::Response::<reqwest::Body>::from(response).into_parts();
            let limited = reqwest::Body::wrap(http_body_util::Limited::new(body, bytes_max));
            Ok(reqwest::Response::from(http::Response::from_parts(parts, limited)))
        })
    }
}

async fn status_failure(mut response: reqwest::Response) -> StatusFailure {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let mut body = Vec::new();
    // Only the start of the body is read: enough for any error message.
    while body.len() < ERROR_BODY_BYTES_MAX {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(ERROR_BODY_BYTES_MAX - body.len())]),
            Ok(None) | Err(_) => break,
        }
    }
    StatusFailure { status, message: error_body_message(&body), retry_after }
}

/// The error text of a non-2xx answer: OpenAI's `{"error": {"message": ...}}`, the
/// `{"error": "..."}` some local servers send, or else the start of the raw body.
fn error_body_message(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let error = parsed.as_ref().map(|value| &value["error"]);
    if let Some(message) = error.and_then(|e| e["message"].as_str().or_else(|| e.as_str())) {
        return message.chars().take(ERROR_BODY_EXCERPT_MAX_CHARS).collect();
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() { "(empty body)".to_owned() } else { text.chars().take(ERROR_BODY_EXCERPT_MAX_CHARS).collect() }
}

/// A failed attempt: the error, and how long the server asked to wait before the next one.
#[derive(Debug)]
pub(crate) struct Failure {
    pub error: LlmError,
    pub retry_after: Option<Duration>,
}

impl From<LlmError> for Failure {
    fn from(error: LlmError) -> Self {
        Self { error, retry_after: None }
    }
}

/// What async-openai's error means for this client. Bodies are never quoted whole (async-openai
/// puts the whole unparsable body in its message).
pub(crate) fn classify(error: OpenAIError, answer_bytes_max: usize) -> Failure {
    let too_large = LlmError::AnswerTooLarge { bytes_max: answer_bytes_max };
    let error = match error {
        OpenAIError::Boxed(boxed) => {
            if let Some(failure) = boxed.downcast_ref::<StatusFailure>() {
                return Failure {
                    error: LlmError::Http { status: failure.status.as_u16(), message: failure.message.clone() },
                    retry_after: failure.retry_after,
                };
            }
            if boxed.downcast_ref::<TooLarge>().is_some() { too_large } else { LlmError::Transport(boxed.to_string()) }
        }
        OpenAIError::Reqwest(error) if over_limit(&error) => too_large,
        OpenAIError::Reqwest(error) if error.is_connect() => LlmError::Transport(error.to_string()),
        OpenAIError::Reqwest(error) => LlmError::Transport(format!("the exchange failed: {error}")),
        OpenAIError::JSONDeserialize(error, _) => {
            LlmError::BadResponse(format!("the body is not a chat completion ({error})"))
        }
        // Stream errors arrive as text only; the body limit's error says "length limit exceeded".
        OpenAIError::StreamError(error) if error.to_string().contains(LENGTH_LIMIT_TEXT) => too_large,
        OpenAIError::StreamError(error) => LlmError::BadResponse(format!("the event stream broke: {error}")),
        OpenAIError::ApiError(api) => LlmError::Http {
            status: api.status_code.as_u16(),
            message: api.api_error.message.chars().take(ERROR_BODY_EXCERPT_MAX_CHARS).collect(),
        },
        other => LlmError::BadResponse(other.to_string()),
    };
    error.into()
}

/// The text of [`http_body_util::LengthLimitError`], as it reaches a stream error.
const LENGTH_LIMIT_TEXT: &str = "length limit exceeded";

/// Whether `error` was caused by the body limit.
fn over_limit(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if cause.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
            return true;
        }
        source = cause.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_url_keeps_its_path_and_query_and_drops_a_trailing_slash() {
        for base in ["http://h:1/v1", "http://h:1/v1/", " http://h:1/v1 "] {
            let config = EndpointConfig::new(base, None, "K").unwrap();
            assert_eq!(config.url("/chat/completions"), "http://h:1/v1/chat/completions", "{base}");
        }
        let hosted = EndpointConfig::new("https://h/openai/v1?api-version=2", None, "K").unwrap();
        assert_eq!(hosted.url("/chat/completions"), "https://h/openai/v1/chat/completions");
        assert_eq!(hosted.query(), [("api-version", "2")]);
        assert_eq!(hosted.display_url("/chat/completions"), "https://h/openai/v1/chat/completions?api-version=2");
        for bad in ["not a url", "ftp://h/v1", "mailto:someone@example.com"] {
            assert!(matches!(EndpointConfig::new(bad, None, "K"), Err(LlmError::InvalidConfig(_))), "{bad}");
        }
    }

    #[test]
    fn the_key_is_a_sensitive_header_and_never_printed() {
        let config = EndpointConfig::new("http://h/v1", Some("sk-very-secret".into()), "K").unwrap();
        let header = config.headers().remove(AUTHORIZATION).unwrap();
        assert!(header.is_sensitive());
        assert_eq!(header, "Bearer sk-very-secret");
        assert!(!format!("{config:?}").contains("sk-very-secret"));
        for none in [None, Some("  ".to_owned())] {
            assert!(EndpointConfig::new("http://h/v1", none, "K").unwrap().headers().is_empty());
        }
        let newline = EndpointConfig::new("http://h/v1", Some("sk-a\nb".into()), "MY_KEY").unwrap_err();
        assert!(newline.to_string().contains("MY_KEY") && !newline.to_string().contains("sk-a"), "{newline}");
    }

    #[test]
    fn error_bodies_yield_their_message_shortened() {
        assert_eq!(
            error_body_message(br#"{"error": {"message": "model overloaded", "type": "server"}}"#),
            "model overloaded"
        );
        assert_eq!(error_body_message(br#"{"error": "model not found"}"#), "model not found");
        assert_eq!(error_body_message(b"  Bad Gateway\n"), "Bad Gateway");
        assert_eq!(error_body_message(b""), "(empty body)");
        assert_eq!(error_body_message(&[b'x'; 1000]).len(), ERROR_BODY_EXCERPT_MAX_CHARS);
    }

    #[tokio::test]
    async fn the_length_limit_text_is_the_limits_own() {
        use http_body_util::BodyExt;
        let body = http_body_util::Limited::new(http_body_util::Full::new(bytes::Bytes::from_static(b"abc")), 2);
        let error = body.collect().await.unwrap_err();
        assert!(error.downcast_ref::<http_body_util::LengthLimitError>().is_some());
        assert!(error.to_string().contains(LENGTH_LIMIT_TEXT), "{error}");
    }
}
