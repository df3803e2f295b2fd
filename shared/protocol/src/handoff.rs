//! Seed 003's handoff context: what an agent routing work to another passes on so the other
//! continues the workflow rather than starting over (the session, the user's original request,
//! the agents already involved and what they produced, the constraints in force).
//!
//! It travels in A2A message metadata under [`HANDOFF_METADATA_KEY`] (and in a seed task's
//! `metadata`, which has no message metadata). A caller is not trusted to keep it small, so a
//! receiver reads it with [`Handoff::from_metadata`]: a value that is not a handoff is refused,
//! and one over the caps is trimmed by one rule ([`Handoff::bounded`]): text is cut to its cap,
//! lists keep their newest (last) entries, constraints keep their first keys in key order and
//! drop any value whose JSON is over its cap.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Key of the handoff inside A2A message metadata (and a seed task's metadata).
pub const HANDOFF_METADATA_KEY: &str = "urn:a2a-mesh:handoff:v1";
/// Longest session id and agent name kept.
pub const HANDOFF_NAME_CHARS_MAX: usize = 200;
/// Longest original request and prior output kept.
pub const HANDOFF_TEXT_CHARS_MAX: usize = 4_000;
/// Prior agents kept (the newest).
pub const HANDOFF_PRIOR_AGENTS_MAX: usize = 16;
/// Prior outputs kept (the newest).
pub const HANDOFF_PRIOR_OUTPUTS_MAX: usize = 8;
/// Constraints kept (the first in key order).
pub const HANDOFF_CONSTRAINTS_MAX: usize = 16;
/// Largest constraint value kept, as JSON text.
pub const HANDOFF_CONSTRAINT_BYTES_MAX: usize = 1_024;

/// What one agent of the workflow produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorOutput {
    pub agent: String,
    pub output: String,
}

/// The handoff context of seed 003.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handoff {
    /// The session (conversation) the work belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The user's request, in the user's words, as the first agent received it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_request: Option<String>,
    /// The agents the work went through before this call, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prior_agents: Vec<String>,
    /// What they produced, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prior_outputs: Vec<PriorOutput>,
    /// Constraints established (budget, timeline, ...), as JSON values.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub constraints: Map<String, Value>,
}

/// Why a handoff in metadata is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffError(String);

impl std::fmt::Display for HandoffError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the handoff context ({HANDOFF_METADATA_KEY}) is malformed: {}", self.0)
    }
}

impl std::error::Error for HandoffError {}

impl Handoff {
    /// The handoff carried in `metadata`, if any, trimmed to the caps; a value of another shape
    /// is refused.
    pub fn from_metadata(metadata: &Map<String, Value>) -> Result<Option<Self>, HandoffError> {
        let Some(value) = metadata.get(HANDOFF_METADATA_KEY) else { return Ok(None) };
        let handoff = Self::deserialize(value).map_err(|e| HandoffError(e.to_string()))?;
        Ok(Some(handoff.bounded()))
    }

    /// Puts the handoff into metadata, under [`HANDOFF_METADATA_KEY`].
    pub fn write_metadata(&self, metadata: &mut Map<String, Value>) {
        if let Ok(value) = serde_json::to_value(self) {
            metadata.insert(HANDOFF_METADATA_KEY.to_owned(), value);
        }
    }

    /// The handoff within every cap (see the module's rule).
    pub fn bounded(mut self) -> Self {
        let cut = |text: &mut String, chars: usize| {
            if let Some((at, _)) = text.char_indices().nth(chars) {
                text.truncate(at);
            }
        };
        if let Some(id) = &mut self.session_id {
            cut(id, HANDOFF_NAME_CHARS_MAX);
        }
        if let Some(request) = &mut self.original_request {
            cut(request, HANDOFF_TEXT_CHARS_MAX);
        }
        keep_newest(&mut self.prior_agents, HANDOFF_PRIOR_AGENTS_MAX);
        for agent in &mut self.prior_agents {
            cut(agent, HANDOFF_NAME_CHARS_MAX);
        }
        keep_newest(&mut self.prior_outputs, HANDOFF_PRIOR_OUTPUTS_MAX);
        for prior in &mut self.prior_outputs {
            cut(&mut prior.agent, HANDOFF_NAME_CHARS_MAX);
            cut(&mut prior.output, HANDOFF_TEXT_CHARS_MAX);
        }
        self.constraints = std::mem::take(&mut self.constraints)
            .into_iter()
            .filter(|(key, value)| {
                key.chars().count() <= HANDOFF_NAME_CHARS_MAX
                    && serde_json::to_string(value).is_ok_and(|json| json.len() <= HANDOFF_CONSTRAINT_BYTES_MAX)
            })
            .take(HANDOFF_CONSTRAINTS_MAX)
            .collect();
        self
    }

    /// The handoff `agent` passes on when it routes work further: this one with `agent` last
    /// among the prior agents, then `added` (what `agent` contributes: its output, constraints,
    /// and the session and original request when none was known yet), within the caps.
    pub fn passed_on(&self, agent: &str, added: Handoff) -> Self {
        let mut next = self.clone();
        next.session_id = next.session_id.or(added.session_id);
        next.original_request = next.original_request.or(added.original_request);
        if next.prior_agents.last().is_none_or(|last| last != agent) {
            next.prior_agents.push(agent.to_owned());
        }
        next.prior_agents.extend(added.prior_agents);
        next.prior_outputs.extend(added.prior_outputs);
        for (key, value) in added.constraints {
            // Constraints established earlier in the workflow hold.
            next.constraints.entry(key).or_insert(value);
        }
        next.bounded()
    }
}

