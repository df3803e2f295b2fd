//! LLM agents defined by files: a folder per agent, `<folder>/<name>/agent.toml` (name,
//! description, the skills of its card, model, tools allowed, MCP servers, limits) and `ROLE.md`
//! beside it (seed 004: what the agent does, what it escalates). A folder named `templates` holds
//! prompt templates, not an agent.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::LlmAgentError;

/// The definition file of each agent, in its own folder.
pub const DEFINITION_FILE: &str = "agent.toml";
/// The role file beside it.
pub const ROLE_FILE: &str = "ROLE.md";
/// The folder of prompt templates beside the agents' folders.
pub const TEMPLATES_FOLDER: &str = "templates";
/// Largest `ROLE.md` read: it goes into every prompt.
pub const ROLE_BYTES_MAX: usize = 32 * 1024;
/// Most agents one folder may define.
pub const AGENTS_MAX: usize = 64;

/// Tool rounds (LLM calls that asked for tools) one turn may take before the model must answer.
pub const TOOL_ROUNDS_MAX_DEFAULT: usize = 8;
/// Tool calls run from one model answer; further ones are answered as not run.
pub const TOOL_CALLS_PER_ROUND_MAX_DEFAULT: usize = 8;
/// Tokens of conversation history sent at most (estimated at four bytes a token).
pub const HISTORY_TOKENS_MAX_DEFAULT: usize = 16_000;
/// Time one chat completion may take.
pub const LLM_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Time an A2A caller waits for a whole turn (every round and tool) when its call sets no deadline.
pub const TURN_TIMEOUT_MS_DEFAULT: u64 = 120_000;
/// Largest tool output kept (and shown to the model); the rest is cut with a note.
pub const TOOL_OUTPUT_BYTES_MAX_DEFAULT: usize = 16 * 1024;
/// Largest answer kept from the model; the rest is cut with a note.
pub const ANSWER_BYTES_MAX_DEFAULT: usize = 64 * 1024;

/// The tools an agent may be given. There is no shell tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolName {
    CallAgent,
    ListAgents,
    SendAgentMessage,
}

impl ToolName {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CallAgent => "call_agent",
            Self::ListAgents => "list_agents",
            Self::SendAgentMessage => "send_agent_message",
        }
    }
}

/// A skill of the agent's card.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillDefinition {
    pub id: String,
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub examples: Vec<String>,
}

/// The bounds of one agent's turns.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    pub tool_rounds_max: usize,
    pub tool_calls_per_round_max: usize,
    pub history_tokens_max: usize,
    pub llm_timeout_ms: u64,
    pub turn_timeout_ms: u64,
    pub tool_output_bytes_max: usize,
    pub answer_bytes_max: usize,
    /// Whether the messages that no longer fit `history_tokens_max` are summarised by the model
    /// (a `summary` node, one extra completion each time the window moves) or only dropped.
    pub summarise_history: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            tool_rounds_max: TOOL_ROUNDS_MAX_DEFAULT,
            tool_calls_per_round_max: TOOL_CALLS_PER_ROUND_MAX_DEFAULT,
            history_tokens_max: HISTORY_TOKENS_MAX_DEFAULT,
            llm_timeout_ms: LLM_TIMEOUT_MS_DEFAULT,
            turn_timeout_ms: TURN_TIMEOUT_MS_DEFAULT,
            tool_output_bytes_max: TOOL_OUTPUT_BYTES_MAX_DEFAULT,
            answer_bytes_max: ANSWER_BYTES_MAX_DEFAULT,
            summarise_history: true,
        }
    }
}

/// `agent.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFile {
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub skills: Vec<SkillDefinition>,
    /// The model asked; the service's default model when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// The port this agent listens on; the service gives each agent its own (0: any free one).
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub tools: Vec<ToolName>,
    /// MCP servers (streamable HTTP) whose tools the agent may use, offered to the model as
    /// `{server}__{tool}`.
    #[serde(default)]
    pub mcp_servers: Vec<mesh_mcp::McpServerConfig>,
    #[serde(default)]
    pub limits: Limits,
}

/// One agent: its file and its role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDefinition {
    pub file: AgentFile,
    /// `ROLE.md`'s text.
    pub role: String,
    /// The folder it was read from.
    pub folder: PathBuf,
}

