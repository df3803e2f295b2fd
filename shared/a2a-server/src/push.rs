//! Push notification delivery: POSTs each notification of the task store's outbox (see
//! [`mesh_tasks::PendingPush`]) to its client's webhook, as the A2A spec's push notification
//! payload (a `StreamResponse`), until the webhook answers 2xx or delivery gives up.
//!
//! - Every event of a task with webhooks (the task when first shown, each status and artifact
//!   update) is queued in the store's outbox once the task state it reports is stored, so no
//!   notification tells of a state the store does not hold; once queued, delivery is at least
//!   once. Each carries `X-A2A-Notification-Sequence` (1, 2, ... per webhook config) and
//!   `X-A2A-Notification-Task-Id`, so the client drops what it saw already.
//! - The client's `token` travels in `X-A2A-Notification-Token` (as the official SDK sends it),
//!   its `authentication` as `Authorization: <scheme> <credentials>`.
//! - A failed attempt (no 2xx answer within the timeout) is tried again after an exponential
//!   backoff with jitter, until `attempts_max` attempts, then given up.
//! - Deliveries run on their own tasks, at most `deliveries_max` at once and at most
//!   `deliveries_per_tenant_max` of one tenant, claimed round robin across tenants: a task's turn
//!   only queues its notifications, so a webhook that hangs delays no task and holds no turn,
//!   and one tenant's webhooks cannot hold every delivery.
//! - Each destination (a tenant's webhook origin) has a circuit breaker: after
//!   `circuit.consecutive_failures` failed attempts in a row it opens, and for `circuit.open`
//!   attempts to it fail at once without a request (each counting as an attempt), then one probe
//!   is let through. Keyed by tenant too, so that no tenant opens another's circuit.
//! - A notification given up (or refused when queued, see [`mesh_tasks::PushLimits`]) is
//!   recorded on its config: `GetTask` shows it in the task's metadata under
//!   [`PUSH_UNDELIVERED_METADATA_KEY`], and `mesh_push_notifications_refused_total` counts it by
//!   tenant and reason.
//! - Webhooks are reached through a client under the public-only outbound address policy
//!   ([`mesh_client::AddressPolicy::public_only`]: no private, loopback, shared, link-local or
//!   metadata address unless its network is opted in, checked on every address a name resolves
//!   to, no redirect), and their URLs are checked when a config is created, so a refused one is
//!   refused then with a clear error. A name that does not resolve then is kept: each delivery
//!   resolves it again under the policy.

use std::sync::Arc;
use std::time::Duration;

use backon::BackoffBuilder;
use bytes::Bytes;
use http::{HeaderValue, Request, header};
use mesh_client::{CircuitSettings, Circuits, ClientError, HttpClient, Passage, TransportError};
use mesh_protocol::a2a::v1::{JsonObject, Task, TaskPushNotificationConfig};
use mesh_tasks::{PendingPush, PushOutcome, TaskError, TaskStore, Undelivered};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

/// Longest wait for a webhook's answer by default (the spec recommends 10 to 30 s).
pub const PUSH_DELIVERY_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Attempts at one notification by default, the first included, before delivery gives up.
pub const PUSH_DELIVERY_ATTEMPTS_MAX_DEFAULT: u32 = 8;
/// Wait before the first retry by default; each next one doubles, up to the maximum, plus jitter.
pub const PUSH_RETRY_DELAY_MIN_MS_DEFAULT: u64 = 1_000;
pub const PUSH_RETRY_DELAY_MAX_MS_DEFAULT: u64 = 60_000;
/// Deliveries in flight at once by default.
pub const PUSH_DELIVERIES_MAX_DEFAULT: usize = 16;
/// Deliveries of one tenant in flight at once by default: a quarter of the default total, so
/// that a tenant whose webhooks hang leaves the others most of them.
pub const PUSH_DELIVERIES_PER_TENANT_MAX_DEFAULT: usize = 4;
/// Failed attempts in a row at one destination that open its circuit, by default.
pub const PUSH_CIRCUIT_FAILURES_DEFAULT: usize = 3;
/// How long an open circuit refuses attempts before it lets a probe through, by default.
pub const PUSH_CIRCUIT_OPEN_MS_DEFAULT: u64 = 30_000;
/// The key of a task's metadata listing its webhook configs whose notifications did not all
/// reach them ([`mesh_tasks::UndeliveredPush`] each), present only when there are some.
pub const PUSH_UNDELIVERED_METADATA_KEY: &str = "meshPushUndelivered";
/// Time between two reads of the outbox when nothing new was queued: retries come due, and
/// notifications left by a stopped process (or a replica) are picked up, within this.
const PUSH_OUTBOX_POLL_MS: u64 = 500;
/// A claimed notification stays the claimer's for its delivery timeout plus this margin; a
/// process killed mid-delivery leaves a claim that expires so, and another delivers it.
const PUSH_CLAIM_MARGIN_MS: u64 = 5_000;

