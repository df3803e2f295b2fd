//! Call reports (issue #14): every call an agent sends is reported to the registry
//! (`POST /api/events/calls`), which turns each into a `call` event for the dashboard.
//!
//! Reporting never slows a call: [`CallReporter::report`] puts the report on a bounded queue
//! without waiting, and when the queue is full (the registry slow or down, a burst of calls) the
//! report is dropped and counted. A [`CallReportFlusher`] posts the queue in batches, when a batch
//! is full or on an interval, each POST within the registry client's timeout; a batch that
//! cannot be posted is dropped and counted too, so a registry outage costs reports, not memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mesh_protocol::graph::{CallReport, CallReports};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::registry::RegistryClient;

/// Reports waiting to be posted, at most; more are dropped and counted.
pub const CALL_REPORT_QUEUE_MAX_DEFAULT: usize = 4_096;
/// Reports per POST; a full batch is posted at once.
pub const CALL_REPORT_BATCH_MAX_DEFAULT: usize = 256;
/// Time between posts of a batch that is not full.
pub const CALL_REPORT_FLUSH_MS_DEFAULT: u64 = 1_000;
/// The registry takes at most this many reports per POST.
pub const CALL_REPORTS_PER_POST_MAX: usize = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallReportSettings {
    pub queue_max: usize,
    /// At most [`CALL_REPORTS_PER_POST_MAX`].
    pub batch_max: usize,
    pub flush_every: Duration,
}

impl Default for CallReportSettings {
    fn default() -> Self {
        Self {
            queue_max: CALL_REPORT_QUEUE_MAX_DEFAULT,
            batch_max: CALL_REPORT_BATCH_MAX_DEFAULT,
            flush_every: Duration::from_millis(CALL_REPORT_FLUSH_MS_DEFAULT),
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_unsent: AtomicU64,
}

/// What became of the reports so far, for `/health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CallReportCounts {
    /// Accepted by the registry.
    pub sent: u64,
    /// Dropped because the queue was full.
    pub dropped_queue_full: u64,
    /// Dropped because their POST failed (or no flusher was running).
    pub dropped_unsent: u64,
}

/// The sending end: cheap to clone, never waits.
#[derive(Debug, Clone)]
pub struct CallReporter {
    queue: mpsc::Sender<CallReport>,
    counters: Arc<Counters>,
}

/// The posting end: run it once, beside the agent ([`CallReportFlusher::run`]).
#[derive(Debug)]
pub struct CallReportFlusher {
    queue: mpsc::Receiver<CallReport>,
    counters: Arc<Counters>,
    batch_max: usize,
    flush_every: Duration,
}

impl CallReporter {
    pub fn new(settings: CallReportSettings) -> (Self, CallReportFlusher) {
        let (sender, receiver) = mpsc::channel(settings.queue_max.max(1));
        let counters = Arc::new(Counters::default());
        let flusher = CallReportFlusher {
            queue: receiver,
            counters: counters.clone(),
            batch_max: settings.batch_max.clamp(1, CALL_REPORTS_PER_POST_MAX),
            flush_every: settings.flush_every.max(Duration::from_millis(1)),
        };
        (Self { queue: sender, counters }, flusher)
    }

