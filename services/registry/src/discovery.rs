//! Search over agent cards (issue #37): every skill of every registered agent is a document,
//! ranked for a free-text request by BM25 over its weighted fields and, when the embedding model
//! is loaded, by the cosine of its sentence embedding with the request's; the two rankings are
//! fused with Reciprocal Rank Fusion, the search agent's own code (crate `mesh-rank`).
//!
//! The index follows the [`Directory`]: a worker ([`follow`]) wakes on every change of the agent
//! set, re-indexes the agents whose searchable part changed (a fingerprint tells), then computes
//! the vectors of their skills off the runtime's threads. BM25 answers for an agent as soon as
//! the worker has seen it; the dense ranking once its vectors are in.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock, RwLock};

use mesh_embedding::{Encoder, QueryCache, dot};
use mesh_rank::analyzer::{TextAnalyzer, english_analyzer, terms};
use mesh_rank::bm25::{Bm25Index, Field};
use mesh_rank::fusion::{Ranking, weighted_reciprocal_rank_fusion};
use tokio::sync::watch;

use crate::card::CardProfile;
use crate::directory::Directory;
use mesh_protocol::registry::SkillProfile;

/// The rankings' names in [`DiscoveryIndex::rankings`].
pub const LEXICAL_RANKING: &str = "bm25";
pub const DENSE_RANKING: &str = "dense";
/// The fusion's constant: small, so the first few places of each ranking weigh most (measured on
/// the labelled set's tuning split: k = 10 beats the search agent's 60 by 3 to 6 points of
/// recall@5).
pub const FUSION_K: f64 = 10.0;
/// How much the dense ranking weighs against BM25's in the fusion: requests are worded unlike
/// cards, and meaning finds what words miss (tuning split: top-1 0.57 against 0.53 at weight 1).
pub const DENSE_WEIGHT: f64 = 2.0;
/// Candidates each ranking contributes to the fusion: deeper than any answer, so a skill both
/// rankings place modestly can still rise.
pub const CANDIDATES_PER_RANKING: usize = 100;
/// Query vectors kept, so a repeated request costs no forward pass.
const QUERY_CACHE_ENTRIES: usize = 1_024;
/// Skills whose vectors are computed in one forward pass.
const EMBEDDING_BATCH_SKILLS: usize = 32;

/// How much one occurrence of a word counts in each field of a skill: its own name and tags say
/// most about what it does, the agent's description least (it covers every skill).
const SKILL_NAME_WEIGHT: f32 = 3.0;
const SKILL_ID_WEIGHT: f32 = 2.0;
const SKILL_TAGS_WEIGHT: f32 = 2.0;
const SKILL_DESCRIPTION_WEIGHT: f32 = 1.5;
const SKILL_EXAMPLES_WEIGHT: f32 = 1.0;
const AGENT_NAME_WEIGHT: f32 = 1.0;
const AGENT_DESCRIPTION_WEIGHT: f32 = 0.5;

/// One skill of one agent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SkillKey {
    pub agent: Arc<str>,
    pub skill: Arc<str>,
}

/// What the directory gives the index about an agent: its searchable part and what filters it.
#[derive(Debug, Clone)]
pub struct SearchSource {
    pub name: String,
    pub profile: CardProfile,
    pub capabilities: Vec<String>,
    pub tenant: String,
}

impl SearchSource {
    /// A hash of everything the index keeps of the agent: equal fingerprints need no re-indexing.
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&self.profile, &self.capabilities, &self.tenant).hash(&mut hasher);
        hasher.finish()
    }

    /// The skills searched: the card's, or for an agent whose card was not read (or lists no
    /// skill), one per capability, named by it.
    fn skills(&self) -> Vec<SkillProfile> {
        if !self.profile.skills.is_empty() {
            return self.profile.skills.clone();
        }
        self.capabilities
            .iter()
            .map(|capability| SkillProfile {
                id: capability.clone(),
                name: capability.clone(),
                ..SkillProfile::default()
            })
            .collect()
    }
}

#[derive(Debug)]
struct IndexedAgent {
    fingerprint: u64,
    description: String,
    tenant: String,
    capabilities: Vec<String>,
    skills: Vec<SkillProfile>,
    /// Each skill's vector, in `skills`' order, once computed: the mean of the vectors of what
    /// it does and of each of its examples. Kept with the agent, so a dense ranking asks whether
    /// an agent is admitted once, then scores its skills.
    vectors: Vec<Option<Vec<f32>>>,
}

