//! The agents behind the gateway: each as the registry records it (name, registered origin,
//! card URL, health, capabilities) with its card, fetched from its registered card URL and kept
//! for a short while. Only URLs on the registered origin are ever used.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lru::LruCache;
use mesh_client::{ClientError, HttpClient, RegistryClient};
use mesh_protocol::a2a::v1::Message;
use mesh_protocol::registry::{AgentRecord, HealthStatus, RouteRequest};
use serde_json::Value;

use crate::a2a::{Binding, Interfaces, same_origin};
use crate::error::GatewayError;

/// Agents whose card the gateway keeps at most (least recently used go first).
const AGENTS_CACHED_MAX: usize = 1_024;

/// One agent behind the gateway: where it is and what its card says.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    /// Its registered base URL: the origin every call to it goes to.
    pub url: String,
    pub card: Value,
    pub interfaces: Interfaces,
}

impl Upstream {
    /// Where `binding` in `version` is served: the card's interface on the registered origin,
    /// else the registered URL itself.
    pub fn endpoint(&self, binding: Binding, version: &str) -> &str {
        self.interfaces.url(binding, version).unwrap_or(&self.url)
    }
}

/// The registry's agents and their cards.
#[derive(Debug)]
pub struct Directory {
    registry: RegistryClient,
    /// Fetches cards, under the outbound address policy, presenting the gateway's credential.
    agents_http: HttpClient,
    fresh_for: Duration,
    call_timeout: Duration,
    cache: Mutex<LruCache<String, (Instant, Arc<Upstream>)>>,
}

impl Directory {
    pub fn new(registry: RegistryClient, agents_http: HttpClient, fresh_for: Duration, call_timeout: Duration) -> Self {
        let capacity = NonZeroUsize::new(AGENTS_CACHED_MAX).unwrap_or(NonZeroUsize::MIN);
        Self { registry, agents_http, fresh_for, call_timeout, cache: Mutex::new(LruCache::new(capacity)) }
    }

    pub fn registry(&self) -> &RegistryClient {
        &self.registry
    }

    /// The agent registered as `name`, with its card.
    pub async fn agent(&self, name: &str) -> Result<Arc<Upstream>, GatewayError> {
        if let Some(upstream) = self.cached(name) {
            return Ok(upstream);
        }
        let record = self.registry.agent(name).await.map_err(|error| match error {
            ClientError::Status { status: 404, .. } => GatewayError::AgentNotFound(name.to_owned()),
            error => GatewayError::Registry(error.to_string()),
        })?;
        self.with_card(record).await
    }

    /// The agent `record` describes, with its card (kept, or fetched now).
    pub async fn of_record(&self, record: AgentRecord) -> Result<Arc<Upstream>, GatewayError> {
        match self.cached(&record.name) {
            Some(upstream) => Ok(upstream),
            None => self.with_card(record).await,
        }
    }

    fn cached(&self, name: &str) -> Option<Arc<Upstream>> {
        self.lock().get(name).filter(|(at, _)| at.elapsed() < self.fresh_for).map(|(_, upstream)| upstream.clone())
    }

    /// `record` with its card, fetched now and kept.
    async fn with_card(&self, record: AgentRecord) -> Result<Arc<Upstream>, GatewayError> {
        let refused = |reason: String| GatewayError::AddressRefused { agent: record.name.clone(), reason };
        if !same_origin(&record.agent_card_url, &record.url) {
            return Err(refused(format!("its card URL {} is not on its origin {}", record.agent_card_url, record.url)));
        }
        let card: Value = match self.agents_http.get_json(&record.agent_card_url, self.call_timeout).await {
            Ok(card) => card,
            Err(error) if error.is_refused_address() => return Err(refused(error.to_string())),
            Err(error) => {
                // The card it had: calls go on to the agent, whose circuit then decides.
                if let Some((_, known)) = self.lock().get(&record.name) {
                    return Ok(known.clone());
                }
                let reason = format!("its card: {error}");
                return Err(GatewayError::Unavailable { agent: record.name.clone(), reason });
            }
        };
        let upstream = Arc::new(Upstream {
            interfaces: Interfaces::of_card(&card, &record.url),
            name: record.name,
            url: record.url,
            card,
        });
        self.lock().put(upstream.name.clone(), (Instant::now(), upstream.clone()));
        Ok(upstream)
    }

    /// Every registered agent, as the registry lists them.
    pub async fn records(&self) -> Result<Vec<AgentRecord>, GatewayError> {
        Ok(self.registry.agents().await.map_err(|e| GatewayError::Registry(e.to_string()))?.agents)
    }

    /// The agents offering `skill`: the registry's round-robin pick (among the healthy ones
    /// when there are any) first, then the other healthy ones, then the rest.
    pub async fn offering(&self, skill: &str) -> Result<Vec<String>, GatewayError> {
        let registry = |e: ClientError| match e {
            ClientError::Status { status: 404, .. } => GatewayError::NoAgentForSkill(skill.to_owned()),
            e => GatewayError::Registry(e.to_string()),
        };
        let pick = self.registry.pick(skill).await.map_err(registry)?;
        let mut others = self.registry.discover(skill).await.map_err(registry)?.agents;
        others.retain(|agent| agent.name != pick.agent.name);
        others.sort_by_key(|agent| agent.health_status != HealthStatus::Healthy);
        Ok(std::iter::once(pick.agent.name).chain(others.into_iter().map(|agent| agent.name)).collect())
    }

    /// The agents to send a JSON-RPC message (`body`) to, by its text, as `tenant` sees them:
    /// the registry's best healthy agent, then the next it ranks for the same skill; and that
    /// skill.
    pub async fn routed(&self, body: &[u8], tenant: &str) -> Result<(Vec<String>, String), GatewayError> {
        let message = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|request| request.pointer("/params/message").cloned())
            .and_then(|message| serde_json::from_value::<Message>(message).ok())
            .ok_or_else(|| GatewayError::Invalid("params.message is not an A2A message".into()))?;
        let request = RouteRequest { message, tenant: Some(tenant.to_owned()) };
        let routed = self.registry.route(&request).await.map_err(|e| match e {
            ClientError::Status { status: 404, .. } => GatewayError::NoAgentForRequest,
            ClientError::Status { status: 400, .. } => {
                GatewayError::Invalid("the message has no text to route by".into())
            }
            e => GatewayError::Registry(e.to_string()),
        })?;
        let skill = routed.skill.id;
        let alternatives = routed.alternatives.into_iter().filter(|choice| choice.skill.id == skill);
        let agents = std::iter::once(routed.agent.name).chain(alternatives.map(|choice| choice.agent.name)).collect();
        Ok((agents, skill))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, (Instant, Arc<Upstream>)>> {
        // Each change is one put: the cache is consistent whatever panicked.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
