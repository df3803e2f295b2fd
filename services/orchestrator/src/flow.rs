//! One query: plan in parallel (profile selection and entity extraction), then search with the
//! chosen profiles, and report what every agent did. Planning is optional: a missing, slow or
//! failing planner leaves defaults and a warning (a PARTIAL answer), never a failed query.

use std::time::{Duration, Instant};

use std::sync::Arc;

use mesh_agent_kit::{AgentError, AgentHandler, AgentReply, TaskInput};
use mesh_client::{CallError, CallScope, MeshCaller, Target, reply_data};
use mesh_protocol::agents::{
    AgentCall, EntityExtraction, Modality, ProfileSelection, ProfileSelectionRequest, QUERY_CHARS_MAX, QueryAnswer,
    QueryMetadata, QueryOptions, SearchProfile, SearchRequest, SearchResults, search_profiles,
};
use mesh_protocol::call::validate_tenant_id;
use mesh_protocol::registry::AgentSummary;
use mesh_protocol::seed::{ConfidenceLevel, Part, ResponseStatus, TaskRequest};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::Instrument;

pub const CAPABILITY_SEARCH: &str = "search";
pub const CAPABILITY_PROFILE_SELECTION: &str = "profile_selection";
pub const CAPABILITY_ENTITY_EXTRACTION: &str = "entity_extraction";
/// Most results one query may ask for.
const TOP_K_MAX: usize = 100;
/// Share of the answer's confidence score that comes from profile selection; the rest comes
/// from the entities' mean confidence (when entities were found).
const SELECTION_CONFIDENCE_WEIGHT: f64 = 0.75;
/// The confidence score of a choice made without profile selection's answer (its default).
const DEFAULT_SELECTION_CONFIDENCE: f64 = 0.5;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowSettings {
    pub planning_timeout: Duration,
    pub search_timeout: Duration,
    pub top_k_default: usize,
    pub ensemble_below_confidence: f64,
    pub ensemble_profiles_max: usize,
}

/// The orchestrator's answer to one query: the answer, what it lacks, and how sure it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub answer: QueryAnswer,
    /// Non-empty makes the answer PARTIAL.
    pub warnings: Vec<String>,
    pub confidence: ConfidenceLevel,
}

#[derive(Debug)]
pub struct Orchestrator {
    caller: Arc<MeshCaller>,
    settings: FlowSettings,
}

/// What a call to another agent produced, with the record of the call.
struct Outcome<T> {
    value: Option<T>,
    call: AgentCall,
    /// What the answer lacks: the call's failure, or the callee's own warnings when it answered
    /// PARTIAL, each naming the capability.
    warnings: Vec<String>,
    /// Why the call failed.
    failure: Option<CallError>,
}

impl<T> Outcome<T> {
    /// No agent could be asked.
    fn unavailable(capability: &str, reason: String, received: Instant) -> Self {
        Self::not_called(capability, "unavailable", format!("{capability} unavailable: {reason}"), reason, received)
    }

    /// The call was not made because what it needs is missing.
    fn skipped(capability: &str, reason: String, received: Instant) -> Self {
        let warning = format!("{capability} skipped ({reason}); searched with the default profile");
        Self::not_called(capability, "skipped", warning, reason, received)
    }

    fn not_called(capability: &str, status: &str, warning: String, reason: String, received: Instant) -> Self {
        Self {
            value: None,
            call: AgentCall {
                capability: capability.to_owned(),
                agent: None,
                status: status.to_owned(),
                started_ms: ms(received.elapsed()),
                time_ms: 0.0,
                agent_time_ms: None,
                error: Some(reason),
            },
            warnings: vec![warning],
            failure: None,
        }
    }
}

impl Orchestrator {
    pub fn new(caller: Arc<MeshCaller>, settings: FlowSettings) -> Self {
        Self { caller, settings }
    }

