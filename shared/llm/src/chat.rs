//! What a chat call sends and what it gets back, in the crate's own small types; the wire shapes
//! are async-openai's request types and the lenient answer types at the end of this module.

use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls, ChatCompletionRequestAssistantMessage,
    ChatCompletionRequestAssistantMessageContent, ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestToolMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestUserMessage, ChatCompletionRequestUserMessageContent,
    ChatCompletionTool, ChatCompletionTools, FunctionCall, FunctionObject,
};
use serde::Deserialize;
use serde_json::Value;

/// One message of a conversation, in the roles of the chat-completions API.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    /// Instructions: the agent's role, its organisation, its tools.
    System(String),
    /// What a person (or, in seed 001's loop, a tool's output) says.
    User(String),
    /// What the model said before: text, tool calls, or both.
    Assistant { content: Option<String>, tool_calls: Vec<ToolCall> },
    /// The output of the tool call `tool_call_id`, answering an assistant message's tool call.
    Tool { tool_call_id: String, content: String },
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        Self::System(content.into())
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::User(content.into())
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant { content: Some(content.into()), tool_calls: Vec::new() }
    }

    /// The assistant message that asked for `tool_calls` (to precede their [`Self::Tool`] results).
    pub fn assistant_tool_calls(tool_calls: Vec<ToolCall>) -> Self {
        Self::Assistant { content: None, tool_calls }
    }

    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::Tool { tool_call_id: tool_call_id.into(), content: content.into() }
    }

    /// The role's name on the wire: `system`, `user`, `assistant` or `tool`.
    pub fn role(&self) -> &'static str {
        match self {
            Self::System(_) => "system",
            Self::User(_) => "user",
            Self::Assistant { .. } => "assistant",
            Self::Tool { .. } => "tool",
        }
    }
}

/// A tool the model may call: a function with a JSON-schema for its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// `a-z`, `A-Z`, `0-9`, `_` and `-`, at most 64 characters (the API's rule).
    pub name: String,
    /// When and why to use it: the model reads this to choose.
    pub description: String,
    /// A JSON schema of an object (`{"type": "object", "properties": {...}, "required": [...]}`).
    pub parameters: Value,
}

/// One call to the chat-completions endpoint.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    /// Offered to the model; empty offers none.
    pub tools: Vec<ToolSpec>,
    /// Asks for a JSON object as the answer (`response_format: json_object`).
    pub json_object: bool,
}

impl ChatRequest {
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        Self { messages, ..Self::default() }
    }

    pub fn with_tools(self, tools: Vec<ToolSpec>) -> Self {
        Self { tools, ..self }
    }

    pub fn json_object(self) -> Self {
        Self { json_object: true, ..self }
    }
}

/// A tool call the model asked for. Everything in it is the model's output, hence untrusted:
/// the name may name no offered tool, and `arguments` may not be JSON at all.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The id a [`ChatMessage::Tool`] result refers to.
    pub id: String,
    pub name: String,
    /// The arguments exactly as the model wrote them (JSON, when the model behaves).
    pub arguments: String,
}

impl ToolCall {
    /// The arguments as a JSON object; the error says what is wrong, in words a model can act on
    /// when it is sent back as the tool's result.
    pub fn arguments_object(&self) -> Result<serde_json::Map<String, Value>, String> {
        let text = if self.arguments.trim().is_empty() { "{}" } else { self.arguments.as_str() };
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(object)) => Ok(object),
            Ok(other) => {
                Err(format!("the arguments of `{}` must be a JSON object, not {}", self.name, kind_of(&other)))
            }
            Err(error) => Err(format!("the arguments of `{}` are not valid JSON: {error}", self.name)),
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Tokens a call used, as the endpoint reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenUsage {
    /// The prompt: every message and tool definition sent.
    pub input_tokens: u64,
    /// The answer.
    pub output_tokens: u64,
}

/// The model's answer: text, tool calls, or (some models) both.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatAnswer {
    /// The text, when there is any.
    pub content: Option<String>,
    /// The tools the model asks to run, in its order; empty for a final answer.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped (`stop`, `length`, `tool_calls`, `content_filter`, or a server's own).
    pub finish_reason: Option<String>,
    /// `None` when the endpoint reported none.
    pub usage: Option<TokenUsage>,
    /// The model that answered, as the endpoint names it.
    pub model: Option<String>,
}

