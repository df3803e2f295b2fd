//! The registry's live events (`GET /api/events`, Server-Sent Events): registrations, health,
//! links, link messages and the calls agents report.
//!
//! Every event gets the next id and goes into a ring buffer of the latest events, then to every
//! subscriber through a broadcast channel of the same size. A stream resumed with `Last-Event-ID`
//! first replays what the buffer still holds after that id. Events older than the buffer, or
//! skipped because a slow reader fell a whole buffer behind, are announced by one `gap` event,
//! never dropped silently. Publishing never waits for a reader, so a slow dashboard cannot slow
//! registrations or the agents' reports.
//!
//! Ids start at the registry's start time in microseconds, so they keep growing across restarts
//! and a stream resumed after one sees a gap rather than ids it has already seen.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::Stream;
use mesh_protocol::graph::{EventBody, EventStats, MeshEvent};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::health::now_rfc3339;

/// Events kept for resuming streams, and the most a live reader may fall behind.
pub const EVENTS_BUFFERED_DEFAULT: usize = 4_096;
/// Open event streams at most; one more is refused with 503.
pub const EVENT_SUBSCRIBERS_MAX_DEFAULT: usize = 256;
/// Open event streams of one tenant at most; one more is refused with 429, so one tenant cannot
/// take every stream from the others (an eighth of [`EVENT_SUBSCRIBERS_MAX_DEFAULT`]).
pub const EVENT_SUBSCRIBERS_PER_TENANT_MAX_DEFAULT: usize = 32;

#[derive(Debug)]
struct Ring {
    next_id: u64,
    events: VecDeque<Arc<MeshEvent>>,
}

/// The event hub.
#[derive(Debug)]
pub struct EventHub {
    ring: Mutex<Ring>,
    first_id: u64,
    capacity: usize,
    live: broadcast::Sender<Arc<MeshEvent>>,
    subscribers: Arc<Mutex<Subscribers>>,
    limits: SubscriberLimits,
    /// Events live readers skipped because they fell a whole buffer behind.
    missed_by_readers: Arc<AtomicU64>,
    /// Ends every stream, so a stopping server is not held open by its readers.
    closed: CancellationToken,
}

/// How many streams may be open at once: in all, and of one tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriberLimits {
    pub all_max: usize,
    pub per_tenant_max: usize,
}

/// The streams open now, in all and by tenant (a tenant with none has no entry).
#[derive(Debug, Default)]
struct Subscribers {
    all: usize,
    by_tenant: HashMap<String, usize>,
}

/// A subscription slot, given back when its stream is dropped.
#[derive(Debug)]
struct Slot {
    subscribers: Arc<Mutex<Subscribers>>,
    tenant: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut subscribers = lock(&self.subscribers);
        subscribers.all -= 1;
        if let Some(count) = subscribers.by_tenant.get_mut(&self.tenant) {
            *count -= 1;
            if *count == 0 {
                subscribers.by_tenant.remove(&self.tenant);
            }
        }
    }
}

/// Why a stream was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscribeRefused {
    /// The hub already serves its maximum of streams.
    Full(usize),
    /// The subscriber's tenant already holds its maximum of streams.
    TenantFull(usize),
}

