//! The registry's in-memory view: every lookup is answered from here, never from the database.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use mesh_protocol::registry::{AgentPick, AgentRecord, AgentSummary, HealthStatus, RegistryStats, Success};
use serde::{Deserialize, Serialize};

use crate::card::AgentInterfaceRecord;
use crate::discovery::SearchSource;
use crate::error::RegistryError;
use crate::health::HealthProbe;
use crate::store::{StoredAgent, StoredState};
use crate::tenancy::TenantView;
use mesh_protocol::registry::SkillProfile;

#[derive(Debug, Clone)]
struct Entry {
    agent: StoredAgent,
    health: HealthStatus,
    last_health_check: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Counts local registrations and removals, so a snapshot read from storage before one of
    /// them is recognised as stale and not applied over it.
    mutations: u64,
    agents: BTreeMap<String, Entry>,
    /// Capability -> names of the agents offering it, sorted, so rotation order is stable.
    capabilities: HashMap<String, Vec<String>>,
}

/// Registered agents, their health, and one round-robin cursor per capability.
#[derive(Debug)]
pub struct Directory {
    inner: RwLock<Inner>,
    /// Cursors outlive index rebuilds so registrations elsewhere do not restart a rotation.
    cursors: RwLock<HashMap<String, Arc<AtomicUsize>>>,
    /// Where this replica's rotations start: replicas behind one load balancer each rotate
    /// fairly, and starting at different agents keeps them from picking in step.
    rotation_start: usize,
    /// Counts changes to the set of agents or to what they are searched by, for the search index
    /// ([`crate::discovery::follow`]) to follow; health changes are not counted.
    changes: tokio::sync::watch::Sender<u64>,
}

/// A health this replica learnt from the database: another replica's check found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthChange {
    pub name: String,
    pub from: HealthStatus,
    pub to: HealthStatus,
}

/// An agent to poll: its name, health URL and what is served there, and the URL it was
/// registered with (to detect a re-registration that raced the poll).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollTarget {
    pub name: String,
    pub url: String,
    pub health_url: String,
    pub probe: HealthProbe,
}

/// A registered agent as `GET /agents` and `GET /agents/{name}` answer: the record every client
/// reads, and what the registry knows for routing to it by path (a gateway's `/agents/{path}/`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RegisteredAgent {
    #[serde(flatten)]
    pub record: AgentRecord,
    /// The agent's name in URL paths: the name itself when it is URL-safe, else a path form of it
    /// (`Echo Agent` is `echo-agent`) or the one it registered with; unique among the agents.
    pub path: String,
    /// What the registry polls at `health_endpoint`: `health` (a health endpoint, 200 is
    /// healthy) or `card` (the agent card, for agents without one: a 200 card that parses is
    /// healthy).
    pub health_probe: HealthProbe,
    /// The interfaces the agent's card declares, in its order of preference (A2A 1.0
    /// `supportedInterfaces`, then 0.3 `url` and `additionalInterfaces`); empty when the
    /// registry did not read its card (`verify_registrations` off).
    pub interfaces: Vec<AgentInterfaceRecord>,
    /// The card's description (empty when its card was not read).
    #[serde(default)]
    pub description: String,
    /// The card's skills, as searched (empty when its card was not read).
    #[serde(default)]
    pub skills: Vec<SkillProfile>,
    /// The tenant whose callers alone see the agent; `""`: every tenant's.
    #[serde(default)]
    pub tenant: String,
    /// The registry an agent mirrored from another registry is registered with (its base URL);
    /// absent for the agents registered here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

/// `GET /agents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RegisteredAgents {
    pub status: Success,
    pub total: usize,
    pub agents: Vec<RegisteredAgent>,
}

impl Directory {
    pub fn new(agents: Vec<StoredState>) -> Self {
        // Truncation is fine: any bits of a random number are a random start.
        #[allow(clippy::cast_possible_truncation)]
        let rotation_start = uuid::Uuid::new_v4().as_u128() as usize;
        let directory = Self {
            inner: RwLock::default(),
            cursors: RwLock::default(),
            rotation_start,
            changes: tokio::sync::watch::Sender::new(0),
        };
        directory.replace_all(agents, 0);
        directory
    }

    /// How many agents are registered.
    pub fn count(&self) -> usize {
        self.read().agents.len()
    }