    /// Answers `query` for the call `scope` handles; every call to another agent derives from it.
    pub async fn answer(&self, scope: &CallScope, query: &str, options: QueryOptions) -> Result<Answered, AgentError> {
        let received = Instant::now();
        let query = query.trim();
        if query.is_empty() {
            return Err(AgentError::InvalidInput("the query is empty".into()));
        }
        let query_chars = query.chars().count();
        if query_chars > QUERY_CHARS_MAX {
            return Err(AgentError::InvalidInput(format!(
                "the query has {query_chars} characters; at most {QUERY_CHARS_MAX} are accepted"
            )));
        }
        if let Some(tenant) = &options.tenant_id {
            validate_tenant_id(tenant).map_err(AgentError::InvalidInput)?;
        }
        let top_k = options.top_k.unwrap_or(self.settings.top_k_default);
        if !(1..=TOP_K_MAX).contains(&top_k) {
            return Err(AgentError::InvalidInput(format!("top_k must be between 1 and {TOP_K_MAX}, not {top_k}")));
        }
        if options.profiles.as_ref().is_some_and(Vec::is_empty) {
            return Err(AgentError::InvalidInput("profiles must name at least one profile".into()));
        }

        // One search agent per query: the one whose card lists the profiles is the one searched.
        let search_agent = self.caller.discovery().agent_for(CAPABILITY_SEARCH).await;

        // Planning: both planners at once.
        let planning_started = Instant::now();
        let entities =
            self.call::<_, EntityExtraction>(scope, CAPABILITY_ENTITY_EXTRACTION, None, query, None::<&()>, received);
        let selection = async {
            match &options.profiles {
                Some(_) => None,
                None => Some(self.select_profiles(scope, query, search_agent.as_ref().ok(), received).await),
            }
        };
        // Both planning calls are children of one span, side by side in time.
        let planning = if mesh_telemetry::recording() {
            tracing::info_span!(
                "planning",
                otel.name = "orchestrator.planning",
                mesh.query_chars = i64::try_from(query_chars).unwrap_or(i64::MAX)
            )
        } else {
            tracing::Span::none()
        };
        let (entities, selection) = async { tokio::join!(entities, selection) }.instrument(planning.clone()).await;
        let planning_time_ms = ms(planning_started.elapsed());
        if !entities.warnings.is_empty() || selection.as_ref().is_some_and(|s| !s.warnings.is_empty()) {
            let warnings: Vec<&str> = entities
                .warnings
                .iter()
                .chain(selection.iter().flat_map(|s| s.warnings.iter()))
                .map(String::as_str)
                .collect();
            mesh_telemetry::span_event(&planning, "partial_answer", &[("mesh.warnings", warnings.join("; "))]);
        }

        let mut warnings: Vec<String> = Vec::new();
        let mut calls = vec![];
        // Each planner that is missing, failed or answered partially lowers the confidence a level.
        let mut degraded = usize::from(!entities.warnings.is_empty());
        let entity_confidences: Vec<f64> =
            entities.value.iter().flat_map(|e| &e.entities).map(|entity| entity.confidence).collect();
        warnings.extend(entities.warnings);
        calls.push(entities.call);
        let (profiles, selected, confidence, modality) = match (&options.profiles, selection) {
            (Some(profiles), _) => (profiles.clone(), profiles.first().cloned().unwrap_or_default(), 1.0, None),
            (None, Some(outcome)) => {
                degraded += usize::from(!outcome.warnings.is_empty());
                warnings.extend(outcome.warnings);
                calls.push(outcome.call);
                match outcome.value {
                    Some(choice) => {
                        let profiles = self.ensemble(&choice);
                        (profiles, choice.selected_profile.clone(), choice.confidence, Some(choice.modality))
                    }
                    // The search agent's default profile.
                    None => (Vec::new(), String::new(), DEFAULT_SELECTION_CONFIDENCE, None),
                }
            }
            (None, None) => (Vec::new(), String::new(), DEFAULT_SELECTION_CONFIDENCE, None),
        };

        // Action: search, which the answer cannot do without.
        let request =
            SearchRequest { profiles, top_k: Some(top_k), modality: modality.filter(|m| *m != Modality::Any) };
        let search_started = Instant::now();
        let search = match search_agent {
            Ok(agent) => {
                self.call::<_, SearchResults>(scope, CAPABILITY_SEARCH, Some(agent), query, Some(&request), received)
                    .await
            }
            Err(error) => Outcome::unavailable(CAPABILITY_SEARCH, error.to_string(), received),
        };
        let search_time_ms = ms(search_started.elapsed());
        let unreachable = search.call.error.clone().unwrap_or_else(|| "no search agent answered".into());
        calls.push(search.call);
        let Some(results) = search.value else {
            return Err(match search.failure {
                // The search agent judged the request itself invalid (e.g. an unknown profile):
                // the caller's mistake, not an outage.
                Some(error)
                    if error
                        .callee_error()
                        .is_some_and(|(status, body)| status == 400 && body.error_code == "TASK_INVALID_INPUT") =>
                {
                    let message = error.callee_error().map(|(_, body)| body.error_message.clone()).unwrap_or_default();
                    AgentError::InvalidInput(format!("search refused the request: {message}"))
                }
                Some(error) if error.is_timeout() => AgentError::Timeout(format!("search did not answer: {error}")),
                // Refused for call safety (a cycle, the depth limit, a full bulkhead): said as such.
                Some(error) if error.error_code().starts_with("CALL_") => AgentError::from(error),
                Some(error) => AgentError::Unavailable(format!("search failed: {error}")),
                None => AgentError::Unavailable(format!("search failed: {unreachable}")),
            });
        };
        degraded += usize::from(!search.warnings.is_empty());
        warnings.extend(search.warnings);
        let mut level = answer_confidence(confidence, &entity_confidences).lowered(degraded);
        if results.results.is_empty() {
            // Nothing found: whatever the plan, the answer is no strong one.
            level = level.at_most(ConfidenceLevel::Low);
        }
        let selected_profile =
            if selected.is_empty() { results.profiles_used.first().cloned().unwrap_or_default() } else { selected };
        let answer = QueryAnswer {
            query: query.to_owned(),
            results: results.results,
            metadata: QueryMetadata {
                planning_time_ms,
                search_time_ms,
                fusion_time_ms: results.fusion_time_ms,
                total_time_ms: ms(received.elapsed()),
                selected_profile,
                profiles_used: results.profiles_used,
                confidence,
                entities: entities.value.map(|e| e.entities).unwrap_or_default(),
                agents: calls,
                trace_id: mesh_telemetry::trace_id(&tracing::Span::current()),
            },
        };
        if !warnings.is_empty() {
            mesh_telemetry::span_event(
                &tracing::Span::current(),
                "partial_answer",
                &[("mesh.warnings", warnings.join("; "))],
            );
        }
        Ok(Answered { answer, warnings, confidence: level })
    }

