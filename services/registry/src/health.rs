//! Health polling: every agent's health endpoint, concurrently but bounded, once per interval
//! across all the replicas sharing the database, and the sync that keeps each replica's view of
//! the registrations and their health in step with the database.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use chrono::Utc;
use futures::StreamExt;
use mesh_client::{ClientError, HttpClient};
use mesh_protocol::graph::EventBody;
use mesh_protocol::registry::HealthStatus;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::card::CardProblem;
use crate::directory::{Directory, PollTarget};
use crate::events::EventHub;
use crate::store::AgentStore;

#[derive(Debug, Clone, Copy)]
pub struct PollSettings {
    pub interval: Duration,
    pub timeout: Duration,
    pub concurrency_max: usize,
    /// How often this replica reads the registrations' version, and reloads them when it moved.
    pub sync_interval: Duration,
}

/// Longest wait between two looks for agents due for a check: checks start at most this late.
const CLAIM_TICK_MS_MAX: u64 = 1_000;
/// Shortest wait between two looks (tests poll every few milliseconds).
const CLAIM_TICK_MS_MIN: u64 = 10;

impl PollSettings {
    /// How often this replica looks for due checks: a quarter of the interval, within bounds.
    fn claim_tick(&self) -> Duration {
        let quarter = u64::try_from(self.interval.as_millis() / 4).unwrap_or(u64::MAX);
        Duration::from_millis(quarter.clamp(CLAIM_TICK_MS_MIN, CLAIM_TICK_MS_MAX))
    }
}

/// What the poller fetches at an agent's `health_endpoint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HealthProbe {
    /// A health endpoint: `200` is healthy.
    #[default]
    Health,
    /// The agent card, for an agent without a health endpoint (a standard A2A agent registered
    /// by its card): a `200` answer that parses as a card is healthy.
    Card,
}

impl HealthProbe {
    /// The stored and wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Health => "health",
            Self::Card => "card",
        }
    }

    /// The probe a stored word names; a word this version does not know reads as `health`.
    pub fn parse(word: &str) -> Self {
        if word == Self::Card.as_str() { Self::Card } else { Self::Health }
    }
}

/// Polls one agent as its probe says.
pub async fn probe(http: &HttpClient, target: &PollTarget, timeout: Duration) -> HealthStatus {
    match target.probe {
        HealthProbe::Health => check(http, &target.health_url, timeout).await,
        HealthProbe::Card => match crate::card::fetch_card(http, &target.health_url, timeout).await {
            Ok(_) => HealthStatus::Healthy,
            Err(CardProblem::Unreachable(reason) | CardProblem::AddressRefused(reason)) => {
                tracing::debug!(agent = %target.name, %reason, "card poll failed");
                HealthStatus::Unreachable
            }
            Err(problem) => {
                tracing::debug!(agent = %target.name, problem = problem.words(), "the polled card is not a card");
                HealthStatus::Unhealthy
            }
        },
    }
}

/// Polls one agent's health endpoint: 200 is healthy, another status unhealthy, no answer
/// (timeout, refused connection) unreachable.
///
/// Agents of every version answer here: older ones always `200 {"status":"healthy"}`, newer
/// ones `200` when `healthy` or `degraded` (still serving, so still routed to) and `503`
/// `unhealthy`. A `200` whose body says `unhealthy` counts as unhealthy too.
pub async fn check(http: &HttpClient, health_url: &str, timeout: Duration) -> HealthStatus {
    let request = match http::Request::get(health_url).body(Bytes::new()) {
        Ok(request) => request,
        Err(_) => return HealthStatus::Unreachable,
    };
    match http.send(request, timeout).await {
        Ok(response) if response.status() == http::StatusCode::OK => {
            if says_unhealthy(response.body()) {
                HealthStatus::Unhealthy
            } else {
                HealthStatus::Healthy
            }
        }
        Ok(_) => HealthStatus::Unhealthy,
        Err(ClientError::Transport { .. } | ClientError::InvalidUrl { .. } | ClientError::InvalidCredential) => {
            HealthStatus::Unreachable
        }
        Err(ClientError::Status { .. } | ClientError::Decode { .. }) => HealthStatus::Unhealthy,
    }
}