    /// A token to pass to [`Self::replace_all`] with a snapshot of storage read after this call.
    pub fn mutations(&self) -> u64 {
        self.read().mutations
    }

    /// Adds or updates an agent; returns true when it was new. A changed URL resets its health.
    pub fn upsert(&self, agent: StoredAgent) -> bool {
        let mut inner = self.write();
        // The periodic refresh of an unchanged registration (every agent, every 30 s) only moves
        // its time: no index rebuild, and no change a concurrent sync's snapshot could undo.
        if let Some(entry) = inner.agents.get_mut(&agent.name)
            && entry.agent.same_instance(&agent)
        {
            entry.agent.updated_at = agent.updated_at;
            return false;
        }
        let previous = inner.agents.get(&agent.name);
        let (health, last_health_check) = match previous {
            Some(entry) if entry.agent.url == agent.url => (entry.health, entry.last_health_check.clone()),
            _ => (HealthStatus::Unknown, None),
        };
        let is_new = previous.is_none();
        inner.agents.insert(agent.name.clone(), Entry { agent, health, last_health_check });
        inner.mutations += 1;
        rebuild_index(&mut inner);
        drop(inner);
        self.touch();
        is_new
    }

    /// Removes `name`, or only while it is registered at `url` when one is given; returns
    /// whether it was removed. Counts as a change either way, since storage may have just lost
    /// the row and a refresh read before that must not bring it back.
    pub fn remove(&self, name: &str, url: Option<&str>) -> bool {
        let mut inner = self.write();
        inner.mutations += 1;
        let matches = inner.agents.get(name).is_some_and(|e| url.is_none_or(|url| e.agent.url == url));
        if matches {
            inner.agents.remove(name);
            rebuild_index(&mut inner);
            drop(inner);
            self.touch();
        }
        matches
    }

    /// Replaces the set of agents with `agents` (as stored), which keeps replicas sharing one
    /// database in step. Of two healths known for one instance the newer check wins: this
    /// replica's own may be newer than the snapshot. The snapshot is dropped (and `None`
    /// returned) when a registration or removal happened here since `mutations` was read, as it
    /// may predate it; the next sync brings a fresh one. Otherwise returns the healths the
    /// snapshot changed.
    pub fn replace_all(&self, agents: Vec<StoredState>, mutations: u64) -> Option<Vec<HealthChange>> {
        let mut inner = self.write();
        if inner.mutations != mutations {
            return None;
        }
        let mut changes = Vec::new();
        let mut next = BTreeMap::new();
        for stored in agents {
            let mut entry =
                Entry { agent: stored.agent, health: stored.health, last_health_check: stored.last_health_check };
            match inner.agents.get(&entry.agent.name) {
                Some(known) if known.agent.url == entry.agent.url => {
                    if known.last_health_check > entry.last_health_check {
                        entry.health = known.health;
                        entry.last_health_check = known.last_health_check.clone();
                    } else if known.health != entry.health {
                        changes.push(HealthChange {
                            name: entry.agent.name.clone(),
                            from: known.health,
                            to: entry.health,
                        });
                    }
                }
                _ => {}
            }
            next.insert(entry.agent.name.clone(), entry);
        }
        inner.agents = next;
        rebuild_index(&mut inner);
        drop(inner);
        self.touch();
        Some(changes)
    }

    /// Records a poll result, unless the agent was removed or re-registered elsewhere meanwhile;
    /// returns the health it had when this result changes it.
    pub fn set_health(&self, target: &PollTarget, health: HealthStatus, checked_at: String) -> Option<HealthStatus> {
        let mut inner = self.write();
        let entry = inner.agents.get_mut(&target.name).filter(|e| e.agent.url == target.url)?;
        let previous = entry.health;
        entry.health = health;
        entry.last_health_check = Some(checked_at);
        (previous != health).then(|| {
            tracing::info!(agent = %target.name, from = ?previous, to = ?health, "health changed");
            previous
        })
    }

    /// Follows changes to the agents or to what they are searched by.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Wakes the followers of [`Self::changes`] as if the agents had changed.
    pub fn touch(&self) {
        self.changes.send_modify(|count| *count += 1);
    }

