//! Health polling: every agent's health endpoint, concurrently but bounded, on a fixed interval.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use futures::StreamExt;
use mesh_client::{ClientError, HttpClient};
use mesh_protocol::graph::EventBody;
use mesh_protocol::registry::HealthStatus;
use tracing::Instrument;

use crate::directory::{Directory, PollTarget};
use crate::events::EventHub;
use crate::store::AgentStore;

#[derive(Debug, Clone, Copy)]
pub struct PollSettings {
    pub interval: Duration,
    pub timeout: Duration,
    pub concurrency_max: usize,
}

/// Polls one agent: 200 is healthy, another status unhealthy, no answer (timeout, refused
/// connection) unreachable.
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

/// Polls `target` now, records the result, and announces a change.
pub async fn check_and_record(
    directory: &Directory,
    events: &EventHub,
    http: &HttpClient,
    target: PollTarget,
    timeout: Duration,
) {
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
    let health = check(http, &target.health_url, timeout).instrument(span.clone()).await;
    span.record("mesh.health", health.as_str());
    metrics::histogram!(
        "mesh_registry_health_check_duration_seconds",
        mesh_telemetry::SERVICE_LABEL => crate::app::REGISTRY_SERVICE,
        "health" => health.as_str(),
    )
    .record(started.elapsed().as_secs_f64());
    if let Some(from) = directory.set_health(&target, health, now_rfc3339()) {
        events.publish(EventBody::HealthChanged { agent_id: target.name, from, to: health });
    }
}

/// One round: refresh the agent set from the store (registrations made through another replica
/// sharing the database), then poll every agent, at most `concurrency_max` at a time.
pub async fn poll_all(
    directory: &Directory,
    store: &AgentStore,
    events: &EventHub,
    http: &HttpClient,
    settings: PollSettings,
) {
    let mutations = directory.mutations();
    match store.load_all().await {
        Ok(agents) => {
            if !directory.replace_all(agents, mutations) {
                tracing::debug!("registrations changed during the refresh; keeping the newer in-memory view");
            }
        }
        Err(error) => tracing::warn!(%error, "cannot refresh registrations from storage; polling the known agents"),
    }
    futures::stream::iter(directory.poll_targets())
        .for_each_concurrent(settings.concurrency_max.max(1), |target| {
            check_and_record(directory, events, http, target, settings.timeout)
        })
        .await;
}

/// Polls forever, starting at once (a restarted registry learns every agent's state quickly).
pub async fn poll_forever(
    directory: Arc<Directory>,
    store: AgentStore,
    events: Arc<EventHub>,
    http: HttpClient,
    settings: PollSettings,
) {
    let mut ticks = tokio::time::interval(settings.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut counted = BTreeSet::new();
    loop {
        ticks.tick().await;
        // Each round is a trace of its own, the registry's, whose children are the checks.
        let round = mesh_telemetry::Root::start(
            crate::app::REGISTRY_SERVICE,
            None,
            || tracing::info_span!(parent: None, "health_round", otel.name = "registry.health_round"),
        );
        round.instrument(poll_all(&directory, &store, &events, &http, settings)).await;
        counted = count_agents(&directory, counted);
    }
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
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
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
    fn the_health_words_are_the_wire_words() {
        for health in [HealthStatus::Unknown, HealthStatus::Healthy, HealthStatus::Unhealthy, HealthStatus::Unreachable]
        {
            assert_eq!(serde_json::to_value(health).unwrap(), serde_json::json!(health.as_str()));
        }
    }
}