/// Header carrying the client's token for its webhook (the official SDKs' name).
pub const NOTIFICATION_TOKEN_HEADER: &str = "X-A2A-Notification-Token";
/// Header carrying the notification's sequence number within its webhook config, from 1.
pub const NOTIFICATION_SEQUENCE_HEADER: &str = "X-A2A-Notification-Sequence";
/// Header carrying the id of the task the notification is about.
pub const NOTIFICATION_TASK_ID_HEADER: &str = "X-A2A-Notification-Task-Id";
/// The payload's media type, as the spec's example sends it.
const NOTIFICATION_CONTENT_TYPE: &str = "application/a2a+json";

/// How notifications are delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushSettings {
    pub delivery_timeout: Duration,
    pub attempts_max: u32,
    pub retry_delay_min: Duration,
    pub retry_delay_max: Duration,
    pub deliveries_max: usize,
    pub deliveries_per_tenant_max: usize,
    /// Each destination's circuit breaker.
    pub circuit: CircuitSettings,
}

impl Default for PushSettings {
    fn default() -> Self {
        Self {
            delivery_timeout: Duration::from_millis(PUSH_DELIVERY_TIMEOUT_MS_DEFAULT),
            attempts_max: PUSH_DELIVERY_ATTEMPTS_MAX_DEFAULT,
            retry_delay_min: Duration::from_millis(PUSH_RETRY_DELAY_MIN_MS_DEFAULT),
            retry_delay_max: Duration::from_millis(PUSH_RETRY_DELAY_MAX_MS_DEFAULT),
            deliveries_max: PUSH_DELIVERIES_MAX_DEFAULT,
            deliveries_per_tenant_max: PUSH_DELIVERIES_PER_TENANT_MAX_DEFAULT,
            circuit: CircuitSettings {
                consecutive_failures: PUSH_CIRCUIT_FAILURES_DEFAULT,
                open: Duration::from_millis(PUSH_CIRCUIT_OPEN_MS_DEFAULT),
            },
        }
    }
}

/// The delivery of one agent's push notifications. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PushDelivery {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: TaskStore,
    /// A client of its own under the outbound address policy, carrying no credential of the
    /// mesh: a webhook is a third party's URL.
    http: HttpClient,
    /// One circuit per tenant and webhook origin, over `http`.
    circuits: Circuits,
    settings: PushSettings,
    /// Rung when notifications are queued or a delivery ends, so the next is sent at once.
    wake: Notify,
    permits: Arc<Semaphore>,
}

/// Why an attempt failed.
#[derive(Debug)]
struct Failed {
    reason: String,
    /// What the notification is given up as: at once when `permanent`, otherwise once its
    /// attempts are spent.
    undelivered: Undelivered,
    /// No retry can help (the address is refused, the request cannot be built).
    permanent: bool,
}

impl Failed {
    /// A failure the next attempt may not meet: retried while attempts are left.
    fn transient(reason: String) -> Self {
        Self { reason, undelivered: Undelivered::AttemptsExhausted, permanent: false }
    }

    fn permanent(undelivered: Undelivered, reason: String) -> Self {
        Self { reason, undelivered, permanent: true }
    }
}

impl PushDelivery {
    /// Delivers the notifications queued in `store` through `http`, which must be guarded by the
    /// outbound address policy ([`HttpClient::guarded`]). Nothing is sent until [`Self::start`].
    pub fn new(store: TaskStore, http: HttpClient, settings: PushSettings) -> Self {
        let permits = Arc::new(Semaphore::new(settings.deliveries_max.max(1)));
        let circuits = Circuits::new(http.clone(), settings.circuit);
        Self { inner: Arc::new(Inner { store, http, circuits, settings, wake: Notify::new(), permits }) }
    }

