use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mesh_agent_kit::{AgentError, AgentHandler, AgentReply, TaskInput};
use mesh_protocol::agents::{ProfileRank, QUERY_CHARS_MAX, SearchHit, SearchRequest, SearchResults};
use serde_json::Value;

use crate::error::SearchError;
use crate::index::{DENSE_PROFILE, SearchIndex};
use mesh_rank::fusion::{Ranking, reciprocal_rank_fusion};

/// Time kept back from the caller's deadline for fusing and answering: profiles still ranking
/// when only this much is left are left out of the answer.
const FUSION_RESERVE_MS: u64 = 50;

/// Limits and constants of one search agent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchSettings {
    pub rrf_k: f64,
    pub top_k_default: usize,
    pub top_k_max: usize,
    pub candidates_per_profile: usize,
}

/// Runs the requested profiles in parallel over the index and fuses them.
#[derive(Debug, Clone)]
pub struct SearchAgent {
    index: Arc<SearchIndex>,
    settings: SearchSettings,
    /// Why the `dense` profile is not served, told to callers who ask for it.
    dense_unavailable: Option<String>,
    /// The agent's name, the `service` label of its metrics.
    service: String,
}

/// The `service` label of a search agent's metrics until [`SearchAgent::with_service`] names it.
const SERVICE_DEFAULT: &str = "search";

impl SearchAgent {
    pub fn new(index: Arc<SearchIndex>, settings: SearchSettings) -> Self {
        Self { index, settings, dense_unavailable: None, service: SERVICE_DEFAULT.to_owned() }
    }

    /// Names the agent in its metrics (its registered name).
    pub fn with_service(mut self, service: impl Into<String>) -> Self {
        self.service = service.into();
        self
    }

    pub fn with_dense_unavailable(mut self, reason: Option<String>) -> Self {
        self.dense_unavailable = reason;
        self
    }

