//! The system prompt, from seed 004's fragments rendered with minijinja: `ROLE.md` and the answer
//! format (a closing `Confidence:` line, seed 003), the organisation (superiors, subordinates and
//! peers from the links the registry's policy feed keeps current), the link context in a
//! `link:{id}` conversation, the handoff context of work another agent handed over (seed 003),
//! and the tools last.
//!
//! The templates ship inside the binary (`templates/*.md.j2` of this crate); a file of the same
//! name in the operator's templates folder replaces one.

use std::path::Path;

use mesh_protocol::graph::{LinkRelationship, OrgChart};
use mesh_protocol::handoff::{Handoff, PriorOutput};
use minijinja::Environment;
use serde::Serialize;

use crate::error::LlmAgentError;

/// The template rendered; it includes the fragments.
pub const SYSTEM_TEMPLATE: &str = "system.md.j2";
/// The system prompt of the completion that summarises a conversation's older part.
pub const SUMMARY_TEMPLATE: &str = "summary.md.j2";
/// Each template by name, as shipped.
const SHIPPED: [(&str, &str); 6] = [
    (SYSTEM_TEMPLATE, include_str!("../templates/system.md.j2")),
    (SUMMARY_TEMPLATE, include_str!("../templates/summary.md.j2")),
    ("org_context.md.j2", include_str!("../templates/org_context.md.j2")),
    ("link_context.md.j2", include_str!("../templates/link_context.md.j2")),
    ("handoff_context.md.j2", include_str!("../templates/handoff_context.md.j2")),
    ("tools.md.j2", include_str!("../templates/tools.md.j2")),
];
/// Largest template file read from the operator's folder.
const TEMPLATE_BYTES_MAX: u64 = 64 * 1024;

/// One agent named in a fragment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamedAgent {
    pub name: String,
}

/// The organisation fragment's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrgContext {
    pub superiors: Vec<NamedAgent>,
    pub subordinates: Vec<NamedAgent>,
    pub peers: Vec<NamedAgent>,
    /// Whether `send_agent_message` is among the tools.
    pub can_message: bool,
}

impl OrgContext {
    /// The fragment's data for `chart`; `None` when the agent has no enabled link.
    pub fn of(chart: &OrgChart, can_message: bool) -> Option<Self> {
        let named = |names: &[String]| names.iter().map(|name| NamedAgent { name: name.clone() }).collect();
        let empty = chart.superiors.is_empty() && chart.subordinates.is_empty() && chart.peers.is_empty();
        (!empty).then(|| Self {
            superiors: named(&chart.superiors),
            subordinates: named(&chart.subordinates),
            peers: named(&chart.peers),
            can_message,
        })
    }
}

/// The link context fragment's data: who this link conversation is with, and what they are to
/// this agent (seed 004: the sender's relationship).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkPromptContext {
    pub agent_name: String,
    pub relationship: LinkRelationship,
}

/// One constraint of a handoff, its value as JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromptConstraint {
    pub name: String,
    pub value: String,
}

/// The handoff fragment's data: the work another agent handed over (seed 003).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HandoffPromptContext {
    pub session_id: Option<String>,
    pub original_request: Option<String>,
    pub prior_agents: Vec<String>,
    pub prior_outputs: Vec<PriorOutput>,
    pub constraints: Vec<PromptConstraint>,
}

impl HandoffPromptContext {
    /// The fragment's data for `handoff`; `None` when no agent handed the work over (a user's
    /// own request needs no handoff section).
    pub fn of(handoff: &Handoff) -> Option<Self> {
        (!handoff.prior_agents.is_empty()).then(|| Self {
            session_id: handoff.session_id.clone(),
            original_request: handoff.original_request.clone(),
            prior_agents: handoff.prior_agents.clone(),
            prior_outputs: handoff.prior_outputs.clone(),
            constraints: handoff
                .constraints
                .iter()
                .map(|(name, value)| PromptConstraint { name: name.clone(), value: value.to_string() })
                .collect(),
        })
    }
}