/// Keeps the last `max` entries of `list`.
fn keep_newest<T>(list: &mut Vec<T>, max: usize) {
    let excess = list.len().saturating_sub(max);
    list.drain(..excess);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn in_metadata(value: Value) -> Map<String, Value> {
        let mut metadata = Map::new();
        metadata.insert(HANDOFF_METADATA_KEY.into(), value);
        metadata
    }

    #[test]
    fn the_seed_example_round_trips_through_metadata() {
        let handoff: Handoff = serde_json::from_value(json!({
            "session_id": "sess-789",
            "original_request": "Help me build a business case for market entry",
            "prior_agents": ["ORC", "CST"],
            "prior_outputs": [{"agent": "CST", "output": "framework: market_entry_assessment"}],
            "constraints": {"budget_range": [1_000_000, 5_000_000], "timeline": "18_months"}
        }))
        .unwrap();
        let mut metadata = Map::new();
        handoff.write_metadata(&mut metadata);
        assert_eq!(Handoff::from_metadata(&metadata).unwrap(), Some(handoff));
        assert_eq!(Handoff::from_metadata(&Map::new()).unwrap(), None);
    }

    #[test]
    fn a_value_of_another_shape_is_refused() {
        for bad in [json!("a string"), json!({"prior_agents": "ORC"}), json!({"unknown": 1}), json!(null)] {
            let error = Handoff::from_metadata(&in_metadata(bad.clone())).unwrap_err();
            assert!(error.to_string().contains(HANDOFF_METADATA_KEY), "{bad}: {error}");
        }
    }

    #[test]
    fn oversized_fields_are_trimmed_by_the_rule() {
        let agents: Vec<String> = (0..40).map(|i| format!("a{i}")).collect();
        let outputs: Vec<Value> =
            (0..20).map(|i| json!({"agent": format!("a{i}"), "output": "o".repeat(9_000)})).collect();
        let mut constraints = Map::new();
        for i in 0..30 {
            constraints.insert(format!("k{i:02}"), json!(i));
        }
        constraints.insert("aa_huge".into(), json!("x".repeat(HANDOFF_CONSTRAINT_BYTES_MAX)));
        let handoff = Handoff::from_metadata(&in_metadata(json!({
            "session_id": "s".repeat(1_000),
            "original_request": "é".repeat(10_000),
            "prior_agents": agents,
            "prior_outputs": outputs,
            "constraints": constraints,
        })))
        .unwrap()
        .unwrap();
        assert_eq!(handoff.session_id.unwrap().len(), HANDOFF_NAME_CHARS_MAX);
        assert_eq!(handoff.original_request.unwrap().chars().count(), HANDOFF_TEXT_CHARS_MAX);
        assert_eq!(handoff.prior_agents.len(), HANDOFF_PRIOR_AGENTS_MAX);
        assert_eq!(handoff.prior_agents.last().map(String::as_str), Some("a39"), "the newest are kept");
        assert_eq!(handoff.prior_outputs.len(), HANDOFF_PRIOR_OUTPUTS_MAX);
        assert_eq!(handoff.prior_outputs[0].agent, "a12");
        assert!(handoff.prior_outputs.iter().all(|p| p.output.len() == HANDOFF_TEXT_CHARS_MAX));
        assert_eq!(handoff.constraints.len(), HANDOFF_CONSTRAINTS_MAX);
        assert!(!handoff.constraints.contains_key("aa_huge"), "a value over its cap is dropped");
        assert!(handoff.constraints.contains_key("k00") && !handoff.constraints.contains_key("k16"));
    }

    #[test]
    fn an_agent_passing_work_on_joins_the_prior_agents_and_adds_what_it_knows() {
        let received = Handoff {
            session_id: Some("s1".into()),
            original_request: Some("robots playing soccer".into()),
            prior_agents: vec!["concierge".into()],
            constraints: Map::from_iter([("language".to_owned(), json!("en"))]),
            ..Handoff::default()
        };
        let added = Handoff {
            session_id: Some("s2".into()),
            original_request: Some("search for robots".into()),
            prior_outputs: vec![PriorOutput { agent: "analyst".into(), output: "three leagues".into() }],
            constraints: Map::from_iter([("language".to_owned(), json!("fr")), ("top_k".to_owned(), json!(5))]),
            ..Handoff::default()
        };
        let next = received.passed_on("analyst", added);
        assert_eq!(next.session_id.as_deref(), Some("s1"), "the session holds");
        assert_eq!(next.original_request.as_deref(), Some("robots playing soccer"), "the user's words hold");
        assert_eq!(next.prior_agents, ["concierge", "analyst"]);
        assert_eq!(next.prior_outputs.len(), 1);
        assert_eq!(next.constraints["language"], "en", "an established constraint holds");
        assert_eq!(next.constraints["top_k"], 5);
        // Passing on twice in a row names the agent once.
        assert_eq!(next.passed_on("analyst", Handoff::default()).prior_agents, ["concierge", "analyst"]);
    }
}