    /// What the search index keeps of every agent.
    pub fn search_sources(&self) -> Vec<SearchSource> {
        self.read()
            .agents
            .values()
            .map(|entry| SearchSource {
                name: entry.agent.name.clone(),
                profile: entry.agent.profile.clone(),
                capabilities: entry.agent.capabilities.clone(),
                tenant: entry.agent.tenant.clone(),
            })
            .collect()
    }

    /// The health of `name`, when it is registered.
    pub fn health(&self, name: &str) -> Option<HealthStatus> {
        self.read().agents.get(name).map(|entry| entry.health)
    }

    pub fn poll_target(&self, name: &str) -> Option<PollTarget> {
        self.read().agents.get(name).map(poll_target)
    }

    pub fn list(&self) -> Vec<AgentRecord> {
        self.read().agents.values().map(record).collect()
    }

    /// Every agent `view` sees with its path and interfaces, in name order.
    pub fn list_registered(&self, view: &TenantView) -> Vec<RegisteredAgent> {
        self.read().agents.values().filter(|entry| sees(view, entry)).map(registered).collect()
    }

    /// One agent, when `view` sees it.
    pub fn registered(&self, name: &str, view: &TenantView) -> Result<RegisteredAgent, RegistryError> {
        self.read()
            .agents
            .get(name)
            .filter(|entry| sees(view, entry))
            .map(registered)
            .ok_or_else(|| RegistryError::AgentNotFound(name.to_owned()))
    }

    /// The agent other than `name` whose path is `path`, if any.
    pub fn path_holder(&self, path: &str, name: &str) -> Option<String> {
        let inner = self.read();
        inner.agents.values().find(|e| e.agent.path == path && e.agent.name != name).map(|e| e.agent.name.clone())
    }

    /// Every registered name and every path, read under one lock: what a mirrored agent must not
    /// take ([`crate::mirror::Mirrors::listed`]).
    pub fn names_and_paths(&self) -> (std::collections::HashSet<String>, std::collections::HashSet<String>) {
        let inner = self.read();
        inner.agents.values().map(|e| (e.agent.name.clone(), e.agent.path.clone())).unzip()
    }

    /// How many agents `owner` registered.
    pub fn count_owned_by(&self, owner: &str) -> usize {
        self.read().agents.values().filter(|entry| entry.agent.owner.as_deref() == Some(owner)).count()
    }

    /// Who owns `name` (`Some(None)`: registered with authentication off); `None` when it is
    /// not registered.
    pub fn owner(&self, name: &str) -> Option<Option<String>> {
        self.read().agents.get(name).map(|entry| entry.agent.owner.clone())
    }

    pub fn get(&self, name: &str) -> Result<AgentRecord, RegistryError> {
        self.read().agents.get(name).map(record).ok_or_else(|| RegistryError::AgentNotFound(name.to_owned()))
    }

    /// Every agent offering `capability`, in name order.
    pub fn discover(&self, capability: &str) -> Result<Vec<AgentSummary>, RegistryError> {
        let inner = self.read();
        let names = inner
            .capabilities
            .get(capability)
            .ok_or_else(|| RegistryError::CapabilityNotFound(capability.to_owned()))?;
        Ok(names.iter().filter_map(|n| inner.agents.get(n)).map(summary).collect())
    }

    /// Round-robin among the healthy agents offering `capability`; only when none is healthy,
    /// round-robin among all of them, and the answer says it is a fallback.
    pub fn pick(&self, capability: &str) -> Result<AgentPick, RegistryError> {
        let inner = self.read();
        let names = inner
            .capabilities
            .get(capability)
            .ok_or_else(|| RegistryError::CapabilityNotFound(capability.to_owned()))?;
        let candidates: Vec<&Entry> = names.iter().filter_map(|n| inner.agents.get(n)).collect();
        let healthy: Vec<&Entry> = candidates.iter().copied().filter(|e| e.health == HealthStatus::Healthy).collect();
        let turn = self.cursor(capability).fetch_add(1, Ordering::Relaxed);
        let fallback = healthy.is_empty();
        let pool = if fallback { &candidates } else { &healthy };
        // The index holds only capabilities with agents, so `pool` is never empty; stay total anyway.
        let entry = *turn
            .checked_rem(pool.len())
            .and_then(|i| pool.get(i))
            .ok_or_else(|| RegistryError::CapabilityNotFound(capability.to_owned()))?;
        let warning = fallback.then(|| {
            format!(
                "no healthy agent offers {capability:?}; picked {:?} (health {}) from all {} registered",
                entry.agent.name,
                health_word(entry.health),
                candidates.len()
            )
        });
        Ok(AgentPick {
            status: Success::Success,
            capability: capability.to_owned(),
            agent: summary(entry),
            fallback,
            warning,
        })
    }

