//! The profile-selection agent: which of the search agent's profiles fit a query, with intent,
//! modality, complexity, confidence and ranked alternatives. Deterministic rules by default, or an
//! OpenAI-compatible LLM when one is configured (falling back to the rules on any LLM failure).

use mesh_agent_kit::{AgentApp, AgentError, AgentHandler, AgentReply, TaskInput};
use mesh_client::HttpClient;
use mesh_llm::{LlmClient, LlmError, llm_or_rules};
use mesh_planner::PlannerConfig;
pub use mesh_planner::StartError;
use mesh_protocol::agents::{
    Complexity, INTENTS, Modality, ProfileScore, ProfileSelection, ProfileSelectionRequest, SearchProfile,
};
use mesh_query_analysis::select_profile;
use serde::Deserialize;
use serde_json::Value;

pub const PROFILE_SELECTION_PORT_DEFAULT: u16 = 8011;
/// Prefix of the environment variables this agent reads (`MESH_PROFILE_SELECTION_LLM__MODEL`...).
pub const ENV_PREFIX: &str = "MESH_PROFILE_SELECTION";
const CARD_JSON: &str = include_str!("../../../agent-cards/profile-selection.json");
const SYSTEM_PROMPT: &str = "You choose the search profile that best fits a user's query. You are given the query and \
the available profiles (name, description, strengths). Answer with one JSON object and nothing else: \
{\"selected_profile\":\"<a profile name>\",\"confidence\":<0..1>,\"alternatives\":[{\"profile\":\"<name>\",\"score\":<0..1>}],\
\"intent\":\"video_search|image_search|audio_search|text_search|question_answering|general_search\",\
\"modality\":\"video|image|audio|text|any\",\"complexity\":\"simple|medium|complex\",\"reasoning\":\"<one or two sentences>\"}. \
Only use profile names from the list.";

/// This agent's configuration: the agent keys and an optional `[llm]` section.
pub type ProfileSelectionConfig = PlannerConfig;

#[derive(Debug)]
pub struct ProfileAgent {
    llm: Option<LlmClient>,
}

impl ProfileAgent {
    pub fn new(llm: Option<LlmClient>) -> Self {
        Self { llm }
    }
}

impl AgentHandler for ProfileAgent {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        let query = task.text.trim();
        if query.is_empty() {
            return Err(AgentError::InvalidInput("the task has no query to choose a profile for".into()));
        }
        let request: ProfileSelectionRequest = serde_json::from_value(Value::Object(task.data)).map_err(|e| {
            AgentError::InvalidInput(format!("expected a data part {{\"available_profiles\": [...]}}: {e}"))
        })?;
        let profiles = &request.available_profiles;
        let rules = select_profile(query, profiles).map_err(|e| AgentError::InvalidInput(e.to_string()))?;
        let attempt = self.llm.as_ref().map(|llm| select_with_llm(llm, query, profiles));
        let (selection, _, warning) = llm_or_rules(attempt, || rules).await;
        let data = serde_json::to_value(selection).map_err(|e| AgentError::Internal(e.to_string()))?;
        Ok(AgentReply { warnings: warning.into_iter().collect(), ..AgentReply::data(data) })
    }
}

/// The LLM's answer: a [`ProfileSelection`] without `method`.
#[derive(Debug, Deserialize)]
struct LlmAnswer {
    selected_profile: String,
    confidence: f64,
    #[serde(default)]
    alternatives: Vec<ProfileScore>,
    intent: String,
    modality: Modality,
    complexity: Complexity,
    reasoning: String,
}

async fn select_with_llm(
    llm: &LlmClient,
    query: &str,
    profiles: &[SearchProfile],
) -> Result<ProfileSelection, LlmError> {
    let listing = serde_json::to_string(profiles).map_err(|e| LlmError::InvalidJson(e.to_string()))?;
    let user = format!("Query: {query}\nAvailable profiles: {listing}");
    let known = |name: &str| profiles.iter().any(|p| p.name == name);
    let answer: LlmAnswer = llm
        .complete_json(SYSTEM_PROMPT, &user, |answer: &LlmAnswer| {
            if !known(&answer.selected_profile) {
                return Err(format!("{:?} is not an available profile", answer.selected_profile));
            }
            if !(0.0..=1.0).contains(&answer.confidence) {
                return Err(format!("confidence {} is outside 0..1", answer.confidence));
            }
            if !INTENTS.contains(&answer.intent.as_str()) {
                return Err(format!("intent {:?} is not one of {}", answer.intent, INTENTS.join(", ")));
            }
            if let Some(bad) = answer.alternatives.iter().find(|a| !known(&a.profile)) {
                return Err(format!("alternative {:?} is not an available profile", bad.profile));
            }
            match answer.alternatives.iter().find(|a| !(0.0..=1.0).contains(&a.score)) {
                Some(bad) => Err(format!("alternative {:?} scores {}, outside 0..1", bad.profile, bad.score)),
                None => Ok(()),
            }
        })
        .await?;
    // The contract: the other profiles, each once, best first (the model may not comply).
    let mut alternatives: Vec<ProfileScore> = Vec::with_capacity(answer.alternatives.len());
    for alternative in answer.alternatives {
        let seen = alternatives.iter().any(|a| a.profile == alternative.profile);
        if alternative.profile != answer.selected_profile && !seen {
            alternatives.push(alternative);
        }
    }
    alternatives.sort_by(|a, b| b.score.total_cmp(&a.score));
    Ok(ProfileSelection {
        selected_profile: answer.selected_profile,
        confidence: answer.confidence,
        alternatives,
        intent: answer.intent,
        modality: answer.modality,
        complexity: answer.complexity,
        reasoning: answer.reasoning,
        method: "llm".into(),
    })
}

/// Builds the agent, bound and ready to run.
pub async fn build(config: &ProfileSelectionConfig, http: HttpClient) -> Result<AgentApp, StartError> {
    mesh_planner::build(config, CARD_JSON, ProfileAgent::new, http).await
}
