use serde::Deserialize;

/// Time allowed for one chat completion; planning falls back to rules after this, so it stays short.
pub const LLM_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Environment variable read for the API key unless the config names another.
pub const API_KEY_ENV_DEFAULT: &str = "OPENAI_API_KEY";

/// Where the LLM is and how to call it. The default has an empty `base_url` and `model`, which
/// means "no LLM": [`crate::LlmClient::new`] then answers [`crate::LlmError::NotConfigured`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Base URL of the OpenAI-compatible API, including its version prefix, e.g.
    /// `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// Model name sent with every request.
    pub model: String,
    /// Name of the environment variable holding the API key (the key itself never sits in config).
    pub api_key_env: String,
    /// Time allowed for one whole call, from sending the request to reading the answer.
    pub timeout_ms: u64,
    /// Sampling temperature; 0 keeps answers as repeatable as the model allows.
    pub temperature: f64,
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

        assert!(!LlmConfig::default().is_configured());
        assert!(serde_json::from_str::<LlmConfig>(r#"{"api_key": "sk-oops"}"#).is_err());
    }
}