    pub fn stats(&self) -> RegistryStats {
        let inner = self.read();
        let mut stats = RegistryStats { total_agents: inner.agents.len(), ..RegistryStats::default() };
        for entry in inner.agents.values() {
            match entry.health {
                HealthStatus::Healthy => stats.healthy_agents += 1,
                HealthStatus::Unhealthy => stats.unhealthy_agents += 1,
                HealthStatus::Unreachable => stats.unreachable_agents += 1,
                HealthStatus::Unknown => stats.unknown_agents += 1,
            }
        }
        stats
    }

    fn cursor(&self, capability: &str) -> Arc<AtomicUsize> {
        if let Some(cursor) = self.cursors.read().unwrap_or_else(|e| e.into_inner()).get(capability) {
            return cursor.clone();
        }
        self.cursors
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(capability.to_owned())
            .or_insert_with(|| Arc::new(AtomicUsize::new(self.rotation_start)))
            .clone()
    }

    // A panic while holding the lock cannot leave the maps half-updated (every update is a
    // single insert/remove followed by a rebuild), so a poisoned lock is still safe to use.
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

fn rebuild_index(inner: &mut Inner) {
    let mut capabilities: HashMap<String, Vec<String>> = HashMap::new();
    // BTreeMap iteration is in name order, so each list comes out sorted.
    for entry in inner.agents.values() {
        for capability in &entry.agent.capabilities {
            capabilities.entry(capability.clone()).or_default().push(entry.agent.name.clone());
        }
    }
    inner.capabilities = capabilities;
}

fn poll_target(entry: &Entry) -> PollTarget {
    PollTarget {
        name: entry.agent.name.clone(),
        url: entry.agent.url.clone(),
        health_url: entry.agent.health_endpoint.clone(),
        probe: entry.agent.health_probe,
    }
}

fn summary(entry: &Entry) -> AgentSummary {
    AgentSummary {
        name: entry.agent.name.clone(),
        url: entry.agent.url.clone(),
        health_status: entry.health,
        process_endpoint: entry.agent.process_endpoint.clone(),
        agent_card_url: entry.agent.agent_card_url.clone(),
    }
}

fn record(entry: &Entry) -> AgentRecord {
    let agent = &entry.agent;
    AgentRecord {
        name: agent.name.clone(),
        url: agent.url.clone(),
        capabilities: agent.capabilities.clone(),
        health_endpoint: agent.health_endpoint.clone(),
        process_endpoint: agent.process_endpoint.clone(),
        agent_card_url: agent.agent_card_url.clone(),
        health_status: entry.health,
        last_health_check: entry.last_health_check.clone(),
        registered_at: agent.registered_at.clone(),
        updated_at: agent.updated_at.clone(),
    }
}

fn registered(entry: &Entry) -> RegisteredAgent {
    RegisteredAgent {
        record: record(entry),
        path: entry.agent.path.clone(),
        health_probe: entry.agent.health_probe,
        interfaces: entry.agent.interfaces.clone(),
        description: entry.agent.profile.description.clone(),
        skills: entry.agent.profile.skills.clone(),
        tenant: entry.agent.tenant.clone(),
        origin: None,
    }
}

/// Whether a reader with `view` sees the agent: one registered for no tenant, everyone.
fn sees(view: &TenantView, entry: &Entry) -> bool {
    entry.agent.tenant.is_empty() || view.sees(&entry.agent.tenant)
}

pub(crate) fn health_word(health: HealthStatus) -> &'static str {
    match health {
        HealthStatus::Unknown => "unknown",
        HealthStatus::Healthy => "healthy",
        HealthStatus::Unhealthy => "unhealthy",
        HealthStatus::Unreachable => "unreachable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(name: &str, capabilities: &[&str]) -> StoredState {
        StoredState {
            agent: StoredAgent::for_test(name, capabilities),
            health: HealthStatus::Unknown,
            last_health_check: None,
        }
    }