impl ChatAnswer {
    /// Whether the model asks for tools rather than giving its final answer.
    pub fn wants_tools(&self) -> bool {
        !self.tool_calls.is_empty()
    }

    /// The text, when there is some that is not blank.
    pub fn text(&self) -> Option<&str> {
        self.content.as_deref().filter(|text| !text.trim().is_empty())
    }
}

/// The request body as async-openai types it.
pub(crate) fn wire_messages(messages: &[ChatMessage]) -> Vec<ChatCompletionRequestMessage> {
    messages.iter().map(wire_message).collect()
}

fn wire_message(message: &ChatMessage) -> ChatCompletionRequestMessage {
    match message {
        ChatMessage::System(content) => ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
            content: ChatCompletionRequestSystemMessageContent::Text(content.clone()),
            name: None,
        }),
        ChatMessage::User(content) => ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
            content: ChatCompletionRequestUserMessageContent::Text(content.clone()),
            name: None,
        }),
        ChatMessage::Assistant { content, tool_calls } => {
            ChatCompletionRequestMessage::Assistant(ChatCompletionRequestAssistantMessage {
                content: content.clone().map(ChatCompletionRequestAssistantMessageContent::Text),
                tool_calls: (!tool_calls.is_empty()).then(|| {
                    tool_calls
                        .iter()
                        .map(|call| {
                            ChatCompletionMessageToolCalls::Function(ChatCompletionMessageToolCall {
                                id: call.id.clone(),
                                function: FunctionCall { name: call.name.clone(), arguments: call.arguments.clone() },
                            })
                        })
                        .collect()
                }),
                ..Default::default()
            })
        }
        ChatMessage::Tool { tool_call_id, content } => {
            ChatCompletionRequestMessage::Tool(ChatCompletionRequestToolMessage {
                content: ChatCompletionRequestToolMessageContent::Text(content.clone()),
                tool_call_id: tool_call_id.clone(),
            })
        }
    }
}

pub(crate) fn wire_tools(tools: &[ToolSpec]) -> Option<Vec<ChatCompletionTools>> {
    (!tools.is_empty()).then(|| {
        tools
            .iter()
            .map(|tool| {
                ChatCompletionTools::Function(ChatCompletionTool {
                    function: FunctionObject {
                        name: tool.name.clone(),
                        description: Some(tool.description.clone()),
                        parameters: Some(tool.parameters.clone()),
                        strict: None,
                    },
                })
            })
            .collect()
    })
}

// --- answers, read leniently: OpenAI-compatible servers differ in the fields they send (some
// omit `created` or `object`, some add finish reasons of their own), and a field this client does
// not use must not make an answer unusable. ---

