/// Why a call produced no usable answer. For the planners every variant means "fall back to the
/// rules"; the variants differ in what an operator should change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// `base_url` or `model` is empty: the LLM is switched off, not broken.
    #[error("no LLM is configured: set `base_url` and `model` in the LLM config to use one")]
    NotConfigured,
    /// The config is set but unusable, e.g. `base_url` is not an http(s) URL.
    #[error("the LLM config is invalid: {0}")]
    InvalidConfig(String),
    /// No complete answer arrived within `timeout_ms`.
    #[error("the LLM did not answer within {timeout_ms} ms; raise `timeout_ms` or use a faster model")]
    Timeout { timeout_ms: u64 },
    /// The endpoint answered with a non-2xx status (after the retries a 429 or 5xx gets);
    /// `message` is its error text, shortened.
    #[error("the LLM endpoint answered HTTP {status}: {message}")]
    Http { status: u16, message: String },
    /// No HTTP answer at all: connection refused, DNS failure, reset.
    #[error("cannot reach the LLM endpoint ({0}); check `base_url` and that the server is running")]
    Transport(String),
    /// The answer is larger than `answer_bytes_max`: refused, not truncated, since a cut answer
    /// (half a JSON object, half a tool call) would mislead.
    #[error("the LLM answer is larger than {bytes_max} bytes (`answer_bytes_max`); it was refused")]
    AnswerTooLarge { bytes_max: usize },
    /// A 2xx answer that is not a chat completion with content or tool calls.
    #[error("the LLM endpoint's answer is unusable: {0}; check that `base_url` points at an OpenAI-compatible API")]
    BadResponse(String),
    /// The model's content is not JSON of the expected shape.
    #[error("the model did not answer with the JSON asked for: {0}")]
    InvalidJson(String),
    /// The JSON parsed, but the caller's validation refused it.
    #[error("the model's answer was refused: {0}")]
    Rejected(String),
}

impl LlmError {
    /// The `error.type` of a span and the `error_type` label of the duration metric
    /// (OpenTelemetry semantic conventions): a low-cardinality name.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotConfigured => "not_configured",
            Self::InvalidConfig(_) => "invalid_config",
            Self::Timeout { .. } => "timeout",
            Self::Http { status: 429, .. } => "rate_limited",
            Self::Http { status, .. } if *status >= 500 => "server_error",
            Self::Http { .. } => "http_error",
            Self::Transport(_) => "transport",
            Self::AnswerTooLarge { .. } => "answer_too_large",
            Self::BadResponse(_) => "bad_response",
            Self::InvalidJson(_) => "invalid_json",
            Self::Rejected(_) => "rejected",
        }
    }

    /// Whether another attempt may succeed: rate limiting (429) and server errors (5xx) only.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Http { status, .. } if *status == 429 || *status >= 500)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_rate_limits_and_server_errors_are_retryable() {
        let http = |status| LlmError::Http { status, message: String::new() };
        for status in [429, 500, 502, 503, 504] {
            assert!(http(status).is_retryable(), "{status}");
        }
        for error in [
            http(400),
            http(401),
            http(404),
            http(422),
            LlmError::Timeout { timeout_ms: 1 },
            LlmError::Transport("refused".into()),
            LlmError::AnswerTooLarge { bytes_max: 1 },
            LlmError::BadResponse("x".into()),
        ] {
            assert!(!error.is_retryable(), "{error:?}");
        }
        assert_eq!(http(429).kind(), "rate_limited");
        assert_eq!(http(503).kind(), "server_error");
        assert_eq!(http(400).kind(), "http_error");
    }
}
