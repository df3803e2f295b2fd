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
        CallReportCounts {
            sent: self.counters.sent.load(Ordering::Relaxed),
            dropped_queue_full: self.counters.dropped_queue_full.load(Ordering::Relaxed),
            dropped_unsent: self.counters.dropped_unsent.load(Ordering::Relaxed),
        }
    }
}

impl CallReportFlusher {
    /// Posts the queued reports to `registry` until every [`CallReporter`] is dropped, then posts
    /// what is left and returns.
    pub async fn run(mut self, registry: RegistryClient) {
        let mut batch = Vec::with_capacity(self.batch_max);
        let mut tick = tokio::time::interval(self.flush_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let room = self.batch_max - batch.len();
            tokio::select! {
                received = self.queue.recv_many(&mut batch, room) => {
                    if received == 0 {
                        self.post(&registry, &mut batch).await;
                        return;
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