impl AgentDefinition {
    /// Reads `folder/agent.toml` and `folder/ROLE.md`.
    pub fn read(folder: &Path) -> Result<Self, LlmAgentError> {
        let definition = folder.join(DEFINITION_FILE);
        let invalid = |why: String| LlmAgentError::Definition { path: definition.clone(), why };
        let text = std::fs::read_to_string(&definition).map_err(|e| invalid(e.to_string()))?;
        let file: AgentFile = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        file.check().map_err(invalid)?;
        let role_path = folder.join(ROLE_FILE);
        let role = std::fs::read_to_string(&role_path)
            .map_err(|e| LlmAgentError::Definition { path: role_path.clone(), why: e.to_string() })?;
        if role.len() > ROLE_BYTES_MAX || role.trim().is_empty() {
            return Err(LlmAgentError::Definition {
                path: role_path,
                why: format!("a role must say what the agent does, in at most {ROLE_BYTES_MAX} bytes"),
            });
        }
        Ok(Self { file, role, folder: folder.to_owned() })
    }

    /// Every agent of `folder`: each subfolder holding an `agent.toml`, in name order. Names are
    /// unique; a folder with none is an error (nothing to run).
    pub fn read_all(folder: &Path) -> Result<Vec<Self>, LlmAgentError> {
        let invalid = |why: String| LlmAgentError::Definition { path: folder.to_owned(), why };
        let mut folders: Vec<PathBuf> = std::fs::read_dir(folder)
            .map_err(|e| invalid(e.to_string()))?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.join(DEFINITION_FILE).is_file())
            .collect();
        folders.sort();
        if folders.is_empty() {
            return Err(invalid(format!("no agent folder (one holding {DEFINITION_FILE}) in it")));
        }
        if folders.len() > AGENTS_MAX {
            return Err(invalid(format!("{} agents, more than the {AGENTS_MAX} one service runs", folders.len())));
        }
        let agents = folders.iter().map(|f| Self::read(f)).collect::<Result<Vec<_>, _>>()?;
        for (i, agent) in agents.iter().enumerate() {
            if agents[..i].iter().any(|other| other.file.name == agent.file.name) {
                return Err(invalid(format!("two agents are named {:?}", agent.file.name)));
            }
        }
        Ok(agents)
    }
}

/// Longest MCP server name: it prefixes the names of its tools, which models take up to 64
/// characters long.
pub const MCP_SERVER_NAME_CHARS_MAX: usize = 16;
/// Most MCP servers one agent may use.
pub const MCP_SERVERS_MAX: usize = 8;

