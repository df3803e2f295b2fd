//! Health polling: every agent's health endpoint, concurrently but bounded, on a fixed interval.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use futures::StreamExt;
use mesh_client::{ClientError, HttpClient};
use mesh_protocol::graph::EventBody;
use mesh_protocol::registry::HealthStatus;

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
pub async fn check(http: &HttpClient, health_url: &str, timeout: Duration) -> HealthStatus {
    let request = match http::Request::get(health_url).body(Bytes::new()) {
        Ok(request) => request,
        Err(_) => return HealthStatus::Unreachable,
    };
    match http.send(request, timeout).await {
        Ok(response) if response.status() == http::StatusCode::OK => HealthStatus::Healthy,
        Ok(_) => HealthStatus::Unhealthy,
        Err(ClientError::Transport { .. } | ClientError::InvalidUrl { .. } | ClientError::InvalidCredential) => {
            HealthStatus::Unreachable
        }
        Err(ClientError::Status { .. } | ClientError::Decode { .. }) => HealthStatus::Unhealthy,
    }
}

/// Polls `target` now, records the result, and announces a change.
pub async fn check_and_record(
    directory: &Directory,
    events: &EventHub,
    http: &HttpClient,
    target: PollTarget,
    timeout: Duration,
) {
    let health = check(http, &target.health_url, timeout).await;
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
    loop {
        ticks.tick().await;
        poll_all(&directory, &store, &events, &http, settings).await;
    }
}

pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