    /// Profile selection needs the profiles the search agent advertises in its card. The whole
    /// path (card, discovery, call) stays within the planning timeout.
    async fn select_profiles(
        &self,
        scope: &CallScope,
        query: &str,
        search_agent: Option<&AgentSummary>,
        received: Instant,
    ) -> Outcome<ProfileSelection> {
        let select = async {
            let available_profiles = match search_agent {
                Some(agent) => self.advertised_profiles(agent).await,
                None => Err("no search agent to list the profiles".to_owned()),
            };
            match available_profiles {
                Ok(available_profiles) => {
                    let request = ProfileSelectionRequest { available_profiles };
                    self.call(scope, CAPABILITY_PROFILE_SELECTION, None, query, Some(&request), received).await
                }
                Err(reason) => Outcome::skipped(CAPABILITY_PROFILE_SELECTION, reason, received),
            }
        };
        match tokio::time::timeout(self.settings.planning_timeout, select).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::skipped(
                CAPABILITY_PROFILE_SELECTION,
                format!("no answer within {} ms", self.settings.planning_timeout.as_millis()),
                received,
            ),
        }
    }

    async fn advertised_profiles(&self, agent: &AgentSummary) -> Result<Vec<SearchProfile>, String> {
        let card = self.caller.discovery().card(agent).await.map_err(|e| format!("no search agent card: {e}"))?;
        search_profiles(&card).ok_or_else(|| format!("the card of {:?} lists no search profiles", agent.name))
    }

    /// The selected profile alone when profile selection is confident; otherwise an ensemble with
    /// the best-scoring alternatives, so fusion hedges an uncertain choice.
    fn ensemble(&self, choice: &ProfileSelection) -> Vec<String> {
        let mut profiles = vec![choice.selected_profile.clone()];
        if choice.confidence < self.settings.ensemble_below_confidence {
            profiles.extend(
                choice
                    .alternatives
                    .iter()
                    .filter(|a| a.score > 0.0 && a.profile != choice.selected_profile)
                    .map(|a| a.profile.clone()),
            );
        }
        profiles.truncate(self.settings.ensemble_profiles_max.max(1));
        profiles
    }

    /// Sends the query (and `data`) to an agent for `capability` (`prefer` first: the search
    /// agent whose card listed the profiles) through the mesh caller, which retries on other
    /// replicas, and decodes its answer; the whole call stays within the capability's timeout.
    async fn call<D: Serialize + Sync, T: DeserializeOwned + Send>(
        &self,
        scope: &CallScope,
        capability: &str,
        prefer: Option<AgentSummary>,
        query: &str,
        data: Option<&D>,
        received: Instant,
    ) -> Outcome<T> {
        let started_ms = ms(received.elapsed());
        let started = Instant::now();
        let record = |agent: Option<&str>, status: &str, agent_time_ms: Option<f64>, error: Option<String>| AgentCall {
            capability: capability.to_owned(),
            agent: agent.map(str::to_owned),
            status: status.to_owned(),
            started_ms,
            time_ms: ms(started.elapsed()),
            agent_time_ms,
            error,
        };
        let timeout =
            if capability == CAPABILITY_SEARCH { self.settings.search_timeout } else { self.settings.planning_timeout };
        let data = data.and_then(|d| serde_json::to_value(d).ok()).filter(|v| v != &Value::Null);
        let task = TaskRequest::from_text(None, query, data);
        let target = Target::Capability { capability: capability.to_owned(), prefer: prefer.map(|a| a.name) };
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let answered = self.caller.call(scope, &target, &task, Some(timeout_ms)).await;
        let decoded = answered.and_then(|answered| {
            let endpoint = answered.agent.process_endpoint.as_str();
            let value = reply_data::<T>(endpoint, &answered.response).map_err(|source| CallError::Failed {
                agent: answered.agent.name.clone(),
                attempts: answered.attempts,
                source: Box::new(source),
            })?;
            Ok((answered, value))
        });
        match decoded {
            Ok((answered, value)) => {
                let response = answered.response;
                let word = if response.status == ResponseStatus::Partial { "partial" } else { "success" };
                let call = record(Some(&answered.agent.name), word, Some(response.metadata.processing_time_ms), None);
                let warnings = response.warnings.into_iter().map(|w| format!("{capability}: {w}")).collect();
                Outcome { value: Some(value), call, warnings, failure: None }
            }
            Err(CallError::Discovery(error)) => Outcome::unavailable(capability, error.to_string(), received),
            Err(error) => {
                let status = if error.is_timeout() { "timeout" } else { "error" };
                let reason = error.to_string();
                let agent = match &error {
                    CallError::Failed { agent, .. } => Some(agent.as_str()),
                    _ => None,
                };
                Outcome {
                    value: None,
                    call: record(agent, status, None, Some(reason.clone())),
                    warnings: vec![format!("{capability} failed ({status}): {reason}")],
                    failure: Some(error),
                }
            }
        }
    }
}