    /// Delivers until the returned job is aborted (deliveries under way finish on their own).
    pub fn start(&self) -> JoinHandle<()> {
        let delivery = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_millis(PUSH_OUTBOX_POLL_MS));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = delivery.inner.wake.notified() => {}
                    _ = ticks.tick() => {}
                }
                delivery.send_due().await;
            }
        })
    }

    /// Says that notifications were queued.
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    pub fn store(&self) -> &TaskStore {
        &self.inner.store
    }

    /// Adds to `task`'s metadata the webhook configs whose notifications did not all reach them
    /// ([`PUSH_UNDELIVERED_METADATA_KEY`]), so its owner reads why with `GetTask`: A2A's push
    /// notification config has no field for it, a task's metadata is free-form. A store that
    /// cannot tell leaves the task as it is (and is logged): the task itself was read.
    pub(crate) async fn report_undelivered(&self, tenant: &str, task: &mut Task) {
        let undelivered = match self.inner.store.undelivered_push(tenant, &task.id).await {
            Ok(undelivered) if undelivered.is_empty() => return,
            Ok(undelivered) => undelivered,
            Err(error) => {
                tracing::warn!(task = %task.id, %error, "could not read the task's undelivered push notifications");
                return;
            }
        };
        // Strings and numbers only: the conversion cannot fail.
        let listed = serde_json::to_value(undelivered).unwrap_or_default();
        task.metadata.get_or_insert_with(JsonObject::new).insert(PUSH_UNDELIVERED_METADATA_KEY.to_owned(), listed);
    }

    /// Checks a webhook config before it is stored: an http(s) URL whose host the outbound
    /// address policy allows (resolved now, when it resolves), and a token and credentials that
    /// fit in a header.
    pub async fn vet(&self, config: &TaskPushNotificationConfig) -> Result<(), TaskError> {
        let invalid = |why: String| TaskError::InvalidParams(format!("push notification url {:?} {why}", config.url));
        let url = url::Url::parse(&config.url).map_err(|e| invalid(format!("is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(invalid("must be an http or https URL with a host".into()));
        }
        match self.inner.http.vet(&config.url).await {
            Ok(()) => {}
            Err(ClientError::Transport { source: TransportError::Refused(why), .. }) => {
                return Err(invalid(format!("is refused by the outbound address policy: {why}")));
            }
            // A name that does not resolve now (a DNS outage, a name not yet published) is kept:
            // every delivery resolves it again under the same policy, and retries while it fails.
            Err(error) => {
                tracing::info!(url = %config.url, %error, "push notification webhook kept without a check of its address")
            }
        }
        let headers = [config.token.clone(), config.authentication.as_ref().map(authorization)];
        if headers.iter().flatten().any(|value| HeaderValue::from_str(value).is_err()) {
            return Err(TaskError::InvalidParams(
                "the push notification token and credentials must be printable ASCII (they travel in headers)".into(),
            ));
        }
        Ok(())
    }

    /// Claims and sends due notifications while permits are free.
    async fn send_due(&self) {
        let claim_for = self.inner.settings.delivery_timeout + Duration::from_millis(PUSH_CLAIM_MARGIN_MS);
        loop {
            let free = self.inner.permits.available_permits();
            if free == 0 {
                // A delivery ending rings the bell.
                return;
            }
            let per_tenant = self.inner.settings.deliveries_per_tenant_max.max(1);
            let claimed = match self.inner.store.claim_push(free, per_tenant, claim_for).await {
                Ok(claimed) if !claimed.is_empty() => claimed,
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!(%error, "could not read the push notification outbox");
                    return;
                }
            };
            for push in claimed {
                // Only this loop takes permits, and it claimed no more than were free.
                let Ok(permit) = self.inner.permits.clone().acquire_owned().await else { return };
                let delivery = self.clone();
                tokio::spawn(async move {
                    delivery.attempt(push).await;
                    drop(permit);
                    delivery.wake();
                });
            }
        }
    }

    /// One attempt at a notification, and its outcome recorded in the outbox.
    async fn attempt(&self, push: PendingPush) {
        let settings = &self.inner.settings;
        let agent = self.inner.store.agent().to_owned();
        let outcome = match self.post(&push).await {
            Ok(()) => {
                count(&agent, "delivered");
                PushOutcome::Done
            }
            Err(failed) => {
                let attempts = push.attempts.saturating_add(1);
                if failed.permanent || attempts >= settings.attempts_max {
                    tracing::warn!(task = %push.task_id, config = push.config_id(), sequence = push.sequence, attempts,
                        reason = %failed.reason, "push notification given up");
                    count(&agent, "given_up");
                    let message = format!("given up after {attempts} attempt(s): {}", failed.reason);
                    PushOutcome::Undelivered { reason: failed.undelivered, message }
                } else {
                    let delay = retry_delay(settings, attempts);
                    tracing::info!(task = %push.task_id, config = push.config_id(), sequence = push.sequence, attempts,
                        reason = %failed.reason, retry_in_ms = delay.as_millis() as u64, "push notification failed; retrying");
                    count(&agent, "retried");
                    PushOutcome::RetryIn(delay)
                }
            }
        };
        if let Err(error) = self.inner.store.settle_push(&push, outcome).await {
            // The claim expires and the notification is sent again: at least once still holds.
            tracing::error!(task = %push.task_id, %error, "could not record a push notification's delivery");
        }
    }

    async fn post(&self, push: &PendingPush) -> Result<(), Failed> {
        let invalid = |reason: String| Failed::permanent(Undelivered::InvalidWebhook, reason);
        let origin =
            url::Url::parse(&push.config.url).map_err(|e| invalid(e.to_string()))?.origin().ascii_serialization();
        let body = serde_json::to_vec(&push.event).map_err(|e| invalid(e.to_string()))?;
        let mut request = Request::post(&push.config.url)
            .header(header::CONTENT_TYPE, NOTIFICATION_CONTENT_TYPE)
            .header(NOTIFICATION_SEQUENCE_HEADER, push.sequence)
            .header(NOTIFICATION_TASK_ID_HEADER, &push.task_id);
        if let Some(token) = &push.config.token {
            request = request.header(NOTIFICATION_TOKEN_HEADER, token);
        }
        if let Some(authentication) = &push.config.authentication {
            request = request.header(header::AUTHORIZATION, authorization(authentication));
        }
        let request = request.body(Bytes::from(body)).map_err(|e| invalid(e.to_string()))?;
        // Tenant names hold no space (see the A2A surface), so the key names one destination.
        let destination = format!("{} {origin}", push.tenant);
        match self.inner.circuits.send(&push.tenant, &destination, request, self.inner.settings.delivery_timeout).await
        {
            Passage::Answered(response) if response.status().is_success() => Ok(()),
            Passage::Answered(response) => {
                Err(Failed::transient(format!("the webhook answered {}", response.status())))
            }
            Passage::Failed(error) if error.is_refused_address() => {
                Err(Failed::permanent(Undelivered::AddressRefused, error.to_string()))
            }
            Passage::Failed(error) => Err(Failed::transient(error.to_string())),
            // Counted as an attempt, so that a destination that stays down ends its notifications
            // within their attempts, as one that answers 503 does, without a request each.
            Passage::Refused => Err(Failed {
                reason: format!("{origin} keeps failing: its circuit is open, and no request was sent"),
                undelivered: Undelivered::CircuitOpen,
                permanent: false,
            }),
        }
    }
}