#[derive(Debug, Deserialize)]
pub(crate) struct WireCompletion {
    #[serde(default)]
    pub choices: Vec<WireChoice>,
    pub usage: Option<WireUsage>,
    pub model: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireChoice {
    pub message: WireMessage,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireMessage {
    pub content: Option<String>,
    /// OpenAI's structured refusal, sent instead of content.
    pub refusal: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<WireToolCall>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireToolCall {
    #[serde(default)]
    pub id: String,
    pub function: WireFunction,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireFunction {
    #[serde(default)]
    pub name: String,
    /// Some servers send the arguments as a JSON object rather than a string of JSON.
    #[serde(default)]
    pub arguments: Option<Value>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

impl From<WireUsage> for TokenUsage {
    fn from(usage: WireUsage) -> Self {
        Self { input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens }
    }
}

/// The arguments as the raw text the model wrote; an object some servers send is written back
/// as JSON text, so callers see one shape.
pub(crate) fn raw_arguments(arguments: Option<Value>) -> String {
    match arguments {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text,
        Some(other) => other.to_string(),
    }
}

impl WireCompletion {
    /// The first choice as an answer; an answer with neither text nor tool calls is unusable.
    pub(crate) fn into_answer(self) -> Result<ChatAnswer, String> {
        let usage = self.usage.map(TokenUsage::from);
        let choice = self.choices.into_iter().next().ok_or("the answer has no choices")?;
        let message = choice.message;
        let tool_calls: Vec<ToolCall> = message
            .tool_calls
            .into_iter()
            .map(|call| ToolCall {
                id: call.id,
                name: call.function.name,
                arguments: raw_arguments(call.function.arguments),
            })
            .collect();
        let has_text = message.content.as_deref().is_some_and(|text| !text.trim().is_empty());
        if !has_text && tool_calls.is_empty() {
            return Err(match message.refusal {
                Some(refusal) => format!("the model refused to answer: {refusal}"),
                None => "the first choice has neither content nor tool calls".to_owned(),
            });
        }
        Ok(ChatAnswer {
            content: message.content,
            tool_calls,
            finish_reason: choice.finish_reason,
            usage,
            model: self.model,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn messages_take_the_wire_shape_of_their_role() {
        let call =
            ToolCall { id: "call_1".into(), name: "list_agents".into(), arguments: r#"{"capability":"x"}"#.into() };
        let messages = vec![
            ChatMessage::system("be brief"),
            ChatMessage::user("hello"),
            ChatMessage::assistant_tool_calls(vec![call]),
            ChatMessage::tool_result("call_1", "[]"),
            ChatMessage::assistant("done"),
        ];
        let wire = serde_json::to_value(wire_messages(&messages)).unwrap();
        assert_eq!(
            wire,
            json!([
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hello"},
                {"role": "assistant", "tool_calls": [
                    {"type": "function", "id": "call_1", "function": {"name": "list_agents", "arguments": "{\"capability\":\"x\"}"}}
                ]},
                {"role": "tool", "content": "[]", "tool_call_id": "call_1"},
                {"role": "assistant", "content": "done"},
            ])
        );
        let roles: Vec<&str> = messages.iter().map(ChatMessage::role).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
    }

    #[test]
    fn tools_are_functions_with_their_schema() {
        assert_eq!(wire_tools(&[]), None);
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
        let tools =
            wire_tools(&[ToolSpec { name: "search".into(), description: "finds".into(), parameters: schema.clone() }]);
        assert_eq!(
            serde_json::to_value(tools).unwrap(),
            json!([{"type": "function", "function": {"name": "search", "description": "finds", "parameters": schema}}])
        );
    }

    #[test]
    fn arguments_must_be_a_json_object() {
        let call = |arguments: &str| ToolCall { id: "c".into(), name: "t".into(), arguments: arguments.into() };
        assert_eq!(call(r#"{"a": 1}"#).arguments_object().unwrap()["a"], 1);
        assert!(call("").arguments_object().unwrap().is_empty(), "no arguments is an empty object");
        assert!(call("{\"a\": ").arguments_object().unwrap_err().contains("not valid JSON"));
        assert!(call("[1]").arguments_object().unwrap_err().contains("not an array"));
    }

    #[test]
    fn answers_are_read_leniently_and_need_text_or_tool_calls() {
        let minimal: WireCompletion =
            serde_json::from_value(json!({"choices": [{"message": {"content": "hi"}}]})).unwrap();
        let answer = minimal.into_answer().unwrap();
        assert_eq!((answer.text(), answer.finish_reason.as_deref(), answer.usage), (Some("hi"), None, None));

        let with_object_arguments: WireCompletion = serde_json::from_value(json!({
            "model": "m", "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
            "choices": [{"finish_reason": "tool_calls", "message": {"content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t", "arguments": {"a": 1}}}
            ]}}]
        }))
        .unwrap();
        let answer = with_object_arguments.into_answer().unwrap();
        assert!(answer.wants_tools());
        assert_eq!(answer.tool_calls[0].arguments, r#"{"a":1}"#);
        assert_eq!(answer.usage, Some(TokenUsage { input_tokens: 7, output_tokens: 3 }));
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));

        let empty: WireCompletion = serde_json::from_value(json!({"choices": []})).unwrap();
        assert!(empty.into_answer().unwrap_err().contains("no choices"));
        let refusal: WireCompletion =
            serde_json::from_value(json!({"choices": [{"message": {"content": null, "refusal": "no"}}]})).unwrap();
        assert!(refusal.into_answer().unwrap_err().contains("refused"));
    }
}