    fn set(directory: &Directory, name: &str, health: HealthStatus) {
        let target = directory.poll_target(name).unwrap();
        directory.set_health(&target, health, "2026-01-01T00:00:01Z".into());
    }

    fn picks(directory: &Directory, capability: &str, n: usize) -> Vec<String> {
        (0..n).map(|_| directory.pick(capability).unwrap().agent.name).collect()
    }

    #[test]
    fn rotates_through_every_healthy_agent_in_turn() {
        let directory = Directory::new(vec![agent("c", &["search"]), agent("a", &["search"]), agent("b", &["search"])]);
        for name in ["a", "b", "c"] {
            set(&directory, name, HealthStatus::Healthy);
        }
        let picks = picks(&directory, "search", 9);
        for window in picks.chunks(3) {
            let mut turn = window.to_vec();
            turn.sort();
            assert_eq!(turn, ["a", "b", "c"], "each agent once per turn: {picks:?}");
        }
        assert_eq!(picks[..3], picks[3..6], "the same order every turn: {picks:?}");
    }

    #[test]
    fn replicas_start_their_rotations_apart_and_share_the_picks_evenly() {
        let agents = || vec![agent("a", &["search"]), agent("b", &["search"]), agent("c", &["search"])];
        let replicas: Vec<Directory> = (0..3).map(|_| Directory::new(agents())).collect();
        let mut counts = BTreeMap::<String, usize>::new();
        for replica in &replicas {
            for name in ["a", "b", "c"] {
                set(replica, name, HealthStatus::Healthy);
            }
            // 10 picks each: with 3 agents, no agent gets more than one extra per replica.
            for name in picks(replica, "search", 10) {
                *counts.entry(name).or_default() += 1;
            }
        }
        assert_eq!(counts.values().sum::<usize>(), 30);
        assert!(counts.values().all(|&n| (9..=12).contains(&n)), "{counts:?}");
        let starts: std::collections::BTreeSet<usize> = replicas.iter().map(|r| r.rotation_start).collect();
        assert_eq!(starts.len(), 3, "each replica starts its rotation at a random place");
    }

    #[test]
    fn skips_unhealthy_agents_and_takes_them_back_when_they_recover() {
        let directory = Directory::new(vec![agent("a", &["search"]), agent("b", &["search"]), agent("c", &["search"])]);
        set(&directory, "a", HealthStatus::Healthy);
        set(&directory, "b", HealthStatus::Unreachable);
        set(&directory, "c", HealthStatus::Healthy);
        let first = picks(&directory, "search", 4);
        assert!(first.iter().all(|n| n != "b"), "{first:?}");
        assert!(first.iter().any(|n| n == "a") && first.iter().any(|n| n == "c"));
        assert!(!directory.pick("search").unwrap().fallback);
        set(&directory, "b", HealthStatus::Healthy);
        let mut later = picks(&directory, "search", 3);
        later.sort();
        assert_eq!(later, ["a", "b", "c"]);
    }

    #[test]
    fn falls_back_to_any_agent_only_when_none_is_healthy_and_says_so() {
        let directory = Directory::new(vec![agent("a", &["search"]), agent("b", &["search"])]);
        set(&directory, "a", HealthStatus::Unhealthy);
        let pick = directory.pick("search").unwrap();
        assert!(pick.fallback);
        assert!(pick.warning.as_deref().unwrap().contains("no healthy agent"), "{pick:?}");
        assert_eq!(picks(&directory, "search", 2).len(), 2);
        let mut seen = picks(&directory, "search", 2);
        seen.sort();
        assert_eq!(seen, ["a", "b"], "the fallback rotates too");
    }

    fn checked(name: &str, url: &str, health: HealthStatus, at: Option<&str>) -> StoredState {
        let mut stored = agent(name, &["search"]);
        stored.agent.url = url.into();
        StoredState { health, last_health_check: at.map(str::to_owned), ..stored }
    }