#[derive(Debug, Default)]
struct IndexState {
    agents: HashMap<Arc<str>, IndexedAgent>,
    bm25: Bm25Index<SkillKey>,
    /// Skills indexed for BM25 whose vectors are still to be computed.
    pending_vectors: HashSet<SkillKey>,
}

/// A skill as a search ranks it.
#[derive(Debug, Clone, PartialEq)]
pub struct RankedSkill {
    pub key: SkillKey,
    /// The fused (RRF) score.
    pub score: f64,
    pub skill: SkillProfile,
}

/// The search index over the directory's agents.
pub struct DiscoveryIndex {
    state: RwLock<IndexState>,
    /// Cloned for each query: building one reads the stop-word list and the stemmer's tables.
    analyzer: TextAnalyzer,
    encoder: OnceLock<Arc<Encoder>>,
    queries: QueryCache,
    /// How many directory changes the index has applied (BM25 and vectors both), for callers
    /// that wait for a registration to become searchable.
    applied: watch::Sender<u64>,
}

impl std::fmt::Debug for DiscoveryIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveryIndex").field("skills", &self.skills()).field("dense", &self.dense()).finish()
    }
}

impl Default for DiscoveryIndex {
    fn default() -> Self {
        Self {
            state: RwLock::default(),
            analyzer: english_analyzer(),
            encoder: OnceLock::new(),
            queries: QueryCache::new(QUERY_CACHE_ENTRIES),
            applied: watch::Sender::new(0),
        }
    }
}

impl DiscoveryIndex {
    /// Ranks by vectors too from now on; the skills indexed so far get theirs at the next sync.
    pub fn set_encoder(&self, encoder: Arc<Encoder>) {
        if self.encoder.set(encoder).is_ok() {
            let mut state = self.write();
            let keys: Vec<SkillKey> = state.agents.iter().flat_map(|(name, agent)| skill_keys(name, agent)).collect();
            state.pending_vectors.extend(keys);
        }
    }

    /// Whether the dense ranking takes part.
    pub fn dense(&self) -> bool {
        self.encoder.get().is_some()
    }

    /// Indexed skills.
    pub fn skills(&self) -> usize {
        self.read().bm25.len()
    }

    /// Skills with their vector computed.
    pub fn vectors(&self) -> usize {
        self.read().agents.values().flat_map(|agent| &agent.vectors).filter(|vector| vector.is_some()).count()
    }

