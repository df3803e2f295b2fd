//! Finding agents by capability (or by name) through the registry, with a short-lived cache so one
//! query does not cost a lookup per agent, and so a registry outage does not stop queries at once.
//!
//! Cache ages are measured on tokio's clock, so the deterministic simulation controls them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::registry::{AgentSummary, HealthStatus};
use tokio::time::Instant;

use crate::agent::fetch_card_at;
use crate::http_client::{ClientError, HttpClient};
use crate::registry::RegistryClient;

/// Time allowed to fetch an agent card.
const CARD_FETCH_TIMEOUT_MS: u64 = 2_000;
/// How long an entry is kept for use while the registry is down; older ones are dropped.
const CACHE_STALE_KEEP_MS: u64 = 3_600_000;
/// Entries each cache holds at most (capabilities, names, cards); the oldest goes first.
pub const DISCOVERY_CACHE_ENTRIES_MAX: usize = 1_024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    #[error("no agent offers {0:?}")]
    NoAgent(String),
    #[error("no agent is registered as {0:?}")]
    UnknownAgent(String),
    #[error("the registry cannot be asked for {capability:?}: {reason}")]
    Registry { capability: String, reason: String },
}

#[derive(Debug)]
struct Cached<T> {
    fetched: Instant,
    value: T,
}

#[derive(Debug)]
pub struct Discovery {
    registry: RegistryClient,
    http: HttpClient,
    ttl: Duration,
    agents: Mutex<HashMap<String, Cached<Vec<AgentSummary>>>>,
    cards: Mutex<HashMap<String, Cached<AgentCard>>>,
    /// One round-robin cursor per capability, so each capability's calls rotate on their own.
    turns: Mutex<HashMap<String, usize>>,
}

impl Discovery {
    pub fn new(registry: RegistryClient, http: HttpClient, ttl: Duration) -> Self {
        Self {
            registry,
            http,
            ttl,
            agents: Mutex::new(HashMap::new()),
            cards: Mutex::new(HashMap::new()),
            turns: Mutex::new(HashMap::new()),
        }
    }

    /// One agent for `capability`: round-robin among the healthy ones, else any registered one.
    pub async fn agent_for(&self, capability: &str) -> Result<AgentSummary, DiscoveryError> {
        self.candidates(capability)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| DiscoveryError::NoAgent(capability.to_owned()))
    }

    /// Every agent for `capability` in the order to try them: the healthy ones first, starting
    /// at this capability's round-robin turn (which this advances), then the others (a last
    /// resort when none is healthy or every healthy one failed).
    pub async fn candidates(&self, capability: &str) -> Result<Vec<AgentSummary>, DiscoveryError> {
        let (mut healthy, mut others) = self.listed(capability).await?;
        let turn = {
            let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
            if turns.len() >= DISCOVERY_CACHE_ENTRIES_MAX && !turns.contains_key(capability) {
                // Cursors only spread calls; starting them over costs one uneven round.
                turns.clear();
            }
            let turn = turns.entry(capability.to_owned()).or_default();
            *turn = turn.wrapping_add(1);
            *turn - 1
        };
        let rotated = if healthy.is_empty() { &mut others } else { &mut healthy };
        if let Some(start) = turn.checked_rem(rotated.len()) {
            rotated.rotate_left(start);
        }
        healthy.extend(others);
        Ok(healthy)
    }

    /// The agents for `capability`, split into the healthy ones and the others, in registry order.
    pub async fn listed(&self, capability: &str) -> Result<(Vec<AgentSummary>, Vec<AgentSummary>), DiscoveryError> {
        let agents = self.agents_for(capability).await?;
        Ok(agents.into_iter().partition(|a| a.health_status == HealthStatus::Healthy))
    }

    /// The agent registered as `name`, cached like discovery results (and kept through a
    /// registry outage the same way).
    pub async fn named(&self, name: &str) -> Result<AgentSummary, DiscoveryError> {
        // `@` is not allowed in capability names, so the key cannot collide with one.
        let key = format!("@{name}");
        if let Some(mut agents) = fresh(&self.agents, &key, self.ttl) {
            return agents.pop().ok_or_else(|| DiscoveryError::UnknownAgent(name.to_owned()));
        }
        match self.registry.agent(name).await {
            Ok(record) => {
                let agent = AgentSummary {
                    name: record.name,
                    url: record.url,
                    health_status: record.health_status,
                    process_endpoint: record.process_endpoint,
                    agent_card_url: record.agent_card_url,
                };
                store(&self.agents, &key, vec![agent.clone()]);
                Ok(agent)
            }
            Err(ClientError::Status { status: 404, .. }) => Err(DiscoveryError::UnknownAgent(name.to_owned())),
            Err(error) => self
                .stale_after(&key, &error)
                .and_then(|mut agents| agents.pop())
                .ok_or_else(|| DiscoveryError::Registry { capability: name.to_owned(), reason: error.to_string() }),
        }
    }

    /// The card of `agent`, from where it was registered, cached like discovery results.
    pub async fn card(&self, agent: &AgentSummary) -> Result<AgentCard, ClientError> {
        let url = agent.agent_card_url.as_str();
        if let Some(card) = fresh(&self.cards, url, self.ttl) {
            return Ok(card);
        }
        let card = fetch_card_at(&self.http, url, Duration::from_millis(CARD_FETCH_TIMEOUT_MS)).await?;
        store(&self.cards, url, card.clone());
        Ok(card)
    }

    async fn agents_for(&self, capability: &str) -> Result<Vec<AgentSummary>, DiscoveryError> {
        if let Some(agents) = fresh(&self.agents, capability, self.ttl) {
            return Ok(agents);
        }
        match self.registry.discover(capability).await {
            Ok(found) => {
                store(&self.agents, capability, found.agents.clone());
                Ok(found.agents)
            }
            Err(ClientError::Status { status: 404, .. }) => Err(DiscoveryError::NoAgent(capability.to_owned())),
            Err(error) => self.stale_after(capability, &error).ok_or_else(|| DiscoveryError::Registry {
                capability: capability.to_owned(),
                reason: error.to_string(),
            }),
        }
    }

    /// The registry is down or failing: a stale answer beats none. It is trusted for another
    /// TTL, so queries do not each wait on the failing registry.
    fn stale_after(&self, key: &str, error: &ClientError) -> Option<Vec<AgentSummary>> {
        let stale = stale(&self.agents, key)?;
        tracing::warn!(%error, key, "registry unavailable; using the last known agents");
        store(&self.agents, key, stale.clone());
        Some(stale)
    }
}