/// Updates of the ring and the counts are a push and a pop, or one count; a panic elsewhere
/// cannot leave them half-changed.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl EventHub {
    pub fn new(capacity: usize, limits: SubscriberLimits) -> Self {
        let capacity = capacity.max(1);
        let (live, _) = broadcast::channel(capacity);
        let first_id = u64::try_from(chrono::Utc::now().timestamp_micros()).unwrap_or(1).max(1);
        Self {
            ring: Mutex::new(Ring { next_id: first_id, events: VecDeque::with_capacity(capacity) }),
            first_id,
            capacity,
            live,
            subscribers: Arc::default(),
            limits,
            missed_by_readers: Arc::default(),
            closed: CancellationToken::new(),
        }
    }

    /// Ends every open stream, and every stream opened from now on, once it has sent what it has.
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// Records an event and hands it to every subscriber without waiting; returns its id.
    pub fn publish(&self, body: EventBody) -> u64 {
        let mut ring = self.ring();
        let event = Arc::new(MeshEvent { id: ring.next_id, at: now_rfc3339(), body });
        ring.next_id += 1;
        if ring.events.len() == self.capacity {
            ring.events.pop_front();
        }
        ring.events.push_back(event.clone());
        // Sent under the lock so every subscriber sees ids in order; having no receiver is fine.
        let _ = self.live.send(event.clone());
        event.id
    }

    /// Streams open, events published, and events readers missed by falling behind.
    pub fn stats(&self) -> EventStats {
        EventStats {
            subscribers: lock(&self.subscribers).all,
            missed_by_readers: self.missed_by_readers.load(Ordering::Relaxed),
            published: self.ring().next_id - self.first_id,
        }
    }

    /// The events after `last_seen` still buffered, then live ones, for a subscriber of
    /// `tenant` (whose streams count against its tenant's share). Without `last_seen` the stream
    /// starts with the next event: a reader loads the current state from the API first.
    pub fn subscribe(
        &self,
        last_seen: Option<u64>,
        tenant: &str,
    ) -> Result<impl Stream<Item = Arc<MeshEvent>> + use<>, SubscribeRefused> {
        let slot = self.take_slot(tenant)?;
        // Snapshot and subscription under one lock: nothing published falls between the two.
        let ring = self.ring();
        let live = self.live.subscribe();
        let (backlog, expected) = match last_seen {
            // An id this hub never gave (another replica's, or from before a clock step): start
            // afresh, announcing that the reader's state may be stale.
            Some(last) if last >= ring.next_id => (VecDeque::new(), None),
            Some(last) => (ring.events.iter().filter(|e| e.id > last).cloned().collect(), Some(last + 1)),
            None => (VecDeque::new(), Some(ring.next_id)),
        };
        let next_id = ring.next_id;
        drop(ring);
        let reader = Reader {
            backlog,
            live,
            expected: expected.unwrap_or(next_id),
            unknown_gap: expected.is_none(),
            first_id: self.first_id,
            pending: None,
            missed_by_readers: self.missed_by_readers.clone(),
            closed: self.closed.clone(),
            _slot: slot,
        };
        Ok(futures::stream::unfold(reader, |mut reader| async move { reader.next().await.map(|e| (e, reader)) }))
    }

    fn take_slot(&self, tenant: &str) -> Result<Slot, SubscribeRefused> {
        let mut subscribers = lock(&self.subscribers);
        if subscribers.all >= self.limits.all_max {
            return Err(SubscribeRefused::Full(self.limits.all_max));
        }
        if subscribers.by_tenant.get(tenant).copied().unwrap_or(0) >= self.limits.per_tenant_max {
            return Err(SubscribeRefused::TenantFull(self.limits.per_tenant_max));
        }
        *subscribers.by_tenant.entry(tenant.to_owned()).or_default() += 1;
        subscribers.all += 1;
        Ok(Slot { subscribers: self.subscribers.clone(), tenant: tenant.to_owned() })
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        lock(&self.ring)
    }
}

/// One subscriber's position: the next id it should see, and what it has not delivered yet.
struct Reader {
    backlog: VecDeque<Arc<MeshEvent>>,
    live: broadcast::Receiver<Arc<MeshEvent>>,
    expected: u64,
    /// The reader's last id is unknown to this hub: the first event comes after a gap.
    unknown_gap: bool,
    first_id: u64,
    /// An event held back while the gap before it is delivered.
    pending: Option<Arc<MeshEvent>>,
    missed_by_readers: Arc<AtomicU64>,
    closed: CancellationToken,
    _slot: Slot,
}