    /// Changes applied so far; a registration is searchable once the count
    /// moved past the one read when it was acknowledged.
    pub fn applied(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// Brings the index to `sources` (every agent in the directory): agents gone are taken out,
    /// new or changed ones (re-)indexed for BM25 at once; returns the skills whose vectors are
    /// now due.
    pub fn apply(&self, sources: Vec<SearchSource>) -> Vec<(SkillKey, Vec<String>)> {
        let mut analyzer = self.analyzer.clone();
        let mut state = self.write();
        let present: HashSet<&str> = sources.iter().map(|s| s.name.as_str()).collect();
        let gone: Vec<Arc<str>> = state.agents.keys().filter(|name| !present.contains(&***name)).cloned().collect();
        for name in gone {
            if let Some(agent) = state.agents.remove(&name) {
                remove_skills(&mut state, &name, &agent);
            }
        }
        for source in sources {
            let fingerprint = source.fingerprint();
            if state.agents.get(source.name.as_str()).is_some_and(|a| a.fingerprint == fingerprint) {
                continue;
            }
            let name: Arc<str> = source.name.as_str().into();
            if let Some(previous) = state.agents.remove(&name) {
                remove_skills(&mut state, &name, &previous);
            }
            let agent = IndexedAgent {
                fingerprint,
                description: source.profile.description.clone(),
                vectors: vec![None; source.skills().len()],
                skills: source.skills(),
                tenant: source.tenant,
                capabilities: source.capabilities,
            };
            for skill in &agent.skills {
                let key = SkillKey { agent: name.clone(), skill: skill.id.as_str().into() };
                index_skill(&mut state.bm25, &mut analyzer, key.clone(), &name, &source.profile, skill);
                if self.dense() {
                    state.pending_vectors.insert(key);
                }
            }
            state.agents.insert(name, agent);
        }
        let mut due: Vec<SkillKey> = state.pending_vectors.iter().cloned().collect();
        due.sort();
        due.into_iter()
            .filter_map(|key| {
                let agent = state.agents.get(&key.agent)?;
                let skill = agent.skills.iter().find(|s| *s.id == *key.skill)?;
                Some((key.clone(), embedding_texts(&key.agent, &agent.description, skill)))
            })
            .collect()
    }

    /// Computes the vectors of `due` skills (on the calling thread: call it off the runtime's).
    /// A skill removed or changed meanwhile is not given a stale vector.
    pub fn embed(&self, due: &[(SkillKey, Vec<String>)]) {
        let Some(encoder) = self.encoder.get() else { return };
        let dimensions = encoder.dimensions();
        for batch in due.chunks(EMBEDDING_BATCH_SKILLS) {
            let texts: Vec<&str> = batch.iter().flat_map(|(_, texts)| texts.iter().map(String::as_str)).collect();
            let vectors = match encoder.encode(&texts) {
                Ok(vectors) => vectors,
                Err(error) => {
                    tracing::warn!(%error, "agent skills could not be embedded; they are found by words only");
                    return;
                }
            };
            let mut rows = vectors.chunks_exact(dimensions);
            let mut state = self.write();
            for (key, texts) in batch {
                let vector = mean(rows.by_ref().take(texts.len()), dimensions);
                // Only where the skill is still the one embedded: it may have changed meanwhile.
                if !state.pending_vectors.remove(key) {
                    continue;
                }
                let Some(agent) = state.agents.get_mut(&key.agent) else { continue };
                let position = agent.skills.iter().position(|skill| {
                    *skill.id == *key.skill && embedding_texts(&key.agent, &agent.description, skill) == *texts
                });
                if let Some(position) = position {
                    agent.vectors[position] = Some(vector);
                }
            }
        }
    }

    /// The query's vector when the model is loaded (computed on the calling thread; cached).
    pub fn query_vector(&self, text: &str) -> Option<Arc<[f32]>> {
        let encoder = self.encoder.get()?;
        match self.queries.vector(text, |text| encoder.encode_one(text)) {
            Ok((vector, _)) => Some(vector),
            Err(error) => {
                tracing::warn!(%error, "the request could not be embedded; ranking by words only");
                None
            }
        }
    }

    /// The rankings of the skills for `text` among the agents `admit` accepts (by name, tenant
    /// and capabilities), each best first and at most [`CANDIDATES_PER_RANKING`] long: `bm25`,
    /// and `dense` when a query vector is given. Skills are keyed `agent\nskill`.
    pub fn rankings(
        &self,
        text: &str,
        vector: Option<&[f32]>,
        admit: &dyn Fn(&str, &str, &[String]) -> bool,
    ) -> Vec<Ranking> {
        let query = terms(&mut self.analyzer.clone(), text);
        let state = self.read();
        let admitted = |key: &SkillKey| {
            state.agents.get(&key.agent).is_some_and(|agent| admit(&key.agent, &agent.tenant, &agent.capabilities))
        };
        let ranking = |profile: &str, hits: Vec<(SkillKey, f64)>| Ranking {
            profile: profile.to_owned(),
            hits: hits.into_iter().map(|(key, score)| (ranking_key(&key), score)).collect(),
        };
        let lexical = state.bm25.search(&query, CANDIDATES_PER_RANKING, admitted);
        let mut rankings =
            vec![ranking(LEXICAL_RANKING, lexical.into_iter().map(|(k, s)| (k, f64::from(s))).collect())];
        if let Some(vector) = vector {
            // Scores first, keys only for the best: a key costs two reference counts.
            let mut scored: Vec<(f32, &Arc<str>, usize)> = Vec::new();
            for (name, agent) in &state.agents {
                if !admit(name, &agent.tenant, &agent.capabilities) {
                    continue;
                }
                for (position, values) in agent.vectors.iter().enumerate() {
                    if let Some(values) = values {
                        scored.push((dot(vector, values), name, position));
                    }
                }
            }
            let by_score = |a: &(f32, &Arc<str>, usize), b: &(f32, &Arc<str>, usize)| {
                b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)).then_with(|| a.2.cmp(&b.2))
            };
            if scored.len() > CANDIDATES_PER_RANKING {
                scored.select_nth_unstable_by(CANDIDATES_PER_RANKING - 1, by_score);
                scored.truncate(CANDIDATES_PER_RANKING);
            }
            scored.sort_unstable_by(by_score);
            let scored: Vec<(SkillKey, f64)> = scored
                .into_iter()
                .filter_map(|(score, name, position)| {
                    let skill = state.agents.get(name)?.skills.get(position)?;
                    Some((SkillKey { agent: name.clone(), skill: skill.id.as_str().into() }, f64::from(score)))
                })
                .collect();
            rankings.push(ranking(DENSE_RANKING, scored));
        }
        rankings
    }

    /// The best `limit` skills for `text` among the agents `admit` accepts, best first: the
    /// [`Self::rankings`] fused.
    pub fn rank(
        &self,
        text: &str,
        vector: Option<&[f32]>,
        limit: usize,
        admit: &dyn Fn(&str, &str, &[String]) -> bool,
    ) -> Vec<RankedSkill> {
        let rankings = self.rankings(text, vector, admit);
        let weights: Vec<f64> =
            rankings.iter().map(|r| if r.profile == DENSE_RANKING { DENSE_WEIGHT } else { 1.0 }).collect();
        let fused = weighted_reciprocal_rank_fusion(&rankings, &weights, FUSION_K, limit);
        let state = self.read();
        fused
            .into_iter()
            .filter_map(|fused| {
                let (agent, skill) = fused.key.split_once('\n')?;
                let indexed = state.agents.get(agent)?.skills.iter().find(|s| s.id == skill)?.clone();
                let key = SkillKey { agent: agent.into(), skill: skill.into() };
                Some(RankedSkill { key, score: fused.score, skill: indexed })
            })
            .collect()
    }

    fn mark_applied(&self) {
        self.applied.send_modify(|count| *count += 1);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, IndexState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    // Every update is a sequence of inserts and removals each leaving the maps consistent, so
    // a poisoned lock is still safe to use.
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, IndexState> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }
}

