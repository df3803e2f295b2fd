use serde::Deserialize;

/// Time allowed for one chat call, retries included; planning falls back to rules after this, so
/// it stays short.
pub const LLM_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Environment variable read for the API key unless the config names another.
pub const API_KEY_ENV_DEFAULT: &str = "OPENAI_API_KEY";
/// Further attempts after a 429 or 5xx answer, within the call's timeout.
pub const LLM_RETRIES_MAX_DEFAULT: u32 = 2;
/// Largest answer read: a chat completion's body, or the text and tool-call arguments a stream
/// assembles. A model (or a proxy) answering megabytes is refused rather than held in memory;
/// this is far above what a chat answer with tool calls needs.
pub const LLM_ANSWER_BYTES_MAX_DEFAULT: usize = 256 * 1024;

/// Where the LLM is and how to call it. The default has an empty `base_url` and `model`, which
/// means "no LLM": [`crate::LlmClient::new`] then answers [`crate::LlmError::NotConfigured`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Base URL of the OpenAI-compatible API, including its version prefix, e.g.
    /// `https://openrouter.ai/api/v1`, `http://127.0.0.1:11434/v1` (Ollama) or
    /// `http://127.0.0.1:8080/v1` (llama.cpp, vLLM); `/chat/completions` is appended.
    pub base_url: String,
    /// Model name sent with every request.
    pub model: String,
    /// Name of the environment variable holding the API key (the key itself never sits in config).
    pub api_key_env: String,
    /// Time allowed for one whole call, from sending the first request to reading the last byte
    /// of the answer, retries and their waits included.
    pub timeout_ms: u64,
    /// Sampling temperature; 0 keeps answers as repeatable as the model allows.
    pub temperature: f64,
    /// Further attempts after an answer of 429 (rate limited) or 5xx; other failures are not
    /// retried (a 400 will not get better, and a timeout has used the call's time).
    pub retries_max: u32,
    /// Largest answer accepted, in bytes (see [`LLM_ANSWER_BYTES_MAX_DEFAULT`]).
    pub answer_bytes_max: usize,
    /// Upper bound on the tokens the model may generate per call (`max_completion_tokens`);
    /// unset leaves it to the server.
    pub max_output_tokens: Option<u32>,
}

impl LlmConfig {
    /// True when both `base_url` and `model` are set.
    pub fn is_configured(&self) -> bool {
        !self.base_url.trim().is_empty() && !self.model.trim().is_empty()
    }
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            model: String::new(),
            api_key_env: API_KEY_ENV_DEFAULT.into(),
            timeout_ms: LLM_TIMEOUT_MS_DEFAULT,
            temperature: 0.0,
            retries_max: LLM_RETRIES_MAX_DEFAULT,
            answer_bytes_max: LLM_ANSWER_BYTES_MAX_DEFAULT,
            max_output_tokens: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_keys_take_defaults_and_unknown_keys_are_refused() {
        let config: LlmConfig =
            serde_json::from_str(r#"{"base_url": "http://127.0.0.1:11434/v1", "model": "qwen"}"#).unwrap();
        assert!(config.is_configured());
        assert_eq!(config.api_key_env, API_KEY_ENV_DEFAULT);
        assert_eq!(config.timeout_ms, LLM_TIMEOUT_MS_DEFAULT);
        assert_eq!(config.temperature, 0.0);
        assert_eq!(config.retries_max, LLM_RETRIES_MAX_DEFAULT);
        assert_eq!(config.answer_bytes_max, LLM_ANSWER_BYTES_MAX_DEFAULT);
        assert_eq!(config.max_output_tokens, None);

        assert!(!LlmConfig::default().is_configured());
        assert!(serde_json::from_str::<LlmConfig>(r#"{"api_key": "sk-oops"}"#).is_err());
    }
}
