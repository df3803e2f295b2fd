//! The tools an LLM agent may call. Everything a model writes is untrusted: a call names a tool
//! the agent was offered, and its arguments pass the tool's JSON schema, or the model gets a
//! tool error back as the call's result; no tool call ever fails the turn. There is no shell tool.

mod mcp;
mod mesh;

use std::collections::HashMap;
use std::sync::Arc;

use mesh_client::CallScope;
use serde_json::Value;

use crate::model::{ToolCall, ToolSpec};
pub use mcp::{McpServer, McpServerTool, TOOL_DESCRIPTION_CHARS_MAX, TOOL_NAME_CHARS_MAX, exposed_name};
pub use mesh::{CallAgentTool, ListAgentsTool, MeshTools, SendAgentMessageTool};

/// Agents or lines one tool output lists at most.
pub const TOOL_LIST_ENTRIES_MAX: usize = 32;
/// Schema errors quoted back to the model at most.
const SCHEMA_ERRORS_SHOWN_MAX: usize = 3;

/// One tool.
#[async_trait::async_trait]
pub trait Tool: Send + Sync + std::fmt::Debug {
    fn spec(&self) -> ToolSpec;

    /// Whether the tool is offered to `agent` now (a link-bound tool only while a link allows it).
    fn offered(&self, _agent: &str) -> bool {
        true
    }

    /// Runs a call whose arguments passed the schema; `Err` is a tool error for the model.
    async fn run(&self, scope: &CallScope, arguments: Value) -> Result<String, String>;
}

/// An agent's tools, each with its compiled schema.
#[derive(Debug, Default)]
pub struct Toolbox {
    tools: Vec<(Arc<dyn Tool>, Arc<jsonschema::Validator>)>,
    by_name: HashMap<String, usize>,
}

impl Toolbox {
    /// With `tool` added (see [`Self::add`]).
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Result<Self, String> {
        self.add(tool)?;
        Ok(self)
    }

    /// Adds `tool` if its schema compiles and its name is new; else says why and adds nothing.
    pub fn add(&mut self, tool: Arc<dyn Tool>) -> Result<(), String> {
        let spec = tool.spec();
        if self.by_name.contains_key(&spec.name) {
            return Err(format!("two tools are named {}", spec.name));
        }
        let validator = jsonschema::validator_for(&spec.parameters)
            .map_err(|e| format!("the schema of tool {} does not compile: {e}", spec.name))?;
        self.by_name.insert(spec.name, self.tools.len());
        self.tools.push((tool, Arc::new(validator)));
        Ok(())
    }

    /// Whether a tool has this name.
    pub fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The tools offered to `agent` now.
    pub fn offered(&self, agent: &str) -> Vec<ToolSpec> {
        self.tools.iter().filter(|(tool, _)| tool.offered(agent)).map(|(tool, _)| tool.spec()).collect()
    }

    /// Runs one call on behalf of `scope`: the tool's output, or a tool error, as text. Never
    /// fails: whatever the model wrote, the answer is something the model can read.
    pub async fn run(&self, scope: &CallScope, call: &ToolCall) -> ToolOutcome {
        let Some((tool, validator)) = self.by_name.get(&call.name).map(|&i| &self.tools[i]) else {
            return ToolOutcome::error(format!("there is no tool named {:?}", call.name));
        };
        if !tool.offered(scope.agent()) {
            return ToolOutcome::error(format!("the tool {} is not offered to you now", call.name));
        }
        let arguments: Value =
            match serde_json::from_str(if call.arguments.trim().is_empty() { "{}" } else { &call.arguments }) {
                Ok(arguments) => arguments,
                Err(error) => return ToolOutcome::error(format!("the arguments are not JSON: {error}")),
            };
        let errors: Vec<String> =
            validator.iter_errors(&arguments).take(SCHEMA_ERRORS_SHOWN_MAX).map(|e| describe(&e)).collect();
        if !errors.is_empty() {
            return ToolOutcome::error(format!("invalid arguments: {}", errors.join("; ")));
        }
        match tool.run(scope, arguments).await {
            Ok(text) => ToolOutcome { text, failed: false },
            Err(why) => ToolOutcome::error(why),
        }
    }
}

fn describe(error: &jsonschema::ValidationError<'_>) -> String {
    let path = error.instance_path().to_string();
    if path.is_empty() { error.to_string() } else { format!("{path}: {error}") }
}

/// A call's result as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    pub text: String,
    pub failed: bool,
}

impl ToolOutcome {
    pub fn error(why: String) -> Self {
        Self { text: format!("error: {why}"), failed: true }
    }
}

#[cfg(test)]
mod tests {
    use mesh_protocol::call::CallContext;
    use serde_json::json;

    use super::*;

    #[derive(Debug)]
    struct Echo;

    #[async_trait::async_trait]
    impl Tool for Echo {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "echo".into(),
                description: "Echoes".into(),
                parameters: json!({"type": "object", "properties": {"text": {"type": "string", "maxLength": 5}},
                    "required": ["text"], "additionalProperties": false}),
            }
        }

        async fn run(&self, _scope: &CallScope, arguments: Value) -> Result<String, String> {
            Ok(arguments["text"].as_str().unwrap_or_default().to_owned())
        }
    }

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall { id: "c1".into(), name: name.into(), arguments: arguments.into() }
    }

    #[tokio::test]
    async fn bad_calls_are_tool_errors_the_model_can_read() {
        let tools = Toolbox::default().with(Arc::new(Echo)).unwrap();
        let scope = CallScope::received("me", CallContext::default());
        assert_eq!(
            tools.run(&scope, &call("echo", r#"{"text":"hi"}"#)).await,
            ToolOutcome { text: "hi".into(), failed: false }
        );
        for (name, arguments, expected) in [
            ("shell", "{}", "no tool named \"shell\""),
            ("echo", "{not json", "not JSON"),
            ("echo", "{}", "\"text\" is a required property"),
            ("echo", r#"{"text":"far too long"}"#, "/text"),
            ("echo", r#"{"text":"a","rm":"-rf"}"#, "Additional properties"),
        ] {
            let outcome = tools.run(&scope, &call(name, arguments)).await;
            assert!(outcome.failed && outcome.text.starts_with("error: "), "{outcome:?}");
            assert!(outcome.text.contains(expected), "{expected:?} missing from {:?}", outcome.text);
        }
        assert!(Toolbox::default().with(Arc::new(Echo)).unwrap().with(Arc::new(Echo)).is_err());
        assert_eq!(tools.offered("me")[0].name, "echo");
    }
}
