//! A streamed answer: the deltas as they arrive, and the answer they assemble into.

use std::collections::{BTreeMap, VecDeque};

use async_openai::types::stream::StreamResponse;
use futures::StreamExt;
use serde::Deserialize;
use tokio::time::Instant;

use crate::chat::{ChatAnswer, TokenUsage, ToolCall, WireUsage};
use crate::config::LlmConfig;
use crate::error::LlmError;
use crate::http::classify;
use crate::telemetry::CallTelemetry;

/// Most distinct tool calls one streamed answer may build: each index the model names opens one,
/// and an answer naming thousands is broken, not ambitious.
pub const STREAM_TOOL_CALLS_MAX: usize = 128;

/// One piece of a streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatDelta {
    /// More of the answer's text.
    Text(String),
    /// More of tool call number `index`: its id and name when they first arrive, and the next
    /// fragment of its arguments (JSON text, which is only whole once the stream ends).
    ToolCall { index: u32, id: Option<String>, name: Option<String>, arguments: String },
}

/// A streamed chat completion being read. [`Self::next_delta`] gives the deltas one by one;
/// [`Self::finish`] reads the rest and returns the whole answer. Both stop at the call's
/// deadline, and at `answer_bytes_max` bytes of text and arguments.
pub struct ChatStream {
    events: StreamResponse<WireChunk>,
    deadline: Instant,
    timeout_ms: u64,
    answer_bytes_max: usize,
    pending: VecDeque<ChatDelta>,
    assembly: Assembly,
    telemetry: CallTelemetry,
    /// Set once the stream has ended or failed: the outcome is recorded once.
    done: Option<Result<(), LlmError>>,
}

impl std::fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStream").field("pending", &self.pending).field("done", &self.done).finish_non_exhaustive()
    }
}

impl ChatStream {
    pub(crate) fn new(
        events: StreamResponse<WireChunk>,
        deadline: Instant,
        config: &LlmConfig,
        telemetry: CallTelemetry,
    ) -> Self {
        Self {
            events,
            deadline,
            timeout_ms: config.timeout_ms,
            answer_bytes_max: config.answer_bytes_max,
            pending: VecDeque::new(),
            assembly: Assembly::default(),
            telemetry,
            done: None,
        }
    }

    /// The next delta; `None` once the stream has ended. An error ends the stream.
    pub async fn next_delta(&mut self) -> Option<Result<ChatDelta, LlmError>> {
        loop {
            if let Some(delta) = self.pending.pop_front() {
                return Some(Ok(delta));
            }
            match &self.done {
                Some(Ok(())) => return None,
                Some(Err(error)) => return Some(Err(error.clone())),
                None => {}
            }
            if let Err(error) = self.read_chunk().await {
                self.fail(error);
            }
        }
    }

    /// Reads the rest of the stream and returns the assembled answer.
    pub async fn finish(mut self) -> Result<ChatAnswer, LlmError> {
        while let Some(delta) = self.next_delta().await {
            delta?;
        }
        let answer = std::mem::take(&mut self.assembly).into_answer();
        if let Err(error) = &answer {
            // The stream ended well but said nothing usable.
            self.telemetry.finish(Err(error));
        }
        answer
    }

    /// Reads one event, queueing its deltas; at the end, records the answer.
    async fn read_chunk(&mut self) -> Result<(), LlmError> {
        let event = match tokio::time::timeout_at(self.deadline, self.events.next()).await {
            Err(_) => return Err(LlmError::Timeout { timeout_ms: self.timeout_ms }),
            Ok(None) => {
                self.done = Some(Ok(()));
                if let Ok(answer) = self.assembly.clone().into_answer() {
                    self.telemetry.finish(Ok(&answer));
                }
                return Ok(());
            }
            Ok(Some(event)) => event.map_err(|e| classify(e, self.answer_bytes_max).error)?,
        };
        let deltas = self.assembly.add(event)?;
        if self.assembly.bytes > self.answer_bytes_max {
            return Err(LlmError::AnswerTooLarge { bytes_max: self.answer_bytes_max });
        }
        self.pending.extend(deltas);
        Ok(())
    }

    fn fail(&mut self, error: LlmError) {
        self.telemetry.finish(Err(&error));
        self.pending.clear();
        self.done = Some(Err(error));
    }
}

/// What the chunks so far add up to.
#[derive(Debug, Clone, Default)]
struct Assembly {
    text: Option<String>,
    calls: BTreeMap<u32, ToolCall>,
    finish_reason: Option<String>,
    usage: Option<TokenUsage>,
    model: Option<String>,
    refusal: Option<String>,
    /// Bytes of text and arguments so far.
    bytes: usize,
}