impl Reader {
    async fn next(&mut self) -> Option<Arc<MeshEvent>> {
        if let Some(event) = self.pending.take() {
            self.expected = event.id + 1;
            return Some(event);
        }
        loop {
            let event = match self.backlog.pop_front() {
                Some(event) => event,
                None => match tokio::select! {
                    received = self.live.recv() => received,
                    () = self.closed.cancelled() => return None,
                } {
                    Ok(event) => event,
                    Err(RecvError::Lagged(skipped)) => {
                        self.missed_by_readers.fetch_add(skipped, Ordering::Relaxed);
                        continue;
                    }
                    Err(RecvError::Closed) => return None,
                },
            };
            // The live channel repeats what the backlog already delivered.
            if event.id < self.expected {
                continue;
            }
            if event.id == self.expected && !self.unknown_gap {
                self.expected = event.id + 1;
                return Some(event);
            }
            // Ids before this hub's first are from before a restart: their number is unknown.
            let missed = (!self.unknown_gap && self.expected >= self.first_id).then(|| event.id - self.expected);
            self.unknown_gap = false;
            let gap = Arc::new(MeshEvent { id: event.id - 1, at: now_rfc3339(), body: EventBody::Gap { missed } });
            self.expected = event.id;
            self.pending = Some(event);
            return Some(gap);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn call(n: u64) -> EventBody {
        EventBody::Call {
            from: "a".into(),
            to: "b".into(),
            capability: None,
            status: mesh_protocol::graph::OutcomeStatus::Success,
            latency_ms: n,
            tenant: String::new(),
        }
    }

    fn limits(all_max: usize, per_tenant_max: usize) -> SubscriberLimits {
        SubscriberLimits { all_max, per_tenant_max }
    }

    fn latency(event: &MeshEvent) -> Option<u64> {
        match &event.body {
            EventBody::Call { latency_ms, .. } => Some(*latency_ms),
            _ => None,
        }
    }

    async fn take(stream: impl Stream<Item = Arc<MeshEvent>>, n: usize) -> Vec<Arc<MeshEvent>> {
        tokio::time::timeout(std::time::Duration::from_secs(5), stream.take(n).collect()).await.unwrap()
    }

    #[tokio::test]
    async fn live_readers_get_every_event_in_order_from_subscription_on() {
        let hub = EventHub::new(16, limits(4, 4));
        hub.publish(call(0));
        let stream = hub.subscribe(None, "").unwrap();
        let ids: Vec<u64> = (1..=3).map(|n| hub.publish(call(n))).collect();
        let got = take(stream, 3).await;
        assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
        assert_eq!(got.iter().filter_map(|e| latency(e)).collect::<Vec<_>>(), [1, 2, 3]);
    }

    #[tokio::test]
    async fn a_resumed_stream_replays_what_follows_its_last_id_then_goes_live() {
        let hub = EventHub::new(16, limits(4, 4));
        let ids: Vec<u64> = (0..5).map(|n| hub.publish(call(n))).collect();
        let stream = hub.subscribe(Some(ids[2]), "").unwrap();
        hub.publish(call(5));
        let got = take(stream, 3).await;
        assert_eq!(got.iter().filter_map(|e| latency(e)).collect::<Vec<_>>(), [3, 4, 5]);
    }

    #[tokio::test]
    async fn resuming_past_the_buffer_announces_how_many_events_are_gone() {
        let hub = EventHub::new(4, limits(4, 4));
        let ids: Vec<u64> = (0..10).map(|n| hub.publish(call(n))).collect();
        let got = take(hub.subscribe(Some(ids[1]), "").unwrap(), 5).await;
        // Ids 2..=5 fell out of the 4-event buffer.
        assert_eq!(got[0].body, EventBody::Gap { missed: Some(4) });
        assert_eq!(got[1..].iter().filter_map(|e| latency(e)).collect::<Vec<_>>(), [6, 7, 8, 9]);
    }

    #[tokio::test]
    async fn an_id_from_another_hub_restarts_the_stream_with_an_unknown_gap() {
        let hub = EventHub::new(4, limits(4, 4));
        let last = hub.publish(call(0));
        let stream = hub.subscribe(Some(last + 1_000), "").unwrap();
        hub.publish(call(1));
        let got = take(stream, 2).await;
        assert_eq!(got[0].body, EventBody::Gap { missed: None });
        assert_eq!(latency(&got[1]), Some(1));
    }

    #[tokio::test]
    async fn a_reader_a_whole_buffer_behind_is_told_of_the_gap_and_counted() {
        let hub = EventHub::new(4, limits(4, 4));
        let stream = hub.subscribe(None, "").unwrap();
        for n in 0..10 {
            hub.publish(call(n));
        }
        let got = take(stream, 5).await;
        assert_eq!(got[0].body, EventBody::Gap { missed: Some(6) });
        assert_eq!(got[1..].iter().filter_map(|e| latency(e)).collect::<Vec<_>>(), [6, 7, 8, 9]);
        assert_eq!((hub.stats().missed_by_readers, hub.stats().published), (6, 10));
    }

    #[tokio::test]
    async fn closing_the_hub_ends_open_streams() {
        let hub = EventHub::new(4, limits(2, 2));
        let stream = hub.subscribe(None, "").unwrap();
        hub.close();
        assert!(take(stream, 1).await.is_empty());
    }

    #[tokio::test]
    async fn subscribers_are_bounded_and_slots_come_back() {
        let hub = EventHub::new(4, limits(2, 2));
        let first = hub.subscribe(None, "").unwrap();
        let _second = hub.subscribe(None, "").unwrap();
        assert!(hub.subscribe(None, "").is_err());
        assert_eq!(hub.stats().subscribers, 2);
        drop(first);
        assert_eq!(hub.stats().subscribers, 1);
        assert!(hub.subscribe(None, "").is_ok());
    }

    #[tokio::test]
    async fn one_tenant_holds_only_its_share_of_the_streams() {
        let hub = EventHub::new(4, limits(3, 2));
        let first = hub.subscribe(None, "globex").unwrap();
        let _second = hub.subscribe(None, "globex").unwrap();
        assert_eq!(hub.subscribe(None, "globex").err(), Some(SubscribeRefused::TenantFull(2)));
        let _acme = hub.subscribe(None, "acme").unwrap();
        assert_eq!(hub.subscribe(None, "").err(), Some(SubscribeRefused::Full(3)), "the cap in all still holds");
        drop(first);
        let _again = hub.subscribe(None, "globex").expect("a closed stream gives its tenant's slot back");
        assert_eq!(hub.stats().subscribers, 3);
    }
}