/// True when a health body is JSON whose `status` is `unhealthy`; any other body (an older
/// agent's, plain text) says nothing against the `200`.
fn says_unhealthy(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Status<'a> {
        #[serde(borrow)]
        status: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Status<'_>>(body).ok().and_then(|s| s.status).is_some_and(|s| s == "unhealthy")
}

/// Checks agents' health for this replica: every check, whether due or asked for (a new
/// registration, a reported failure), holds one of `concurrency_max` permits until its result is
/// stored. Due checks are taken in the database first, so replicas sharing it check each agent
/// once per interval; a check asked for runs at once and moves the agent's next one on.
#[derive(Debug)]
pub struct Checker {
    directory: Arc<Directory>,
    store: AgentStore,
    events: Arc<EventHub>,
    http: HttpClient,
    settings: PollSettings,
    permits: Arc<Semaphore>,
}

impl Checker {
    pub fn new(
        directory: Arc<Directory>,
        store: AgentStore,
        events: Arc<EventHub>,
        http: HttpClient,
        settings: PollSettings,
    ) -> Self {
        let permits = Arc::new(Semaphore::new(settings.concurrency_max.max(1)));
        Self { directory, store, events, http, settings, permits }
    }

    /// Checks `target` now, whenever it was due, and answers with the health found as soon as
    /// this replica applied it. Storing it (and moving the next check one interval on) follows
    /// in the background, still under the check's permit: a caller reporting a failure waits
    /// for the agent's answer, not for the database, whose latency would otherwise decide when
    /// a simulated world moves on.
    pub async fn check_now(self: &Arc<Self>, target: PollTarget) -> HealthStatus {
        let Ok(permit) = self.permits.clone().acquire_owned().await else { return HealthStatus::Unknown };
        let (health, checked_at) = self.check_and_apply(&target).await;
        let checker = self.clone();
        tokio::spawn(
            async move {
                match checker.store.claim_now(&target, due_after(checker.settings.interval)).await {
                    Ok(true) => checker.store_health(&target, health, &checked_at).await,
                    Ok(false) => {} // removed or re-registered elsewhere meanwhile
                    Err(error) => {
                        tracing::warn!(%error, agent = %target.name, "cannot store a health check; other replicas learn it later");
                    }
                }
                drop(permit);
            }
            .instrument(tracing::Span::current()),
        );
        health
    }