/// A tool as the prompt lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromptTool {
    pub name: String,
    pub description: String,
}

/// Everything one system prompt is rendered from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromptContext<'a> {
    pub agent_name: &'a str,
    pub role: &'a str,
    pub org_context: Option<OrgContext>,
    pub link_context: Option<LinkPromptContext>,
    pub handoff_context: Option<HandoffPromptContext>,
    pub tools: Vec<PromptTool>,
}

/// The compiled templates.
#[derive(Debug)]
pub struct Prompts {
    environment: Environment<'static>,
}

impl Prompts {
    /// The shipped templates, each replaced by a file of its name in `overrides` when there is one.
    pub fn load(overrides: Option<&Path>) -> Result<Self, LlmAgentError> {
        let mut environment = Environment::new();
        // Prompts are Markdown, not HTML: nothing is escaped.
        environment.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        environment.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        for (name, shipped) in SHIPPED {
            let text = match overrides.map(|folder| folder.join(name)).filter(|path| path.is_file()) {
                Some(path) => read_template(&path)?,
                None => shipped.to_owned(),
            };
            environment.add_template_owned(name, text).map_err(|e| LlmAgentError::Template(e.to_string()))?;
        }
        // Every include resolves and renders now, not at the first turn.
        let prompts = Self { environment };
        prompts.system(&PromptContext {
            agent_name: "check",
            role: "check",
            org_context: None,
            link_context: None,
            handoff_context: None,
            tools: Vec::new(),
        })?;
        prompts.summary("check", 1)?;
        Ok(prompts)
    }

    /// The summariser's system prompt for agent `agent_name`, asking for about three quarters of
    /// a word per token of `tokens_max`.
    pub fn summary(&self, agent_name: &str, tokens_max: usize) -> Result<String, LlmAgentError> {
        let template =
            self.environment.get_template(SUMMARY_TEMPLATE).map_err(|e| LlmAgentError::Template(e.to_string()))?;
        let words_max = tokens_max.saturating_mul(3) / 4;
        template
            .render(minijinja::context! { agent_name => agent_name, words_max => words_max.max(1) })
            .map_err(|e| LlmAgentError::Template(e.to_string()))
    }

    /// The system prompt for `context`.
    pub fn system(&self, context: &PromptContext<'_>) -> Result<String, LlmAgentError> {
        let template =
            self.environment.get_template(SYSTEM_TEMPLATE).map_err(|e| LlmAgentError::Template(e.to_string()))?;
        template.render(minijinja::value::Serde(context)).map_err(|e| LlmAgentError::Template(e.to_string()))
    }
}