/// 1 to `max` ASCII letters, digits, '_' or '-': safe in URLs, topic names and tool names.
fn plain_name(name: &str, max: usize) -> bool {
    !name.is_empty() && name.len() <= max && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl AgentFile {
    fn check(&self) -> Result<(), String> {
        if !plain_name(&self.name, 64) {
            return Err(format!("name {:?}: 1 to 64 ASCII letters, digits, '_' or '-'", self.name));
        }
        if self.mcp_servers.len() > MCP_SERVERS_MAX {
            return Err(format!("{} MCP servers, more than {MCP_SERVERS_MAX}", self.mcp_servers.len()));
        }
        for (i, server) in self.mcp_servers.iter().enumerate() {
            if !plain_name(&server.name, MCP_SERVER_NAME_CHARS_MAX) {
                return Err(format!(
                    "mcp_servers name {:?}: 1 to {MCP_SERVER_NAME_CHARS_MAX} ASCII letters, digits, '_' or '-'",
                    server.name
                ));
            }
            if self.mcp_servers[..i].iter().any(|other| other.name == server.name) {
                return Err(format!("two MCP servers are named {:?}", server.name));
            }
        }
        if self.description.trim().is_empty() {
            return Err("description is empty".into());
        }
        let limits = &self.limits;
        let positive = [
            ("tool_rounds_max", limits.tool_rounds_max as u64),
            ("tool_calls_per_round_max", limits.tool_calls_per_round_max as u64),
            ("history_tokens_max", limits.history_tokens_max as u64),
            ("llm_timeout_ms", limits.llm_timeout_ms),
            ("turn_timeout_ms", limits.turn_timeout_ms),
            ("tool_output_bytes_max", limits.tool_output_bytes_max as u64),
            ("answer_bytes_max", limits.answer_bytes_max as u64),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, value)| *value == 0) {
            return Err(format!("limits.{key} must be above 0"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, toml: &str, role: &str) {
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join(DEFINITION_FILE), toml).unwrap();
        std::fs::write(folder.join(ROLE_FILE), role).unwrap();
    }

    #[test]
    fn a_folder_of_definitions_reads_in_name_order_with_defaults() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "b",
            "name = \"bob\"\ndescription = \"d\"\ntools = [\"call_agent\"]\n[limits]\ntool_rounds_max = 2\n\
             [[mcp_servers]]\nname = \"docs\"\nurl = \"http://127.0.0.1:9/mcp\"\ntools = [\"search\"]\n",
            "Answer.",
        );
        write(dir.path(), "a", "name = \"alice\"\ndescription = \"d\"\n", "Help.");
        std::fs::create_dir_all(dir.path().join(TEMPLATES_FOLDER)).unwrap();
        let agents = AgentDefinition::read_all(dir.path()).unwrap();
        let names: Vec<&str> = agents.iter().map(|a| a.file.name.as_str()).collect();
        assert_eq!(names, ["alice", "bob"]);
        assert_eq!(agents[1].file.tools, [ToolName::CallAgent]);
        assert_eq!(agents[1].file.limits.tool_rounds_max, 2);
        assert_eq!(agents[1].file.limits.history_tokens_max, HISTORY_TOKENS_MAX_DEFAULT);
        let docs = &agents[1].file.mcp_servers[0];
        assert_eq!((docs.name.as_str(), docs.tools.clone()), ("docs", Some(vec!["search".to_owned()])));
        assert_eq!(docs.timeout_ms, mesh_mcp::MCP_TIMEOUT_MS_DEFAULT);
        assert!(agents[0].file.mcp_servers.is_empty());
        assert_eq!(agents[0].role, "Help.");
    }

    #[test]
    fn bad_definitions_are_refused_naming_the_file_and_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "x", "name = \"x\"\ndescription = \"d\"\ntools = [\"shell\"]\n", "r");
        let error = AgentDefinition::read_all(dir.path()).unwrap_err().to_string();
        assert!(error.contains("agent.toml") && error.contains("shell"), "{error}");
        write(dir.path(), "x", "name = \"x y\"\ndescription = \"d\"\n", "r");
        assert!(AgentDefinition::read_all(dir.path()).unwrap_err().to_string().contains("ASCII"));
        write(dir.path(), "x", "name = \"x\"\ndescription = \"d\"\n[limits]\ntool_rounds_max = 0\n", "r");
        assert!(AgentDefinition::read_all(dir.path()).unwrap_err().to_string().contains("tool_rounds_max"));
        let mcp = "name = \"x\"\ndescription = \"d\"\n[[mcp_servers]]\nname = \"a b\"\nurl = \"http://h/mcp\"\n";
        write(dir.path(), "x", mcp, "r");
        assert!(AgentDefinition::read_all(dir.path()).unwrap_err().to_string().contains("mcp_servers name"));
        let twice = "name = \"x\"\ndescription = \"d\"\n[[mcp_servers]]\nname = \"t\"\nurl = \"http://h/mcp\"\n\
            [[mcp_servers]]\nname = \"t\"\nurl = \"http://h/mcp\"\n";
        write(dir.path(), "x", twice, "r");
        assert!(AgentDefinition::read_all(dir.path()).unwrap_err().to_string().contains("two MCP servers"));
        write(dir.path(), "x", "name = \"x\"\ndescription = \"d\"\n", "  ");
        assert!(AgentDefinition::read_all(dir.path()).unwrap_err().to_string().contains("ROLE.md"));
        write(dir.path(), "x", "name = \"x\"\ndescription = \"d\"\n", "r");
        write(dir.path(), "y", "name = \"x\"\ndescription = \"d\"\n", "r");
        assert!(AgentDefinition::read_all(dir.path()).unwrap_err().to_string().contains("two agents"));
        let empty = tempfile::tempdir().unwrap();
        assert!(AgentDefinition::read_all(empty.path()).is_err());
    }
}