    /// Polls `target`, applies the result here and announces a change; returns the health
    /// found and when.
    async fn check_and_apply(&self, target: &PollTarget) -> (HealthStatus, String) {
        let span = if mesh_telemetry::recording() {
            tracing::info_span!(
                "health_check",
                otel.name = "registry.health_check",
                mesh.agent = %target.name,
                url.full = %target.health_url,
                mesh.health = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        };
        let started = std::time::Instant::now();
        let health = probe(&self.http, target, self.settings.timeout).instrument(span.clone()).await;
        span.record("mesh.health", health.as_str());
        metrics::histogram!(
            "mesh_registry_health_check_duration_seconds",
            mesh_telemetry::SERVICE_LABEL => crate::app::REGISTRY_SERVICE,
            "health" => health.as_str(),
        )
        .record(started.elapsed().as_secs_f64());
        let checked_at = now_rfc3339();
        if let Some(from) = self.directory.set_health(target, health, checked_at.clone()) {
            self.events.publish(EventBody::HealthChanged { agent_id: target.name.clone(), from, to: health });
        }
        (health, checked_at)
    }

    /// Stores a check's result for the other replicas (this one applied it already; of two
    /// healths, the newer check wins at the next sync).
    async fn store_health(&self, target: &PollTarget, health: HealthStatus, checked_at: &str) {
        if let Err(error) = self.store.record_health(target, health, checked_at).await {
            tracing::warn!(%error, agent = %target.name, "cannot store a health check; other replicas learn it later");
        }
    }

    /// Looks for due checks every claim tick, forever, taking as many as it has free permits (a
    /// replica busy with hanging agents leaves the rest to the others). Starts at once: a
    /// restarted registry checks what is due without waiting.
    pub async fn poll_forever(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(self.settings.claim_tick());
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut running = JoinSet::new();
        loop {
            ticks.tick().await;
            while running.try_join_next().is_some() {}
            // The permits first, then as many checks as there are permits: nothing is taken that
            // this replica cannot start now.
            let mut permits: Vec<_> = std::iter::from_fn(|| self.permits.clone().try_acquire_owned().ok()).collect();
            if permits.is_empty() {
                continue;
            }
            let now = Utc::now().timestamp_millis();
            let due = match self.store.claim_due(now, due_after(self.settings.interval), permits.len()).await {
                Ok(due) => due,
                Err(error) => {
                    tracing::warn!(%error, "cannot take due health checks from storage");
                    continue;
                }
            };
            permits.truncate(due.len());
            if due.is_empty() {
                continue;
            }
            // Each batch of checks taken together is a trace of its own, the registry's.
            let round = mesh_telemetry::Root::start(
                crate::app::REGISTRY_SERVICE,
                None,
                || tracing::info_span!(parent: None, "health_round", otel.name = "registry.health_round", mesh.agents = due.len()),
            );
            let batch = self.clone();
            running.spawn(round.instrument(async move {
                futures::stream::iter(due.into_iter().zip(permits))
                    .for_each_concurrent(None, |(target, permit)| {
                        let batch = &batch;
                        // The permit lives as long as the check, not just the closure.
                        async move {
                            let (health, checked_at) = batch.check_and_apply(&target).await;
                            batch.store_health(&target, health, &checked_at).await;
                            drop(permit);
                        }
                    })
                    .await;
            }));
        }
    }

    /// Keeps this replica's view in step with the database forever: every sync interval, reads
    /// the registrations' version and, when it moved, reloads them (registrations and removals
    /// through other replicas, and the healths their checks found). Also keeps the agent gauges.
    pub async fn sync_forever(self: Arc<Self>, mut applied: i64) {
        let mut ticks = tokio::time::interval(self.settings.sync_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut counted = BTreeSet::new();
        loop {
            ticks.tick().await;
            match self.sync(applied).await {
                Ok(version) => applied = version,
                Err(error) => tracing::warn!(%error, "cannot sync registrations from storage; serving the known ones"),
            }
            counted = count_agents(&self.directory, counted);
        }
    }

    /// One sync: returns the version now applied (`applied` when nothing moved, or when the
    /// snapshot raced a change here and must be read again).
    async fn sync(&self, applied: i64) -> Result<i64, crate::error::RegistryError> {
        let version = self.store.version().await?;
        if version == applied {
            return Ok(applied);
        }
        let mutations = self.directory.mutations();
        let agents = self.store.load_all().await?;
        let Some(changes) = self.directory.replace_all(agents, mutations) else {
            tracing::debug!("registrations changed during the sync; reading them again at the next");
            return Ok(applied);
        };
        for change in changes {
            self.events.publish(EventBody::HealthChanged { agent_id: change.name, from: change.from, to: change.to });
        }
        Ok(version)
    }
}

/// The time, in Unix milliseconds, one interval from now.
fn due_after(interval: Duration) -> i64 {
    Utc::now().timestamp_millis().saturating_add(i64::try_from(interval.as_millis()).unwrap_or(i64::MAX))
}

/// Sets `mesh_registry_agents{capability, health}` from the directory; pairs counted last time
/// but gone now go to 0 rather than keep their old value. Returns the pairs counted.
fn count_agents(directory: &Directory, before: BTreeSet<(String, &'static str)>) -> BTreeSet<(String, &'static str)> {
    let mut counts: BTreeMap<(String, &'static str), u32> = before.into_iter().map(|pair| (pair, 0)).collect();
    for agent in directory.list() {
        for capability in &agent.capabilities {
            *counts.entry((capability.clone(), agent.health_status.as_str())).or_default() += 1;
        }
    }
    for ((capability, health), count) in &counts {
        metrics::gauge!(
            "mesh_registry_agents",
            mesh_telemetry::SERVICE_LABEL => crate::app::REGISTRY_SERVICE,
            "capability" => capability.clone(),
            "health" => *health,
        )
        .set(f64::from(*count));
    }
    counts.into_iter().filter(|(_, count)| *count > 0).map(|(pair, _)| pair).collect()
}

pub fn now_rfc3339() -> String {
    Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_body_saying_unhealthy_counts_against_a_200() {
        assert!(says_unhealthy(br#"{"status":"unhealthy","service":"search"}"#));
        assert!(!says_unhealthy(br#"{"status":"healthy"}"#), "an older agent's answer");
        assert!(!says_unhealthy(br#"{"status":"degraded","reasons":["dense: no model"]}"#), "degraded still serves");
        assert!(!says_unhealthy(b"OK"), "a plain-text answer");
        assert!(!says_unhealthy(b"{}"));
    }

    #[test]
    fn due_checks_are_looked_for_four_times_an_interval_within_bounds() {
        let tick = |interval_ms: u64| {
            let settings = PollSettings {
                interval: Duration::from_millis(interval_ms),
                timeout: Duration::from_secs(1),
                concurrency_max: 1,
                sync_interval: Duration::from_secs(1),
            };
            settings.claim_tick().as_millis()
        };
        assert_eq!(tick(2_000), 500);
        assert_eq!(tick(30_000), u128::from(CLAIM_TICK_MS_MAX));
        assert_eq!(tick(20), u128::from(CLAIM_TICK_MS_MIN));
    }

    #[test]
    fn agents_are_counted_by_capability_and_health_and_a_pair_gone_goes_to_zero() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};

        use crate::store::{StoredAgent, StoredState};

        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let gauges = || -> BTreeMap<(String, String), f64> {
            let readings = snapshotter.snapshot().into_vec().into_iter();
            readings
                .filter_map(|(key, _, _, value)| {
                    let key = key.key();
                    let label = |name: &str| key.labels().find(|l| l.key() == name).map(|l| l.value().to_owned());
                    let service = label("service");
                    match value {
                        DebugValue::Gauge(value) if key.name() == "mesh_registry_agents" => {
                            assert_eq!(service.as_deref(), Some(crate::app::REGISTRY_SERVICE));
                            Some(((label("capability")?, label("health")?), value.into_inner()))
                        }
                        _ => None,
                    }
                })
                .collect()
        };
        let pairs = |pairs: &[(&str, &'static str)]| -> BTreeSet<(String, &'static str)> {
            pairs.iter().map(|(capability, health)| ((*capability).to_owned(), *health)).collect()
        };
        let expected = |counts: &[(&str, &str, f64)]| -> BTreeMap<(String, String), f64> {
            counts.iter().map(|(c, h, n)| (((*c).to_owned(), (*h).to_owned()), *n)).collect()
        };
        metrics::with_local_recorder(&recorder, || {
            let stored = |name: &str, capabilities: &[&str]| StoredState {
                agent: StoredAgent::for_test(name, capabilities),
                health: HealthStatus::Unknown,
                last_health_check: None,
            };
            let directory = Directory::new(vec![stored("a", &["search", "entities"]), stored("b", &["search"])]);
            let counted = count_agents(&directory, BTreeSet::new());
            assert_eq!(counted, pairs(&[("entities", "unknown"), ("search", "unknown")]));
            assert_eq!(gauges(), expected(&[("entities", "unknown", 1.0), ("search", "unknown", 2.0)]));

            let b = directory.poll_target("b").unwrap();
            directory.set_health(&b, HealthStatus::Healthy, "2026-01-01T00:00:01Z".into());
            assert!(directory.remove("a", None));
            let counted = count_agents(&directory, counted);
            assert_eq!(counted, pairs(&[("search", "healthy")]));
            let now = expected(&[("entities", "unknown", 0.0), ("search", "healthy", 1.0), ("search", "unknown", 0.0)]);
            assert_eq!(gauges(), now, "the pairs gone are set to zero");
        });
    }

    #[test]
    fn check_times_are_utc_with_milliseconds() {
        let now = now_rfc3339();
        let parsed = chrono::DateTime::parse_from_rfc3339(&now).unwrap();
        assert!(now.ends_with('Z') && now.len() == "2026-01-01T00:00:00.000Z".len(), "{now}");
        assert!((Utc::now() - parsed.to_utc()).num_seconds().abs() < 60, "{now}");
    }

    #[test]
    fn the_health_words_are_the_wire_words() {
        for health in [HealthStatus::Unknown, HealthStatus::Healthy, HealthStatus::Unhealthy, HealthStatus::Unreachable]
        {
            assert_eq!(serde_json::to_value(health).unwrap(), serde_json::json!(health.as_str()));
        }
    }
}