    #[test]
    fn a_snapshot_keeps_a_newer_health_known_here_only_for_the_same_instance() {
        let url = "http://127.0.0.1/a";
        let t1 = "2026-01-01T00:00:01Z";
        let t2 = "2026-01-01T00:00:02Z";
        // This replica checked the instance after the snapshot's check: its health stands.
        let directory = Directory::new(vec![checked("a", url, HealthStatus::Healthy, Some(t2))]);
        let changes = directory.replace_all(vec![checked("a", url, HealthStatus::Unhealthy, Some(t1))], 0);
        assert_eq!(changes, Some(vec![]));
        assert_eq!(directory.get("a").unwrap().health_status, HealthStatus::Healthy);
        // A check as old as the snapshot's: the snapshot's health wins, and the change is told.
        let changes = directory.replace_all(vec![checked("a", url, HealthStatus::Unhealthy, Some(t2))], 0);
        let told = HealthChange { name: "a".into(), from: HealthStatus::Healthy, to: HealthStatus::Unhealthy };
        assert_eq!(changes, Some(vec![told]));
        assert_eq!(directory.get("a").unwrap().health_status, HealthStatus::Unhealthy);
        // Another instance under the name: what this replica knew of the old one does not apply.
        let changes =
            directory.replace_all(vec![checked("a", "http://127.0.0.1/moved", HealthStatus::Unknown, None)], 0);
        assert_eq!(changes, Some(vec![]));
        let record = directory.get("a").unwrap();
        assert_eq!((record.health_status, record.last_health_check), (HealthStatus::Unknown, None));
    }

    #[test]
    fn a_snapshot_read_before_a_change_here_is_dropped() {
        let directory = Directory::new(vec![agent("a", &["search"]), agent("b", &["search"])]);
        let before = directory.mutations();
        assert!(directory.remove("a", None));
        assert_ne!(directory.mutations(), before);
        assert_eq!(directory.replace_all(vec![agent("a", &["search"]), agent("b", &["search"])], before), None);
        assert!(directory.get("a").is_err(), "the removal stands");
        let removal = directory.mutations();
        assert!(!directory.remove("gone", None), "nothing to remove");
        assert_ne!(directory.mutations(), removal, "a removal counts as a change either way");
    }

    #[test]
    fn a_poll_result_tells_the_health_it_replaced_only_when_it_changes_it() {
        let directory = Directory::new(vec![agent("a", &["search"])]);
        let target = directory.poll_target("a").unwrap();
        let at = || "2026-01-01T00:00:01Z".to_owned();
        assert_eq!(directory.set_health(&target, HealthStatus::Healthy, at()), Some(HealthStatus::Unknown));
        assert_eq!(directory.set_health(&target, HealthStatus::Healthy, at()), None);
        assert_eq!(directory.set_health(&target, HealthStatus::Unreachable, at()), Some(HealthStatus::Healthy));
        let elsewhere = PollTarget { url: "http://127.0.0.1/moved".into(), ..target };
        assert_eq!(directory.set_health(&elsewhere, HealthStatus::Healthy, at()), None, "another instance's result");
        assert_eq!(directory.get("a").unwrap().health_status, HealthStatus::Unreachable);
    }

    #[test]
    fn owners_are_told_and_counted() {
        let owned = |name: &str, owner: Option<&str>| {
            let mut stored = agent(name, &["search"]);
            stored.agent.owner = owner.map(str::to_owned);
            stored
        };
        let directory = Directory::new(vec![
            owned("a", Some("alice")),
            owned("b", Some("alice")),
            owned("c", Some("bob")),
            owned("d", None),
        ]);
        assert_eq!(directory.owner("a"), Some(Some("alice".into())));
        assert_eq!(directory.owner("d"), Some(None), "registered with authentication off");
        assert_eq!(directory.owner("nobody"), None);
        assert_eq!(["alice", "bob", "carol"].map(|owner| directory.count_owned_by(owner)), [2, 1, 0]);
    }

    #[test]
    fn unknown_capability_and_agent_are_errors() {
        let directory = Directory::new(vec![agent("a", &["search"])]);
        assert!(matches!(directory.discover("nope"), Err(RegistryError::CapabilityNotFound(_))));
        assert!(matches!(directory.pick("nope"), Err(RegistryError::CapabilityNotFound(_))));
        assert!(matches!(directory.get("nope"), Err(RegistryError::AgentNotFound(_))));
        assert!(!directory.remove("a", Some("http://127.0.0.1/elsewhere")), "another instance's URL removes nothing");
        assert!(directory.remove("a", Some("http://127.0.0.1/a")));
        assert!(matches!(directory.discover("search"), Err(RegistryError::CapabilityNotFound(_))));
    }

