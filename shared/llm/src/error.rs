/// Why a completion produced no usable answer. Every variant means "fall back to the rules"; the
/// variants differ in what an operator should change.
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
    /// The endpoint answered with a non-2xx status; `message` is its error text.
    #[error("the LLM endpoint answered HTTP {status}: {message}")]
    Http { status: u16, message: String },
    /// No HTTP answer at all: connection refused, DNS failure, reset.
    #[error("cannot reach the LLM endpoint ({0}); check `base_url` and that the server is running")]
    Transport(String),
    /// A 2xx answer that is not a chat completion with content.
    #[error("the LLM endpoint's answer is unusable: {0}; check that `base_url` points at an OpenAI-compatible API")]
    BadResponse(String),
    /// The model's content is not JSON of the expected shape.
    #[error("the model did not answer with the JSON asked for: {0}")]
    InvalidJson(String),
    /// The JSON parsed, but the caller's validation refused it.
    #[error("the model's answer was refused: {0}")]
    Rejected(String),
}