fn skill_keys(name: &Arc<str>, agent: &IndexedAgent) -> Vec<SkillKey> {
    agent.skills.iter().map(|skill| SkillKey { agent: name.clone(), skill: skill.id.as_str().into() }).collect()
}

fn remove_skills(state: &mut IndexState, name: &Arc<str>, agent: &IndexedAgent) {
    for key in skill_keys(name, agent) {
        state.bm25.remove(&key);
        state.pending_vectors.remove(&key);
    }
}

fn index_skill(
    bm25: &mut Bm25Index<SkillKey>,
    analyzer: &mut TextAnalyzer,
    key: SkillKey,
    agent_name: &str,
    profile: &CardProfile,
    skill: &SkillProfile,
) {
    let mut analysed = |text: &str| terms(analyzer, text);
    let name = analysed(&skill.name);
    let id = analysed(&skill.id);
    let tags = analysed(&skill.tags.join(" "));
    let description = analysed(&skill.description);
    let examples = analysed(&skill.examples.join(" "));
    let agent = analysed(agent_name);
    let agent_description = analysed(&profile.description);
    bm25.upsert(
        key,
        &[
            Field { terms: &name, weight: SKILL_NAME_WEIGHT },
            Field { terms: &id, weight: SKILL_ID_WEIGHT },
            Field { terms: &tags, weight: SKILL_TAGS_WEIGHT },
            Field { terms: &description, weight: SKILL_DESCRIPTION_WEIGHT },
            Field { terms: &examples, weight: SKILL_EXAMPLES_WEIGHT },
            Field { terms: &agent, weight: AGENT_NAME_WEIGHT },
            Field { terms: &agent_description, weight: AGENT_DESCRIPTION_WEIGHT },
        ],
    );
}

/// What the model reads of a skill: what it does, in its agent's words too (the model reads at
/// most 256 tokens), then each example on its own, since an example is worded as the requests it
/// answers are. The skill's vector is their mean.
fn embedding_texts(agent: &str, profile_description: &str, skill: &SkillProfile) -> Vec<String> {
    let mut about = format!("{}: {}", skill.name, skill.description);
    if !skill.tags.is_empty() {
        about.push_str(&format!(" ({})", skill.tags.join(", ")));
    }
    about.push_str(&format!(". {agent}: {profile_description}"));
    std::iter::once(about).chain(skill.examples.iter().cloned()).collect()
}

/// The mean of `rows`, each `dimensions` long.
fn mean<'a>(rows: impl Iterator<Item = &'a [f32]>, dimensions: usize) -> Vec<f32> {
    let mut sum = vec![0.0f32; dimensions];
    let mut count = 0u16;
    for row in rows {
        sum.iter_mut().zip(row).for_each(|(total, value)| *total += value);
        count = count.saturating_add(1);
    }
    let count = f32::from(count.max(1));
    sum.iter_mut().for_each(|total| *total /= count);
    sum
}