/// The `Authorization` value of a config's authentication: `<scheme> <credentials>`.
fn authorization(authentication: &mesh_protocol::a2a::v1::AuthenticationInfo) -> String {
    match &authentication.credentials {
        Some(credentials) => format!("{} {credentials}", authentication.scheme),
        None => authentication.scheme.clone(),
    }
}

/// The wait before the retry that follows `attempts` failed attempts: the minimum delay doubled
/// for each failure after the first, capped at the maximum, plus a random jitter (up to as much
/// again) so webhooks failing together are not retried in lockstep.
fn retry_delay(settings: &PushSettings, attempts: u32) -> Duration {
    backon::ExponentialBuilder::default()
        .with_min_delay(settings.retry_delay_min)
        .with_max_delay(settings.retry_delay_max)
        .with_jitter()
        .without_max_times()
        .build()
        .nth(attempts.saturating_sub(1) as usize)
        .unwrap_or(settings.retry_delay_max)
}

fn count(agent: &str, outcome: &'static str) {
    metrics::counter!("mesh_push_notifications_total", mesh_telemetry::SERVICE_LABEL => agent.to_owned(), "outcome" => outcome)
        .increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_longer_each_time_up_to_the_maximum() {
        let settings = PushSettings {
            retry_delay_min: Duration::from_millis(100),
            retry_delay_max: Duration::from_millis(1_000),
            ..PushSettings::default()
        };
        for (attempts, base_ms) in [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1_000), (9, 1_000)] {
            let delay = retry_delay(&settings, attempts).as_millis() as u64;
            // The jitter adds up to the delay again.
            assert!((base_ms..=2 * base_ms).contains(&delay), "after {attempts} failures: {delay} ms, base {base_ms}");
        }
    }
}
