//! A scripted model behind the loop's [`ChatModel`] seam, with the shape of `mesh-test-support`'s
//! scripted OpenAI-compatible server (steps in, recorded requests out), for the tests to run
//! before that server is on this branch.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llm_agent::{ChatModel, ModelError, ModelReply, ModelRequest, ToolCall};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct LlmStep {
    reply: Result<ModelReply, ModelError>,
    delay: Option<Duration>,
}

impl LlmStep {
    pub fn text(text: impl Into<String>) -> Self {
        Self { reply: Ok(ModelReply { text: text.into(), tool_calls: Vec::new() }), delay: None }
    }

    pub fn tool_call(name: &str, arguments: Value) -> Self {
        Self::tool_calls([(name, arguments)])
    }

    pub fn tool_calls<'a>(calls: impl IntoIterator<Item = (&'a str, Value)>) -> Self {
        let tool_calls = calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, arguments))| ToolCall {
                id: format!("call_{i}"),
                name: name.into(),
                arguments: arguments.to_string(),
            })
            .collect();
        Self { reply: Ok(ModelReply { text: String::new(), tool_calls }), delay: None }
    }

    pub fn malformed_tool_call(name: &str) -> Self {
        let call = ToolCall { id: "call_0".into(), name: name.into(), arguments: "{\"agent_id\": \"x".into() };
        Self { reply: Ok(ModelReply { text: String::new(), tool_calls: vec![call] }), delay: None }
    }

    pub fn huge_text(bytes: usize) -> Self {
        Self::text("x".repeat(bytes))
    }

    pub fn failing(error: ModelError) -> Self {
        Self { reply: Err(error), delay: None }
    }

    pub fn delayed(self, delay: Duration) -> Self {
        Self { delay: Some(delay), ..self }
    }
}

/// One request the model received.
#[derive(Debug, Clone)]
pub struct RecordedRequest(ModelRequest);

impl RecordedRequest {
    /// The messages as the chat-completions API has them, the system prompt first.
    pub fn messages(&self) -> Vec<Value> {
        let mut messages = vec![json!({"role": "system", "content": self.0.system})];
        messages.extend(self.0.messages.iter().map(|m| json!({"role": m.role, "content": m.content})));
        messages
    }

    pub fn roles(&self) -> Vec<String> {
        self.messages().iter().map(|m| m["role"].as_str().unwrap_or_default().to_owned()).collect()
    }

    pub fn system_prompt(&self) -> Option<String> {
        Some(self.0.system.clone())
    }

    pub fn tool_names(&self) -> Vec<String> {
        self.0.tools.iter().map(|t| t.name.clone()).collect()
    }

    pub fn last_content(&self) -> Option<String> {
        self.0.messages.last().map(|m| m.content.clone())
    }
}

#[derive(Debug, Default)]
struct State {
    script: Mutex<VecDeque<LlmStep>>,
    repeat: Option<LlmStep>,
    requests: Mutex<Vec<RecordedRequest>>,
    received: Notify,
}

/// The scripted model; clones share the script and the record.
#[derive(Debug, Clone, Default)]
pub struct ScriptedLlm(Arc<State>);

impl ScriptedLlm {
    pub async fn start(steps: impl IntoIterator<Item = LlmStep>) -> Self {
        Self(Arc::new(State { script: Mutex::new(steps.into_iter().collect()), ..State::default() }))
    }

    pub async fn repeating(step: LlmStep) -> Self {
        Self(Arc::new(State { repeat: Some(step), ..State::default() }))
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.0.requests.lock().unwrap().clone()
    }

    pub async fn wait_for_requests(&self, count: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.0.received.notified();
            let requests = self.requests();
            if requests.len() >= count {
                return requests;
            }
            let left = deadline.checked_duration_since(Instant::now()).expect("the requests never came");
            let _ = tokio::time::timeout(left, notified).await;
        }
    }
}

#[async_trait::async_trait]
impl ChatModel for ScriptedLlm {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ModelError> {
        self.0.requests.lock().unwrap().push(RecordedRequest(request));
        self.0.received.notify_waiters();
        let step = self.0.script.lock().unwrap().pop_front().or_else(|| self.0.repeat.clone());
        let Some(step) = step else { return Err(ModelError::Invalid("the script is used up".into())) };
        if let Some(delay) = step.delay {
            tokio::time::sleep(delay).await;
        }
        step.reply
    }
}