/// A skill's key in a [`Ranking`]: agent names and skill ids hold no newline (the registry
/// refuses such names; a card's skill id is taken as written, but a newline in it only makes the
/// skill unresolvable, never another's).
fn ranking_key(key: &SkillKey) -> String {
    format!("{}\n{}", key.agent, key.skill)
}

/// Keeps `index` in step with `directory` until the directory's change feed closes: applies each
/// change (several at once when they come faster than they are applied), then computes the due
/// vectors on a blocking thread.
pub async fn follow(index: Arc<DiscoveryIndex>, directory: Arc<Directory>) {
    let mut changes = directory.changes();
    loop {
        changes.borrow_and_update();
        let due = index.apply(directory.search_sources());
        if !due.is_empty() {
            let worker = index.clone();
            if let Err(error) = tokio::task::spawn_blocking(move || worker.embed(&due)).await {
                tracing::warn!(%error, "embedding agent skills failed");
            }
        }
        index.mark_applied();
        if changes.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(name: &str, description: &str, skills: &[(&str, &str, &str)]) -> SearchSource {
        SearchSource {
            name: name.into(),
            profile: CardProfile {
                description: description.into(),
                skills: skills
                    .iter()
                    .map(|(id, skill_name, text)| SkillProfile {
                        id: (*id).into(),
                        name: (*skill_name).into(),
                        description: (*text).into(),
                        ..SkillProfile::default()
                    })
                    .collect(),
            },
            capabilities: skills.iter().map(|(id, _, _)| (*id).to_owned()).collect(),
            tenant: String::new(),
        }
    }

    fn top(index: &DiscoveryIndex, text: &str) -> Vec<(String, String)> {
        index
            .rank(text, None, 5, &|_, _, _| true)
            .into_iter()
            .map(|r| (r.key.agent.to_string(), r.key.skill.to_string()))
            .collect()
    }

    fn sample() -> Vec<SearchSource> {
        vec![
            source(
                "Currency Agent",
                "Money helper",
                &[(
                    "convert_currency",
                    "Currency conversion",
                    "Converts amounts between currencies at today's exchange rate",
                )],
            ),
            source(
                "travel-planner",
                "Plans trips",
                &[
                    ("book_flight", "Flight booking", "Books airline tickets"),
                    ("find_hotel", "Hotel search", "Finds rooms to stay in a city"),
                ],
            ),
        ]
    }

    #[test]
    fn a_request_finds_the_skill_that_answers_it() {
        let index = DiscoveryIndex::default();
        index.apply(sample());
        assert_eq!(index.skills(), 3);
        assert_eq!(
            top(&index, "how many euros is 100 dollars at the exchange rate")[0],
            ("Currency Agent".into(), "convert_currency".into())
        );
        assert_eq!(top(&index, "a room in Lisbon")[0], ("travel-planner".into(), "find_hotel".into()));
    }

    #[test]
    fn removed_and_changed_agents_are_searched_as_they_are_now() {
        let index = DiscoveryIndex::default();
        index.apply(sample());
        let mut changed = sample();
        changed.remove(0);
        changed[0].profile.skills.remove(1);
        index.apply(changed);
        assert_eq!(index.skills(), 1);
        assert!(top(&index, "exchange rate").is_empty());
        assert!(top(&index, "hotel room").is_empty());
    }

    #[test]
    fn an_agent_without_a_read_card_is_found_by_its_capabilities() {
        let index = DiscoveryIndex::default();
        let mut seed = source("weather", "", &[]);
        seed.capabilities = vec!["weather_forecast".into()];
        index.apply(vec![seed]);
        assert_eq!(top(&index, "forecast for tomorrow"), [("weather".to_owned(), "weather_forecast".to_owned())]);
    }

    #[test]
    fn the_filter_sees_each_agent_with_its_tenant_and_capabilities() {
        let index = DiscoveryIndex::default();
        let mut sources = sample();
        sources[1].tenant = "acme".into();
        index.apply(sources);
        let seen = index.rank("flight hotel currency", None, 10, &|_, tenant, _| tenant.is_empty());
        assert!(seen.iter().all(|r| &*r.key.agent == "Currency Agent"), "{seen:?}");
        let by_capability =
            index.rank("flight hotel currency", None, 10, &|_, _, caps| caps.iter().any(|c| c == "book_flight"));
        assert_eq!(by_capability.len(), 2, "every skill of an agent offering the capability: {by_capability:?}");
    }
}