    #[test]
    fn re_registration_keeps_health_unless_the_url_changes() {
        let directory = Directory::new(vec![agent("a", &["search"])]);
        set(&directory, "a", HealthStatus::Healthy);
        assert!(!directory.upsert(StoredAgent::for_test("a", &["search", "rank"])));
        assert_eq!(directory.get("a").unwrap().health_status, HealthStatus::Healthy);
        assert_eq!(directory.discover("rank").unwrap().len(), 1);
        let mut moved = StoredAgent::for_test("a", &["search"]);
        moved.url = "http://127.0.0.1/elsewhere".into();
        directory.upsert(moved);
        assert_eq!(directory.get("a").unwrap().health_status, HealthStatus::Unknown);
        assert!(matches!(directory.discover("rank"), Err(RegistryError::CapabilityNotFound(_))));
    }

    #[test]
    fn a_stale_poll_result_is_ignored() {
        let directory = Directory::new(vec![agent("a", &["search"])]);
        let stale = directory.poll_target("a").unwrap();
        let mut moved = StoredAgent::for_test("a", &["search"]);
        moved.url = "http://127.0.0.1/elsewhere".into();
        directory.upsert(moved);
        directory.set_health(&stale, HealthStatus::Healthy, "t".into());
        assert_eq!(directory.get("a").unwrap().health_status, HealthStatus::Unknown);
    }

    #[test]
    fn a_storage_snapshot_older_than_a_local_change_is_not_applied() {
        let directory = Directory::new(vec![]);
        let before = directory.mutations();
        // A registration lands after the snapshot was read (the snapshot does not contain it).
        directory.upsert(StoredAgent::for_test("fresh", &["search"]));
        assert!(directory.replace_all(vec![], before).is_none());
        assert!(directory.get("fresh").is_ok(), "the registration survives");
        // A snapshot read after it is applied.
        assert!(directory.replace_all(vec![agent("other", &["search"])], directory.mutations()).is_some());
        assert!(directory.get("fresh").is_err() && directory.get("other").is_ok());
    }

    #[test]
    fn the_newer_check_wins_between_this_replica_and_a_snapshot() {
        let directory = Directory::new(vec![agent("a", &["search"]), agent("b", &["search"])]);
        set(&directory, "a", HealthStatus::Healthy); // checked here at 00:00:01
        let checked = |name: &str, health, at: &str| StoredState {
            health,
            last_health_check: Some(at.into()),
            ..agent(name, &["search"])
        };
        // The snapshot's check of a is older than ours; its check of b is news from another replica.
        let snapshot = vec![
            checked("a", HealthStatus::Unreachable, "2026-01-01T00:00:00Z"),
            checked("b", HealthStatus::Unhealthy, "2026-01-01T00:00:02Z"),
        ];
        let changes = directory.replace_all(snapshot, directory.mutations()).unwrap();
        assert_eq!(directory.get("a").unwrap().health_status, HealthStatus::Healthy, "our newer check stays");
        assert_eq!(directory.get("b").unwrap().health_status, HealthStatus::Unhealthy);
        assert_eq!(
            changes,
            [HealthChange { name: "b".into(), from: HealthStatus::Unknown, to: HealthStatus::Unhealthy }],
            "only the news is announced"
        );
        let newer = vec![
            checked("a", HealthStatus::Unreachable, "2026-01-01T00:00:03Z"),
            checked("b", HealthStatus::Unhealthy, "2026-01-01T00:00:02Z"),
        ];
        let changes = directory.replace_all(newer, directory.mutations()).unwrap();
        assert_eq!(
            directory.get("a").unwrap().health_status,
            HealthStatus::Unreachable,
            "a newer check elsewhere wins"
        );
        assert_eq!(changes.len(), 1, "{changes:?}");
    }

    #[test]
    fn stats_count_each_state() {
        let directory =
            Directory::new(vec![agent("a", &["x"]), agent("b", &["x"]), agent("c", &["x"]), agent("d", &["x"])]);
        set(&directory, "a", HealthStatus::Healthy);
        set(&directory, "b", HealthStatus::Unhealthy);
        set(&directory, "c", HealthStatus::Unreachable);
        assert_eq!(
            directory.stats(),
            RegistryStats {
                total_agents: 4,
                healthy_agents: 1,
                unhealthy_agents: 1,
                unreachable_agents: 1,
                unknown_agents: 1
            }
        );
    }
}