    /// Queues `report` for the registry, or drops and counts it when the queue is full.
    pub fn report(&self, report: CallReport) {
        let counter = match self.queue.try_send(report) {
            Ok(()) => return,
            Err(TrySendError::Full(_)) => &self.counters.dropped_queue_full,
            Err(TrySendError::Closed(_)) => &self.counters.dropped_unsent,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn counts(&self) -> CallReportCounts {
        counts(&self.counters)
    }
}

fn counts(counters: &Counters) -> CallReportCounts {
    CallReportCounts {
        sent: counters.sent.load(Ordering::Relaxed),
        dropped_queue_full: counters.dropped_queue_full.load(Ordering::Relaxed),
        dropped_unsent: counters.dropped_unsent.load(Ordering::Relaxed),
    }
}

impl CallReportFlusher {
    /// Posts the queued reports to `registry` until every [`CallReporter`] is dropped, then posts
    /// what is left and returns what became of all of them.
    pub async fn run(mut self, registry: RegistryClient) -> CallReportCounts {
        let mut batch = Vec::with_capacity(self.batch_max);
        // The first tick one interval from now, not at once: a batch gets its interval to fill.
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + self.flush_every, self.flush_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let room = self.batch_max - batch.len();
            tokio::select! {
                received = self.queue.recv_many(&mut batch, room) => {
                    if received == 0 {
                        self.post(&registry, &mut batch).await;
                        return counts(&self.counters);
                    }
                    if batch.len() < self.batch_max {
                        continue;
                    }
                }
                _ = tick.tick() => {}
            }
            self.post(&registry, &mut batch).await;
        }
    }

    async fn post(&self, registry: &RegistryClient, batch: &mut Vec<CallReport>) {
        if batch.is_empty() {
            return;
        }
        let reports = CallReports { calls: std::mem::take(batch) };
        let count = reports.calls.len() as u64;
        match registry.report_calls(&reports).await {
            Ok(_) => self.counters.sent.fetch_add(count, Ordering::Relaxed),
            Err(error) => {
                tracing::debug!(%error, reports = count, "call reports did not reach the registry; dropped");
                self.counters.dropped_unsent.fetch_add(count, Ordering::Relaxed)
            }
        };
        *batch = reports.calls;
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use bytes::Bytes;
    use http::{Request, Response, StatusCode};
    use mesh_protocol::graph::OutcomeStatus;

    use super::*;
    use crate::{BoxFuture, HttpClient, Transport, TransportError};

    /// A registry that takes call reports (and logs each batch's size) or fails every POST.
    #[derive(Debug, Default)]
    struct Registry {
        batches: Mutex<Vec<usize>>,
        down: bool,
    }

    #[derive(Debug, Clone)]
    struct Handle(Arc<Registry>);

    impl Transport for Handle {
        fn send(
            &self,
            request: Request<Bytes>,
            _timeout: Duration,
        ) -> BoxFuture<'static, Result<Response<Bytes>, TransportError>> {
            let registry = self.0.clone();
            Box::pin(async move {
                if registry.down {
                    return Err(TransportError::Connect("connection refused".into()));
                }
                assert_eq!(request.uri().path(), "/api/events/calls");
                let reports: CallReports = serde_json::from_slice(request.body()).expect("a batch of reports");
                registry.batches.lock().unwrap().push(reports.calls.len());
                let body = serde_json::json!({"accepted": reports.calls.len()}).to_string();
                Ok(Response::builder().status(StatusCode::ACCEPTED).body(Bytes::from(body)).unwrap())
            })
        }
    }

    fn report(n: u64) -> CallReport {
        CallReport {
            from: "orchestrator".into(),
            to: "search".into(),
            capability: Some("search".into()),
            status: OutcomeStatus::Success,
            latency_ms: n,
            at: None,
            tenant: None,
        }
    }

    fn registry(down: bool) -> (Arc<Registry>, RegistryClient) {
        let state = Arc::new(Registry { down, ..Registry::default() });
        let http = HttpClient::new(Arc::new(Handle(state.clone())));
        (state, RegistryClient::new("http://registry", http).unwrap())
    }

    fn settings(queue_max: usize, batch_max: usize) -> CallReportSettings {
        CallReportSettings { queue_max, batch_max, flush_every: Duration::from_secs(3_600) }
    }

    #[tokio::test(start_paused = true)]
    async fn overflow_is_dropped_and_counted_and_the_rest_posted_in_full_batches() {
        let (reporter, flusher) = CallReporter::new(settings(10, 3));
        for n in 0..14 {
            reporter.report(report(n));
        }
        assert_eq!(reporter.counts(), CallReportCounts { sent: 0, dropped_queue_full: 4, dropped_unsent: 0 });
        drop(reporter);
        let (state, client) = registry(false);
        let counts = flusher.run(client).await;
        assert_eq!(*state.batches.lock().unwrap(), [3, 3, 3, 1], "full batches at once, the rest at the end");
        assert_eq!(counts, CallReportCounts { sent: 10, dropped_queue_full: 4, dropped_unsent: 0 });
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_that_is_not_full_waits_for_the_interval() {
        let (reporter, flusher) =
            CallReporter::new(CallReportSettings { flush_every: Duration::from_millis(1_000), ..settings(10, 5) });
        let (state, client) = registry(false);
        let flushing = tokio::spawn(flusher.run(client));
        reporter.report(report(1));
        reporter.report(report(2));
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert!(state.batches.lock().unwrap().is_empty(), "not before the interval");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(*state.batches.lock().unwrap(), [2]);
        drop(reporter);
        flushing.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn reports_the_registry_does_not_take_are_dropped_and_counted() {
        let (reporter, flusher) = CallReporter::new(settings(10, 2));
        for n in 0..3 {
            reporter.report(report(n));
        }
        drop(reporter);
        let counts = flusher.run(registry(true).1).await;
        assert_eq!(counts, CallReportCounts { sent: 0, dropped_queue_full: 0, dropped_unsent: 3 });
    }

    #[tokio::test(start_paused = true)]
    async fn with_the_flusher_stopped_a_report_is_dropped_at_once() {
        let (reporter, flusher) = CallReporter::new(settings(10, 2));
        let flushing = tokio::spawn(flusher.run(registry(false).1));
        flushing.abort();
        let _ = flushing.await;
        reporter.report(report(1));
        assert_eq!(reporter.counts(), CallReportCounts { sent: 0, dropped_queue_full: 0, dropped_unsent: 1 });
    }
}
