//! The entity-extraction agent: the entities of a query with types and character offsets, by
//! deterministic rules, or by an OpenAI-compatible LLM when one is configured (falling back to
//! the rules on any LLM failure).

use std::collections::HashMap;

use mesh_agent_kit::{AgentApp, AgentError, AgentHandler, AgentReply, TaskInput};
use mesh_client::HttpClient;
use mesh_llm::{LlmClient, LlmError, llm_or_rules};
use mesh_planner::PlannerConfig;
pub use mesh_planner::StartError;
use mesh_protocol::agents::{Entity, EntityExtraction, EntityType};
use mesh_query_analysis::{extract_entities, summarize_entities};
use serde::Deserialize;

pub const ENTITY_EXTRACTION_PORT_DEFAULT: u16 = 8010;
/// Prefix of the environment variables this agent reads (`MESH_ENTITY_EXTRACTION_LLM__MODEL`...).
pub const ENV_PREFIX: &str = "MESH_ENTITY_EXTRACTION";
/// Confidence given to entities an LLM names: it does not grade its own answers.
const LLM_ENTITY_CONFIDENCE: f64 = 0.8;
const CARD_JSON: &str = include_str!("../../../agent-cards/entity-extraction.json");
const SYSTEM_PROMPT: &str = "You extract the entities of a search query. Answer with one JSON object and nothing else: \
{\"entities\":[{\"text\":\"<exact substring of the query>\",\"type\":\"PERSON|ORGANIZATION|LOCATION|DATE|NUMBER|CONCEPT\"}]}. \
Every text must appear verbatim in the query. CONCEPT is a thing or activity the user looks for.";

/// This agent's configuration: the agent keys and an optional `[llm]` section.
pub type EntityExtractionConfig = PlannerConfig;

#[derive(Debug)]
pub struct EntityAgent {
    llm: Option<LlmClient>,
}

impl EntityAgent {
    pub fn new(llm: Option<LlmClient>) -> Self {
        Self { llm }
    }
}

impl AgentHandler for EntityAgent {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        // Offsets index the text as sent, surrounding whitespace included.
        let query = task.text.as_str();
        if query.trim().is_empty() {
            return Err(AgentError::InvalidInput("the task has no text to extract entities from".into()));
        }
        let attempt = self.llm.as_ref().map(|llm| extract_with_llm(llm, query));
        let (extraction, _, warning) = llm_or_rules(attempt, || extract_entities(query)).await;
        let data = serde_json::to_value(extraction).map_err(|e| AgentError::Internal(e.to_string()))?;
        Ok(AgentReply { warnings: warning.into_iter().collect(), ..AgentReply::data(data) })
    }
}

#[derive(Debug, Deserialize)]
struct LlmAnswer {
    entities: Vec<LlmEntity>,
}

#[derive(Debug, Deserialize)]
struct LlmEntity {
    text: String,
    #[serde(rename = "type")]
    entity_type: EntityType,
}

async fn extract_with_llm(llm: &LlmClient, query: &str) -> Result<EntityExtraction, LlmError> {
    let answer: LlmAnswer = llm
        .complete_json(SYSTEM_PROMPT, query, |answer: &LlmAnswer| {
            match answer.entities.iter().find(|e| e.text.trim().is_empty() || !query.contains(e.text.as_str())) {
                Some(bad) => Err(format!("entity {:?} is not a substring of the query", bad.text)),
                None => Ok(()),
            }
        })
        .await?;
    // Each mention the LLM names takes the next occurrence of its text, so a word named twice
    // gets both of its places; a mention with no occurrence left is dropped.
    let mut next_search_byte: HashMap<&str, usize> = HashMap::new();
    let mut entities: Vec<Entity> = Vec::with_capacity(answer.entities.len());
    for found in &answer.entities {
        let text = found.text.as_str();
        let from = next_search_byte.get(text).copied().unwrap_or(0);
        let Some(offset) = query.get(from..).and_then(|rest| rest.find(text)) else {
            continue;
        };
        let byte_start = from + offset;
        next_search_byte.insert(text, byte_start + text.len());
        let start = query[..byte_start].chars().count();
        entities.push(Entity {
            text: text.to_owned(),
            entity_type: found.entity_type,
            start,
            end: start + text.chars().count(),
            confidence: LLM_ENTITY_CONFIDENCE,
        });
    }
    entities.sort_by_key(|e| e.start);
    Ok(summarize_entities(entities, "llm"))
}

/// Builds the agent, bound and ready to run.
pub async fn build(config: &EntityExtractionConfig, http: HttpClient) -> Result<AgentApp, StartError> {
    mesh_planner::build(config, CARD_JSON, EntityAgent::new, http).await
}