impl Assembly {
    fn add(&mut self, chunk: WireChunk) -> Result<Vec<ChatDelta>, LlmError> {
        if chunk.model.is_some() {
            self.model = chunk.model;
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into());
        }
        let mut deltas = Vec::new();
        // Only the first choice is read, as in a whole answer (`n` is never asked for).
        for choice in chunk.choices.into_iter().filter(|choice| choice.index == 0) {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let delta = choice.delta;
            if let Some(refusal) = delta.refusal {
                self.refusal.get_or_insert_default().push_str(&refusal);
            }
            if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
                self.bytes += text.len();
                self.text.get_or_insert_default().push_str(&text);
                deltas.push(ChatDelta::Text(text));
            }
            for part in delta.tool_calls {
                if !self.calls.contains_key(&part.index) && self.calls.len() >= STREAM_TOOL_CALLS_MAX {
                    return Err(LlmError::BadResponse(format!(
                        "the streamed answer opens more than {STREAM_TOOL_CALLS_MAX} tool calls"
                    )));
                }
                let call = self.calls.entry(part.index).or_insert_with(|| ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
                let function = part.function.unwrap_or_default();
                // Ids and names arrive once (OpenAI) or with every fragment (some servers): the first is kept.
                let id = part.id.filter(|id| !id.is_empty() && call.id.is_empty());
                let name = function.name.filter(|name| !name.is_empty() && call.name.is_empty());
                if let Some(id) = &id {
                    call.id.clone_from(id);
                }
                if let Some(name) = &name {
                    self.bytes += name.len();
                    call.name.clone_from(name);
                }
                let arguments = function.arguments.unwrap_or_default();
                self.bytes += arguments.len();
                call.arguments.push_str(&arguments);
                deltas.push(ChatDelta::ToolCall { index: part.index, id, name, arguments });
            }
        }
        Ok(deltas)
    }

    fn into_answer(self) -> Result<ChatAnswer, LlmError> {
        let has_text = self.text.as_deref().is_some_and(|text| !text.trim().is_empty());
        if !has_text && self.calls.is_empty() {
            return Err(LlmError::BadResponse(match self.refusal {
                Some(refusal) => format!("the model refused to answer: {refusal}"),
                None => "the streamed answer has neither content nor tool calls".to_owned(),
            }));
        }
        Ok(ChatAnswer {
            content: self.text,
            tool_calls: self.calls.into_values().collect(),
            finish_reason: self.finish_reason,
            usage: self.usage,
            model: self.model,
        })
    }
}

// --- chunks, read as leniently as whole answers (see `chat.rs`) ---

#[derive(Debug, Deserialize)]
pub(crate) struct WireChunk {
    #[serde(default)]
    choices: Vec<WireChunkChoice>,
    usage: Option<WireUsage>,
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireChunkChoice {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    delta: WireDelta,
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireDelta {
    content: Option<String>,
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireToolCallPart>,
}

#[derive(Debug, Deserialize)]
struct WireToolCallPart {
    #[serde(default)]
    index: u32,
    id: Option<String>,
    function: Option<WireFunctionPart>,
}

#[derive(Debug, Default, Deserialize)]
struct WireFunctionPart {
    name: Option<String>,
    arguments: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn chunk(value: serde_json::Value) -> WireChunk {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn text_and_tool_call_fragments_assemble_in_order() {
        let mut assembly = Assembly::default();
        let chunks = [
            json!({"model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let me "}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "look."}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 1, "id": "c2", "type": "function", "function": {"name": "b", "arguments": ""}},
                {"index": 0, "id": "c1", "type": "function", "function": {"name": "a", "arguments": "{\"x\""}}
            ]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "b", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 5}}),
        ];
        let mut deltas = Vec::new();
        for value in chunks {
            deltas.extend(assembly.add(chunk(value)).unwrap());
        }
        assert_eq!(deltas[0], ChatDelta::Text("Let me ".into()));
        assert_eq!(
            deltas[3],
            ChatDelta::ToolCall { index: 0, id: Some("c1".into()), name: Some("a".into()), arguments: "{\"x\"".into() }
        );
        // A repeated id and name are not new.
        assert_eq!(deltas[5], ChatDelta::ToolCall { index: 1, id: None, name: None, arguments: "{}".into() });
        let answer = assembly.into_answer().unwrap();
        assert_eq!(answer.text(), Some("Let me look."));
        let calls: Vec<(&str, &str, &str)> =
            answer.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str())).collect();
        assert_eq!(calls, [("c1", "a", "{\"x\": 1}"), ("c2", "b", "{}")]);
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(answer.usage, Some(TokenUsage { input_tokens: 11, output_tokens: 5 }));
        assert_eq!(answer.model.as_deref(), Some("m"));
    }

    #[test]
    fn too_many_tool_calls_or_an_empty_stream_are_bad_responses() {
        let mut assembly = Assembly::default();
        let parts: Vec<_> = (0..=STREAM_TOOL_CALLS_MAX as u32)
            .map(|index| json!({"index": index, "id": format!("c{index}"), "function": {"name": "t"}}))
            .collect();
        let error = assembly.add(chunk(json!({"choices": [{"delta": {"tool_calls": parts}}]}))).unwrap_err();
        assert!(matches!(error, LlmError::BadResponse(_)), "{error:?}");

        let empty = Assembly::default().into_answer().unwrap_err();
        assert!(matches!(empty, LlmError::BadResponse(_)), "{empty:?}");
    }
}