impl AgentHandler for Orchestrator {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        let options: QueryOptions = serde_json::from_value(Value::Object(task.data))
            .map_err(|e| AgentError::InvalidInput(format!("invalid query options: {e}")))?;
        // In a conversation, a follow-up ("and what about drones") is searched with what it follows.
        let query = crate::followup::conversation_query(&task.messages, &task.text);
        let Answered { answer, warnings, confidence } = self.answer(&task.call, &query, options).await?;
        // People read the text part (`chat`, the conversation); programs read the data part.
        let text = answer.to_text();
        let data = serde_json::to_value(answer).map_err(|e| AgentError::Internal(e.to_string()))?;
        Ok(AgentReply { parts: vec![Part::Text { text }, Part::Data { data }], warnings, confidence: Some(confidence) })
    }
}

/// The answer's confidence from its planners' (seed 003: computed by the agent that answers):
/// profile selection's confidence weighs [`SELECTION_CONFIDENCE_WEIGHT`], the entities' mean
/// confidence the rest (profile selection's alone when no entity was found).
fn answer_confidence(selection: f64, entities: &[f64]) -> ConfidenceLevel {
    let score = if entities.is_empty() {
        selection
    } else {
        let mean = entities.iter().sum::<f64>() / entities.len() as f64;
        SELECTION_CONFIDENCE_WEIGHT * selection + (1.0 - SELECTION_CONFIDENCE_WEIGHT) * mean
    };
    ConfidenceLevel::from_score(score)
}

fn ms(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_confidence_comes_from_the_planners() {
        assert_eq!(answer_confidence(0.9, &[]), ConfidenceLevel::High);
        assert_eq!(answer_confidence(0.9, &[0.5, 0.5]), ConfidenceLevel::High, "0.675 + 0.125");
        assert_eq!(answer_confidence(0.8, &[0.2]), ConfidenceLevel::Medium, "0.6 + 0.05");
        assert_eq!(answer_confidence(0.3, &[]), ConfidenceLevel::Low);
        assert_eq!(answer_confidence(0.0, &[0.1]), ConfidenceLevel::Speculative);
    }
}
