//! Finding agents by capability through the registry, with a short-lived cache so one query does
//! not cost a lookup per agent, and so a registry outage does not stop queries at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mesh_client::{ClientError, HttpClient, RegistryClient, fetch_card_at};
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::registry::{AgentSummary, HealthStatus};

/// Time allowed to fetch an agent card.
const CARD_FETCH_TIMEOUT_MS: u64 = 2_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    #[error("no agent offers {0:?}")]
    NoAgent(String),
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
        let agents = self.agents_for(capability).await?;
        let healthy: Vec<&AgentSummary> = agents.iter().filter(|a| a.health_status == HealthStatus::Healthy).collect();
        let pool: Vec<&AgentSummary> = if healthy.is_empty() { agents.iter().collect() } else { healthy };
        let turn = {
            let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
            let turn = turns.entry(capability.to_owned()).or_default();
            *turn = turn.wrapping_add(1);
            *turn - 1
        };
        turn.checked_rem(pool.len())
            .and_then(|i| pool.get(i))
            .map(|a| (*a).clone())
            .ok_or_else(|| DiscoveryError::NoAgent(capability.to_owned()))
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
            Err(error) => {
                // The registry is down or failing: a stale answer beats none.
                if let Some(stale) = stale(&self.agents, capability) {
                    tracing::warn!(%error, capability, "registry unavailable; using the last known agents");
                    // Trusted for another TTL, so queries do not each wait on the failing registry.
                    store(&self.agents, capability, stale.clone());
                    return Ok(stale);
                }
                Err(DiscoveryError::Registry { capability: capability.to_owned(), reason: error.to_string() })
            }
        }
    }
}

fn fresh<T: Clone>(cache: &Mutex<HashMap<String, Cached<T>>>, key: &str, ttl: Duration) -> Option<T> {
    let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    cache.get(key).filter(|c| c.fetched.elapsed() < ttl).map(|c| c.value.clone())
}

fn stale<T: Clone>(cache: &Mutex<HashMap<String, Cached<T>>>, key: &str) -> Option<T> {
    cache.lock().unwrap_or_else(|e| e.into_inner()).get(key).map(|c| c.value.clone())
}

fn store<T>(cache: &Mutex<HashMap<String, Cached<T>>>, key: &str, value: T) {
    cache.lock().unwrap_or_else(|e| e.into_inner()).insert(key.to_owned(), Cached { fetched: Instant::now(), value });
}