fn fresh<T: Clone>(cache: &Mutex<HashMap<String, Cached<T>>>, key: &str, ttl: Duration) -> Option<T> {
    let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    cache.get(key).filter(|c| c.fetched.elapsed() < ttl).map(|c| c.value.clone())
}

fn stale<T: Clone>(cache: &Mutex<HashMap<String, Cached<T>>>, key: &str) -> Option<T> {
    cache.lock().unwrap_or_else(|e| e.into_inner()).get(key).map(|c| c.value.clone())
}

/// Caches `value` under `key`, dropping entries too old even for an outage, and the oldest entry
/// when the cache is full.
fn store<T>(cache: &Mutex<HashMap<String, Cached<T>>>, key: &str, value: T) {
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    let keep = Duration::from_millis(CACHE_STALE_KEEP_MS);
    cache.retain(|_, cached| cached.fetched.elapsed() < keep);
    if cache.len() >= DISCOVERY_CACHE_ENTRIES_MAX
        && !cache.contains_key(key)
        && let Some(oldest) = cache.iter().min_by_key(|(_, cached)| cached.fetched).map(|(key, _)| key.clone())
    {
        cache.remove(&oldest);
    }
    cache.insert(key.to_owned(), Cached { fetched: Instant::now(), value });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_caches_drop_entries_too_old_for_an_outage_and_stay_bounded() {
        let cache: Mutex<HashMap<String, Cached<u32>>> = Mutex::new(HashMap::new());
        store(&cache, "old", 1);
        tokio::time::advance(Duration::from_millis(CACHE_STALE_KEEP_MS)).await;
        store(&cache, "new", 2);
        assert_eq!(stale(&cache, "old"), None);
        assert_eq!(stale(&cache, "new"), Some(2));
        for i in 0..DISCOVERY_CACHE_ENTRIES_MAX + 10 {
            tokio::time::advance(Duration::from_millis(1)).await;
            store(&cache, &format!("k{i}"), 0);
        }
        let cache = cache.lock().unwrap();
        assert_eq!(cache.len(), DISCOVERY_CACHE_ENTRIES_MAX);
        assert!(!cache.contains_key("new") && !cache.contains_key("k0"), "the oldest entries go first");
        assert!(cache.contains_key(&format!("k{}", DISCOVERY_CACHE_ENTRIES_MAX + 9)));
    }
}
