//! Finding agents by what they do (issue #37): `GET /agents` with `q` ranks the agents a caller
//! sees by their cards, and `POST /route` answers the healthy agent and skill that best fit an A2A
//! message. Both read the search index ([`crate::discovery`]).

use mesh_auth::Caller;
use mesh_protocol::registry::{HealthStatus, MatchedSkill, RouteRequest, SkillProfile, Success};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::RegistryState;
use crate::directory::{RegisteredAgent, RegisteredAgents};
use crate::discovery::RankedSkill;
use crate::error::RegistryError;
use crate::tenancy::TenantView;

/// Longest request text searched or routed, in characters: a request is a few sentences; the
/// query vector reads at most 256 tokens anyway.
pub const QUERY_CHARS_MAX: usize = 2_000;
/// Agents a search answers unless it asks for another number.
pub const SEARCH_LIMIT_DEFAULT: usize = 10;
/// Most agents a search answers.
pub const SEARCH_LIMIT_MAX: usize = 100;
/// Other (agent, skill) choices a route answers beside the best one.
pub const ROUTE_ALTERNATIVES: usize = 4;

/// `GET /agents` parameters.
#[derive(Debug, Default, Deserialize, IntoParams)]
pub struct AgentQuery {
    /// Free text: ranks the agents by their cards (name, description, skills), best first, each
    /// with the skills that matched; without it every agent is listed in name order.
    pub q: Option<String>,
    /// Only agents offering this capability.
    pub capability: Option<String>,
    /// Only agents in this health (`healthy`, `unhealthy`, `unreachable`, `unknown`).
    pub health: Option<HealthStatus>,
    /// Most agents a search answers (1 to 100, default 10); a listing is not cut.
    pub limit: Option<usize>,
    /// Only the agents this tenant sees (a caller names only a tenant it acts for); the caller's
    /// own view when absent.
    pub tenant: Option<String>,
}

/// One agent a search found: the registered agent, its score (its best skill's) and the skills
/// that matched, best first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentMatch {
    #[serde(flatten)]
    pub agent: RegisteredAgent,
    pub score: f64,
    pub matched_skills: Vec<MatchedSkill>,
}

/// `GET /agents?q=...`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentMatches {
    pub status: Success,
    pub query: String,
    /// Rankings fused: `bm25`, and `dense` when the embedding model is loaded.
    pub rankings: Vec<String>,
    pub total: usize,
    pub agents: Vec<AgentMatch>,
}

/// `GET /agents`: the listing without `q`, the search with it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum AgentsAnswer {
    Listed(RegisteredAgents),
    Found(AgentMatches),
}

/// One (agent, skill) a route may send the message to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RouteChoice {
    pub agent: RegisteredAgent,
    pub skill: SkillProfile,
    pub score: f64,
}

/// `POST /route`'s answer: the best healthy agent and skill, and the next best.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Route {
    pub status: Success,
    pub agent: RegisteredAgent,
    pub skill: SkillProfile,
    pub score: f64,
    pub alternatives: Vec<RouteChoice>,
}

/// Ranks the agents `caller` sees for `query.q`.
pub async fn search(state: &RegistryState, caller: &Caller, query: AgentQuery) -> Result<AgentMatches, RegistryError> {
    let text = query.q.clone().unwrap_or_default();
    let limit = query.limit.unwrap_or(SEARCH_LIMIT_DEFAULT);
    if !(1..=SEARCH_LIMIT_MAX).contains(&limit) {
        return Err(RegistryError::InvalidQuery(format!("limit must be 1 to {SEARCH_LIMIT_MAX}, not {limit}")));
    }
    let view = TenantView::of(caller, query.tenant.as_deref())?;
    let ranked = ranked_skills(state, &text, &view, query.capability.as_deref(), query.health).await?;
    let mut agents: Vec<AgentMatch> = Vec::new();
    for ranked in ranked {
        let matched = MatchedSkill { skill: ranked.skill, score: ranked.score };
        if let Some(found) = agents.iter_mut().find(|a| *a.agent.record.name == *ranked.key.agent) {
            found.matched_skills.push(matched);
            continue;
        }
        if agents.len() == limit {
            continue;
        }
        // Gone since it was ranked (removed meanwhile): left out.
        let Ok(agent) = state.directory.registered(&ranked.key.agent, &view) else { continue };
        agents.push(AgentMatch { agent, score: ranked.score, matched_skills: vec![matched] });
    }
    let mut rankings = vec!["bm25".to_owned()];
    if state.discovery.dense() {
        rankings.push("dense".to_owned());
    }
    Ok(AgentMatches { status: Success::Success, query: text, rankings, total: agents.len(), agents })
}

/// The best healthy agent and skill for `request`'s text, as `caller` sees the agents.
pub async fn route(state: &RegistryState, caller: &Caller, request: RouteRequest) -> Result<Route, RegistryError> {
    let text: Vec<&str> = request.message.parts.iter().filter_map(|part| part.as_text()).collect();
    let text = text.join("\n");
    let view = TenantView::of(caller, request.tenant.as_deref())?;
    let ranked = ranked_skills(state, &text, &view, None, Some(HealthStatus::Healthy)).await?;
    let mut choices = ranked.into_iter().filter_map(|ranked| {
        let agent = state.directory.registered(&ranked.key.agent, &view).ok()?;
        Some(RouteChoice { agent, skill: ranked.skill, score: ranked.score })
    });
    let best = choices.next().ok_or(RegistryError::NoRoute)?;
    Ok(Route {
        status: Success::Success,
        agent: best.agent,
        skill: best.skill,
        score: best.score,
        alternatives: choices.take(ROUTE_ALTERNATIVES).collect(),
    })
}

/// Every skill the fusion ranks for `text` among the agents `view` sees, filtered by capability
/// and health, best first.
async fn ranked_skills(
    state: &RegistryState,
    text: &str,
    view: &TenantView,
    capability: Option<&str>,
    health: Option<HealthStatus>,
) -> Result<Vec<RankedSkill>, RegistryError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(RegistryError::InvalidQuery("the request has no text to search by".into()));
    }
    let chars = text.chars().count();
    if chars > QUERY_CHARS_MAX {
        return Err(RegistryError::InvalidQuery(format!(
            "the request has {chars} characters; at most {QUERY_CHARS_MAX} are searched"
        )));
    }
    let index = state.discovery.clone();
    let vector = if index.dense() {
        let owned = text.to_owned();
        // A forward pass of the model takes milliseconds of CPU: not on the runtime's threads.
        tokio::task::spawn_blocking(move || index.query_vector(&owned)).await.ok().flatten()
    } else {
        None
    };
    let directory = &state.directory;
    let admit = |name: &str, tenant: &str, capabilities: &[String]| {
        (tenant.is_empty() || view.sees(tenant))
            && capability.is_none_or(|wanted| capabilities.iter().any(|c| c == wanted))
            && health.is_none_or(|wanted| directory.health(name) == Some(wanted))
    };
    Ok(state.discovery.rank(text, vector.as_deref(), usize::MAX, &admit))
}