    /// Searches with every requested profile the documents `tenant` sees: the shared corpus and
    /// the tenant's own (only the shared corpus for `None`). With a `deadline` (the caller's),
    /// profiles still ranking when it comes are left out and named in the warnings (a partial
    /// answer); an answer needs one profile at least.
    pub async fn search(
        &self,
        query: &str,
        request: &SearchRequest,
        tenant: Option<&str>,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<(SearchResults, Vec<String>), SearchError> {
        let query = query.trim();
        if query.is_empty() {
            return Err(SearchError::EmptyQuery);
        }
        let query_chars = query.chars().count();
        if query_chars > QUERY_CHARS_MAX {
            return Err(SearchError::InvalidParameters(format!(
                "the query has {query_chars} characters; at most {QUERY_CHARS_MAX} are searched"
            )));
        }
        let top_k = request.top_k.unwrap_or(self.settings.top_k_default);
        if top_k == 0 || top_k > self.settings.top_k_max {
            return Err(SearchError::InvalidParameters(format!(
                "top_k must be between 1 and {}, not {top_k}",
                self.settings.top_k_max
            )));
        }
        let profiles = self.profiles_for(request)?;
        let limit = self.settings.candidates_per_profile.max(top_k);
        let parent = tracing::Span::current();
        let tasks: Vec<_> = profiles
            .iter()
            .map(|profile| {
                let (index, profile, query, modality) =
                    (self.index.clone(), profile.clone(), query.to_owned(), request.modality);
                let tenant = tenant.map(str::to_owned);
                let (parent, service) = (parent.clone(), self.service.clone());
                // Ranking is CPU work on tantivy's blocking API: keep it off the async workers,
                // one profile per core at a time.
                crate::spawn_bounded(move || {
                    // Not recorded under an unrecorded request: a span without a parent would
                    // start a trace of its own.
                    let span = if parent.is_disabled() {
                        tracing::Span::none()
                    } else {
                        tracing::info_span!(parent: &parent, "profile", otel.name = ["search.profile", &profile].join(" "), mesh.profile = %profile, mesh.limit = i64::try_from(limit).unwrap_or(i64::MAX))
                    };
                    let _entered = span.enter();
                    let started = Instant::now();
                    let ranked = index.rank_timed(&profile, &query, modality, limit, tenant.as_deref());
                    let elapsed = started.elapsed();
                    let hits = ranked.map(|(hits, embedding)| {
                        if let Some(embedding) = embedding {
                            metrics::histogram!("mesh_search_embedding_duration_seconds", mesh_telemetry::SERVICE_LABEL => service.clone())
                                .record(embedding.as_secs_f64());
                        }
                        hits
                    });
                    metrics::histogram!("mesh_search_profile_duration_seconds", mesh_telemetry::SERVICE_LABEL => service, "profile" => profile.clone())
                        .record(elapsed.as_secs_f64());
                    (profile, hits, elapsed.as_secs_f64() * 1000.0)
                })
            })
            .collect();
        let cutoff = deadline.map(|d| d.checked_sub(Duration::from_millis(FUSION_RESERVE_MS)).unwrap_or(d));
        let (finished, late) = finished_by(profiles.iter().cloned().zip(tasks).collect(), cutoff).await;
        let mut rankings = Vec::with_capacity(finished.len());
        let mut profile_time_ms = BTreeMap::new();
        for finished in finished {
            let (profile, hits, elapsed_ms) = finished.map_err(|e| SearchError::Worker(e.to_string()))??;
            profile_time_ms.insert(profile.clone(), elapsed_ms);
            rankings.push(Ranking { profile, hits: hits? });
        }
        if rankings.is_empty() {
            return Err(SearchError::OutOfTime(late.join(", ")));
        }
        let warnings: Vec<String> = late
            .iter()
            .map(|profile| format!("profile {profile:?} did not finish before the deadline; left out"))
            .collect();
        let profiles: Vec<String> = rankings.iter().map(|r| r.profile.clone()).collect();
        let started = Instant::now();
        let fusion = if mesh_telemetry::recording() {
            tracing::info_span!(
                "fusion",
                otel.name = "search.rrf_fusion",
                mesh.profiles = i64::try_from(rankings.len()).unwrap_or(i64::MAX),
                mesh.rrf_k = self.settings.rrf_k
            )
        } else {
            tracing::Span::none()
        };
        let fused = fusion.in_scope(|| reciprocal_rank_fusion(&rankings, self.settings.rrf_k, top_k));
        drop(fusion);
        let results = fused
            .into_iter()
            .filter_map(|fused| {
                let document = self.index.by_key(&fused.key)?;
                Some(SearchHit {
                    id: document.id.clone(),
                    title: document.title.clone(),
                    text: document.text.clone(),
                    modality: document.modality.clone(),
                    tags: document.tags.clone(),
                    score: fused.score,
                    profile_ranks: fused
                        .ranks
                        .iter()
                        .map(|hit| {
                            (rankings[hit.profile].profile.clone(), ProfileRank { rank: hit.rank, score: hit.score })
                        })
                        .collect(),
                })
            })
            .collect();
        let results = SearchResults {
            results,
            profiles_used: profiles,
            rrf_k: self.settings.rrf_k,
            profile_time_ms,
            fusion_time_ms: started.elapsed().as_secs_f64() * 1000.0,
        };
        metrics::gauge!("mesh_search_index_documents", mesh_telemetry::SERVICE_LABEL => self.service.clone())
            .set(self.index.len() as f64);
        Ok((results, warnings))
    }

    /// The requested profiles, deduplicated in order. When none is named: BM25 fused with the
    /// embeddings when there are any (the best of both on SciFact), else BM25 alone.
    fn profiles_for(&self, request: &SearchRequest) -> Result<Vec<String>, SearchError> {
        if request.profiles.is_empty() {
            let mut profiles = vec![SearchIndex::default_profile().to_owned()];
            if self.index.has_dense() {
                profiles.push(DENSE_PROFILE.to_owned());
            }
            return Ok(profiles);
        }
        let mut profiles: Vec<String> = Vec::with_capacity(request.profiles.len());
        for name in &request.profiles {
            if let (DENSE_PROFILE, Some(reason)) = (name.as_str(), &self.dense_unavailable) {
                return Err(SearchError::ProfileUnavailable { profile: name.clone(), reason: reason.clone() });
            }
            if !self.index.has_profile(name) {
                let available: Vec<String> = self.index.profiles().into_iter().map(|p| p.name).collect();
                return Err(SearchError::UnknownProfile { unknown: name.clone(), available: available.join(", ") });
            }
            if !profiles.contains(name) {
                profiles.push(name.clone());
            }
        }
        Ok(profiles)
    }
}

impl AgentHandler for SearchAgent {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        let request: SearchRequest = serde_json::from_value(Value::Object(task.data))
            .map_err(|e| SearchError::InvalidParameters(e.to_string()))?;
        let deadline = task.call.time_left().map(|left| tokio::time::Instant::now() + left);
        // The tenant the call acts for: the user's own, set from its credentials on the way in
        // (or carried on by the agent that called), never one the request body names.
        let tenant = task.call.context().tenant.as_deref().filter(|tenant| !tenant.is_empty());
        let (results, warnings) = self.search(&task.text, &request, tenant, deadline).await?;
        let data = serde_json::to_value(results).map_err(|e| AgentError::Internal(e.to_string()))?;
        Ok(AgentReply { warnings, ..AgentReply::data(data) })
    }
}

/// Waits for each named task until `cutoff` (forever without one): the results of those that
/// finished, in order, and the names of those that did not (left running; they end on their own).
async fn finished_by<T>(
    tasks: Vec<(String, tokio::task::JoinHandle<T>)>,
    cutoff: Option<tokio::time::Instant>,
) -> (Vec<Result<T, tokio::task::JoinError>>, Vec<String>) {
    let mut finished = Vec::with_capacity(tasks.len());
    let mut late = Vec::new();
    for (name, task) in tasks {
        match cutoff {
            None => finished.push(task.await),
            Some(cutoff) => match tokio::time::timeout_at(cutoff, task).await {
                Ok(result) => finished.push(result),
                Err(_) => late.push(name),
            },
        }
    }
    (finished, late)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn profiles_past_the_cutoff_are_named_and_left_out() {
        let task = |delay_ms: u64| {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                delay_ms
            })
        };
        let tasks = vec![("fast".to_owned(), task(10)), ("slow".to_owned(), task(5_000)), ("mid".to_owned(), task(40))];
        let cutoff = tokio::time::Instant::now() + Duration::from_millis(100);
        let (finished, late) = finished_by(tasks, Some(cutoff)).await;
        let finished: Vec<u64> = finished.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(finished, [10, 40]);
        assert_eq!(late, ["slow"]);
        let (finished, late) = finished_by(vec![("slow".to_owned(), task(5_000))], None).await;
        assert_eq!((finished.len(), late.len()), (1, 0), "without a deadline every profile is waited for");
    }
}