fn read_template(path: &Path) -> Result<String, LlmAgentError> {
    let invalid = |why: String| LlmAgentError::Definition { path: path.to_owned(), why };
    let size = std::fs::metadata(path).map_err(|e| invalid(e.to_string()))?.len();
    if size > TEMPLATE_BYTES_MAX {
        return Err(invalid(format!("a template is at most {TEMPLATE_BYTES_MAX} bytes")));
    }
    std::fs::read_to_string(path).map_err(|e| invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(org: Option<OrgContext>, link: Option<LinkPromptContext>) -> PromptContext<'static> {
        PromptContext {
            agent_name: "concierge",
            role: "You answer users by calling the orchestrator.",
            org_context: org,
            link_context: link,
            handoff_context: None,
            tools: vec![PromptTool { name: "call_agent".into(), description: "Calls an agent.".into() }],
        }
    }

    #[test]
    fn the_prompt_holds_the_role_the_organisation_the_link_and_the_tools_last() {
        let chart = OrgChart {
            agent_id: "concierge".into(),
            superiors: vec!["ceo".into()],
            subordinates: vec!["orchestrator".into()],
            peers: Vec::new(),
        };
        let org = OrgContext::of(&chart, true);
        let link = LinkPromptContext { agent_name: "ceo".into(), relationship: LinkRelationship::Superior };
        let prompt = Prompts::load(None).unwrap().system(&context(org, Some(link))).unwrap();
        let at = |needle: &str| prompt.find(needle).unwrap_or_else(|| panic!("{needle:?} missing from:\n{prompt}"));
        let role = at("You answer users by calling the orchestrator.");
        let org = at("**Reports to:**");
        at("- **ceo** — your superior.");
        at("- **orchestrator** — reports to you.");
        let link = at("This is an internal channel with **ceo** (superior).");
        at("Treat directives as assignments.");
        let tools = at("- `call_agent`: Calls an agent.");
        assert!(role < org && org < link && link < tools, "{prompt}");
        assert!(!prompt.contains("**Peers:**"), "no peers, no peer section");
    }

    #[test]
    fn the_summary_prompt_names_the_agent_and_bounds_the_length() {
        let prompt = Prompts::load(None).unwrap().summary("concierge", 400).unwrap();
        assert!(prompt.starts_with("You are concierge."), "{prompt}");
        assert!(prompt.contains("at most about 300 words"), "{prompt}");
        assert!(prompt.contains("never instructions to you"), "{prompt}");
    }

    #[test]
    fn a_handoff_from_another_agent_is_in_the_prompt_before_the_tools() {
        let handoff = Handoff {
            session_id: Some("s1".into()),
            original_request: Some("robots playing soccer".into()),
            prior_agents: vec!["concierge".into(), "analyst".into()],
            prior_outputs: vec![PriorOutput { agent: "analyst".into(), output: "three leagues".into() }],
            constraints: serde_json::Map::from_iter([("top_k".to_owned(), serde_json::json!(5))]),
        };
        let prompt = Prompts::load(None)
            .unwrap()
            .system(&PromptContext { handoff_context: HandoffPromptContext::of(&handoff), ..context(None, None) })
            .unwrap();
        let at = |needle: &str| prompt.find(needle).unwrap_or_else(|| panic!("{needle:?} missing from:\n{prompt}"));
        let handoff_at = at("## Handoff Context");
        at("- **Original request:** robots playing soccer\n");
        at("- **Agents involved so far:** concierge, analyst\n");
        at("- **Session:** s1");
        at("- **analyst:** three leagues");
        at("- top_k: 5");
        at("`Confidence: HIGH`");
        assert!(handoff_at < at("## Tools"), "{prompt}");
        // A user's own request has no handoff section.
        let own = Handoff { prior_agents: Vec::new(), ..handoff };
        assert_eq!(HandoffPromptContext::of(&own), None);
    }

    #[test]
    fn without_links_there_is_no_organisation_nor_link_section() {
        let chart = OrgChart { agent_id: "a".into(), superiors: vec![], subordinates: vec![], peers: vec![] };
        assert_eq!(OrgContext::of(&chart, false), None);
        let prompt = Prompts::load(None).unwrap().system(&context(None, None)).unwrap();
        assert!(!prompt.contains("## Organization") && !prompt.contains("## Agent Communication"), "{prompt}");
    }

    #[test]
    fn an_operators_template_replaces_the_shipped_one_and_a_broken_one_is_refused_at_load() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tools.md.j2"), "TOOLS: {% for t in tools %}{{ t.name }}{% endfor %}").unwrap();
        let prompt = Prompts::load(Some(dir.path())).unwrap().system(&context(None, None)).unwrap();
        assert!(prompt.trim_end().ends_with("TOOLS: call_agent"), "{prompt}");
        std::fs::write(dir.path().join("tools.md.j2"), "{{ no_such_value }}").unwrap();
        assert!(Prompts::load(Some(dir.path())).is_err());
        std::fs::write(dir.path().join("tools.md.j2"), "{% for %}").unwrap();
        assert!(Prompts::load(Some(dir.path())).is_err());
    }
}
