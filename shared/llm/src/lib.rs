//! A client for any OpenAI-compatible chat-completions endpoint (OpenRouter, vLLM, Ollama,
//! llama.cpp's server, OpenAI), built on async-openai with its base URL set.
//!
//! - [`LlmClient::chat`] sends a conversation ([`ChatRequest`]: messages in the system, user,
//!   assistant and tool roles, and the [`ToolSpec`]s offered) and returns a [`ChatAnswer`]: text,
//!   or tool calls whose arguments are the model's raw, untrusted text.
//! - [`LlmClient::chat_stream`] does the same as a stream of [`ChatDelta`]s ([`ChatStream`]).
//! - [`LlmClient::complete_json`] asks for a JSON object and validates it; with [`llm_or_rules`]
//!   the planning agents use it as an optional improvement over their rules.
//!
//! Every call has a timeout (retries included), retries 429 and 5xx answers with backoff, refuses
//! answers over a size cap, and is observed with OpenTelemetry's GenAI conventions: a span with
//! `gen_ai.*` attributes, and the metrics [`DURATION_METRIC`] and [`TOKEN_USAGE_METRIC`]. Every
//! way a call can fail is a distinct [`LlmError`]. The API key goes to the endpoint only.

mod chat;
mod client;
mod config;
mod error;
mod fallback;
mod http;
mod stream;
mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;

pub use chat::{ChatAnswer, ChatMessage, ChatRequest, TokenUsage, ToolCall, ToolSpec};
pub use client::{LlmClient, api_key_from_env};
pub use config::{
    API_KEY_ENV_DEFAULT, LLM_ANSWER_BYTES_MAX_DEFAULT, LLM_RETRIES_MAX_DEFAULT, LLM_TIMEOUT_MS_DEFAULT, LlmConfig,
};
pub use error::LlmError;
pub use fallback::{FALLBACK_WARNING, llm_or_rules};
pub use stream::{ChatDelta, ChatStream, STREAM_TOOL_CALLS_MAX};
pub use telemetry::{DURATION_METRIC, TOKEN_USAGE_METRIC};
