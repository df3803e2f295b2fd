//! Task events shared between the replicas of one agent over PostgreSQL `LISTEN`/`NOTIFY`: the
//! replica that runs a task tells the others each change, so a subscription opened on any replica
//! follows it, and a cancellation made on any replica reaches the turn that runs it.
//!
//! PostgreSQL is the engine the replicas share already (their task table); its notifications
//! need no other server. A notification carries at most 8000 bytes, so an event is sent as JSON
//! cut into pieces, each led by a header line naming the task, the sending replica and the
//! event's sequence; the pieces of one event go in one statement, which PostgreSQL delivers
//! together and in commit order. A listener whose connection drops reconnects and says so
//! ([`Remote::Resync`]): what it follows must then be read again from the store, since events
//! sent meanwhile are lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mesh_protocol::a2a::v1::StreamResponse;
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use tokio::sync::mpsc;

use crate::error::TaskError;

/// PostgreSQL takes `NOTIFY` payloads shorter than 8000 bytes.
const NOTIFY_PAYLOAD_BYTES_MAX: usize = 7_999;
/// Pieces one event may be cut into (about 8 MB), more than a task's artifacts take by default.
const PIECES_PER_EVENT_MAX: usize = 1_024;
/// The smallest room for a piece beside its header; a header leaving less (a huge tenant or task
/// id) is not sent.
const PIECE_BYTES_MIN: usize = 1_024;
/// Events waiting to be published; a publisher past it waits for room.
const PUBLISH_QUEUE_MAX: usize = 4_096;
/// Events sent in one statement at most.
const PUBLISH_BATCH_MAX: usize = 256;
/// Time one publishing statement (connection included) may take.
const PUBLISH_TIMEOUT_MS: u64 = 5_000;
/// Attempts at publishing one batch before its events are given up (subscribers elsewhere then
/// see the task's end when the task's time to live runs out, or when they reconnect).
const PUBLISH_ATTEMPTS_MAX: u32 = 3;
/// Events heard and not yet taken by the engine; past it the listener waits (PostgreSQL keeps
/// queueing meanwhile).
const HEARD_QUEUE_MAX: usize = 4_096;
/// Events being put together at once (one replica's pieces arrive together, so this is a guard).
const ASSEMBLIES_MAX: usize = 64;
/// Wait between attempts to (re)connect the listener, doubling up to the max.
const LISTEN_RETRY_MS_MIN: u64 = 100;
const LISTEN_RETRY_MS_MAX: u64 = 5_000;
/// Time to connect and `LISTEN`.
const LISTEN_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Longest channel name PostgreSQL keeps (NAMEDATALEN - 1).
const CHANNEL_BYTES_MAX: usize = 63;
const CHANNEL_PREFIX: &str = "a2a_tasks:";

/// What a replica hears from the others.
#[derive(Debug, Clone, PartialEq)]
pub enum Remote {
    /// An event of a task another replica changed (ran, canceled, failed).
    Event { tenant: String, id: String, event: Box<StreamResponse> },
    /// The listener (re)connected: events sent meanwhile may be lost, so the tasks followed must
    /// be read again from the store.
    Resync,
}

/// The header line of each piece.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Header {
    /// The agent (channels of long names may be shared: the name decides).
    agent: String,
    /// The sending replica, whose own events it ignores.
    replica: String,
    /// The event's number among the replica's events.
    sequence: u64,
    /// This piece's place, and how many pieces the event has.
    piece: usize,
    pieces: usize,
    tenant: String,
    task: String,
}

/// The identity of one replica's fan-out: its channel and who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    agent: String,
    replica: String,
}

impl Identity {
    /// The agent's channel: its name, cut to what PostgreSQL keeps of a channel name.
    fn channel(&self) -> String {
        let mut channel = format!("{CHANNEL_PREFIX}{}", self.agent);
        let mut end = channel.len().min(CHANNEL_BYTES_MAX);
        while !channel.is_char_boundary(end) {
            end -= 1;
        }
        channel.truncate(end);
        channel
    }

    /// The payloads carrying `event` of task `task`: `None` when it cannot be sent (it takes more
    /// pieces than allowed, or the header leaves no room).
    fn encode(&self, sequence: u64, tenant: &str, task: &str, event: &StreamResponse) -> Option<Vec<String>> {
        let json = serde_json::to_string(event).ok()?;
        let header = |piece, pieces| Header {
            agent: self.agent.clone(),
            replica: self.replica.clone(),
            sequence,
            piece,
            pieces,
            tenant: tenant.to_owned(),
            task: task.to_owned(),
        };
        // The widest header these pieces can have: its numbers at most the JSON's length.
        let widest = serde_json::to_string(&header(json.len(), json.len())).ok()?.len() + 1;
        let room = NOTIFY_PAYLOAD_BYTES_MAX.checked_sub(widest).filter(|room| *room >= PIECE_BYTES_MIN)?;
        let pieces = cut(&json, room, PIECES_PER_EVENT_MAX)?;
        let count = pieces.len();
        pieces
            .into_iter()
            .enumerate()
            .map(|(i, piece)| serde_json::to_string(&header(i, count)).ok().map(|line| format!("{line}\n{piece}")))
            .collect()
    }
}

/// `text` in pieces of at most `room` bytes (`room` at least 4: a character's longest UTF-8), each
/// ending on a character boundary; `None` when that takes more than `pieces_max` pieces.
fn cut(text: &str, room: usize, pieces_max: usize) -> Option<Vec<&str>> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = room.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        pieces.push(&rest[..end]);
        rest = &rest[end..];
        if pieces.len() > pieces_max {
            return None;
        }
    }
    Some(pieces)
}

/// Puts the pieces of the other replicas' events together.
#[derive(Debug)]
struct Assembler {
    identity: Identity,
    partial: HashMap<(String, u64), Vec<String>>,
}

impl Assembler {
    fn new(identity: Identity) -> Self {
        Self { identity, partial: HashMap::new() }
    }

    /// Takes one payload; the event once all its pieces are in. Payloads of this replica, of
    /// another agent, malformed or out of order are dropped.
    fn take(&mut self, payload: &str) -> Option<Remote> {
        let (line, piece) = payload.split_once('\n')?;
        let header: Header = serde_json::from_str(line).ok()?;
        if header.agent != self.identity.agent
            || header.replica == self.identity.replica
            || header.pieces == 0
            || header.pieces > PIECES_PER_EVENT_MAX
        {
            return None;
        }
        let json = if header.pieces == 1 {
            piece.to_owned()
        } else {
            let key = (header.replica.clone(), header.sequence);
            if header.piece == 0 {
                if self.partial.len() >= ASSEMBLIES_MAX {
                    tracing::warn!(agent = %header.agent, "too many task events in pieces at once; dropped");
                    self.partial.clear();
                }
                self.partial.insert(key.clone(), Vec::with_capacity(header.pieces));
            }
            let pieces = self.partial.get_mut(&key)?;
            if pieces.len() != header.piece {
                self.partial.remove(&key);
                return None;
            }
            pieces.push(piece.to_owned());
            if pieces.len() < header.pieces {
                return None;
            }
            self.partial.remove(&key)?.concat()
        };
        let event = serde_json::from_str(&json).ok()?;
        Some(Remote::Event { tenant: header.tenant, id: header.task, event: Box::new(event) })
    }
}

/// One replica's end of the fan-out: publishes its events, and hears the others'.
#[derive(Debug)]
pub struct Fanout {
    identity: Identity,
    url: String,
    sequence: AtomicU64,
    queue: mpsc::Sender<Vec<String>>,
}

impl Fanout {
    /// Starts the publisher of `agent`'s replica `replica` on the PostgreSQL at `url` (connected
    /// when the first event is sent); it lives as long as the fan-out.
    pub(crate) fn start(url: &str, agent: &str, replica: &str) -> Result<Self, TaskError> {
        let identity = Identity { agent: agent.to_owned(), replica: replica.to_owned() };
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_millis(PUBLISH_TIMEOUT_MS))
            .connect_lazy(url)?;
        let (queue, outgoing) = mpsc::channel(PUBLISH_QUEUE_MAX);
        tokio::spawn(publish_batches(pool, identity.channel(), outgoing));
        Ok(Self { identity, url: url.to_owned(), sequence: AtomicU64::new(0), queue })
    }

    /// Queues `event` of the task for the other replicas; waits only for room in the queue.
    pub(crate) async fn publish(&self, tenant: &str, task: &str, event: &StreamResponse) {
        self.send(&self.identity, tenant, task, event).await;
    }

    /// Queues `event` of a task that `owner`, a replica found dead, ran: sent in its name, so
    /// every live replica hears it, this one included (its own subscribers may follow the task).
    pub(crate) async fn publish_for(&self, owner: &str, tenant: &str, task: &str, event: &StreamResponse) {
        let identity = Identity { agent: self.identity.agent.clone(), replica: owner.to_owned() };
        self.send(&identity, tenant, task, event).await;
    }

    async fn send(&self, sender: &Identity, tenant: &str, task: &str, event: &StreamResponse) {
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed);
        let Some(payloads) = sender.encode(sequence, tenant, task, event) else {
            tracing::warn!(task, "a task event too large to share with the other replicas; not sent");
            return;
        };
        if self.queue.send(payloads).await.is_err() {
            tracing::warn!(task, "the task event publisher stopped; event not shared");
        }
    }

    /// Starts hearing the other replicas' events, until the receiver is dropped.
    pub(crate) fn listen(&self) -> mpsc::Receiver<Remote> {
        let (heard, receiver) = mpsc::channel(HEARD_QUEUE_MAX);
        tokio::spawn(listen(self.url.clone(), self.identity.clone(), heard));
        receiver
    }
}

/// Sends the queued events in order, a batch per statement, until every sender is gone.
async fn publish_batches(pool: PgPool, channel: String, mut outgoing: mpsc::Receiver<Vec<String>>) {
    let mut batch = Vec::with_capacity(PUBLISH_BATCH_MAX);
    while outgoing.recv_many(&mut batch, PUBLISH_BATCH_MAX).await > 0 {
        let payloads: Vec<String> = batch.drain(..).flatten().collect();
        for attempt in 1..=PUBLISH_ATTEMPTS_MAX {
            // One statement: its notifications are delivered together, in array order.
            let notify = sqlx::query(
                "SELECT pg_notify($1, payload) FROM unnest($2::text[]) WITH ORDINALITY AS p(payload, n) ORDER BY n",
            )
            .bind(&channel)
            .bind(&payloads)
            .execute(&pool);
            match tokio::time::timeout(Duration::from_millis(PUBLISH_TIMEOUT_MS), notify).await {
                Ok(Ok(_)) => break,
                Ok(Err(error)) => tracing::warn!(%error, attempt, "could not share task events"),
                Err(_) => tracing::warn!(attempt, "sharing task events timed out"),
            }
        }
    }
}

/// The wait before the next attempt to listen after one that failed `retry` after the last.
fn listen_backoff(retry: Duration) -> Duration {
    (retry * 2).min(Duration::from_millis(LISTEN_RETRY_MS_MAX))
}

/// Hears the channel, (re)connecting as needed, and hands the events over until `heard` closes.
async fn listen(url: String, identity: Identity, heard: mpsc::Sender<Remote>) {
    let channel = identity.channel();
    let mut retry = Duration::from_millis(LISTEN_RETRY_MS_MIN);
    loop {
        let connect = async {
            let mut listener = PgListener::connect(&url).await?;
            listener.listen(&channel).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let mut listener = match tokio::time::timeout(Duration::from_millis(LISTEN_CONNECT_TIMEOUT_MS), connect).await {
            Ok(Ok(listener)) => listener,
            failed => {
                let error = failed
                    .map_or_else(|_| "timed out".to_owned(), |r| r.err().map(|e| e.to_string()).unwrap_or_default());
                tracing::warn!(%error, channel, "cannot listen for other replicas' task events; retrying");
                tokio::select! {
                    () = heard.closed() => return,
                    () = tokio::time::sleep(retry) => {}
                }
                retry = listen_backoff(retry);
                continue;
            }
        };
        retry = Duration::from_millis(LISTEN_RETRY_MS_MIN);
        // Listening from here on: what happened before is read from the store.
        if heard.send(Remote::Resync).await.is_err() {
            return;
        }
        let mut assembler = Assembler::new(identity.clone());
        loop {
            let received = tokio::select! {
                () = heard.closed() => return,
                received = listener.try_recv() => received,
            };
            match received {
                Ok(Some(notification)) => {
                    if let Some(remote) = assembler.take(notification.payload())
                        && heard.send(remote).await.is_err()
                    {
                        return;
                    }
                }
                Ok(None) => {
                    tracing::warn!(channel, "lost the connection hearing other replicas' task events; reconnecting");
                    break;
                }
                Err(error) => {
                    tracing::warn!(%error, channel, "hearing other replicas' task events failed; reconnecting");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use mesh_protocol::a2a::v1::{
        Artifact, Part, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent,
    };

    use super::*;

    fn identity(replica: &str) -> Identity {
        Identity { agent: "agent".into(), replica: replica.into() }
    }

    fn artifact(text: String) -> StreamResponse {
        StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: "t1".into(),
            context_id: "c1".into(),
            artifact: Artifact {
                artifact_id: "a1".into(),
                name: None,
                description: None,
                parts: vec![Part::text(text)],
                metadata: None,
                extensions: None,
            },
            append: true,
            last_chunk: false,
            metadata: None,
        })
    }

    #[test]
    fn events_travel_in_pieces_that_fit_a_notification_and_come_back_whole() {
        let sender = identity("a");
        let status = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t1".into(),
            context_id: "c1".into(),
            status: TaskStatus { state: TaskState::Working, message: None, timestamp: None },
            metadata: None,
        });
        // Multi-byte characters straddle the cuts: pieces end on character boundaries.
        let large = artifact("é€😀".repeat(6_000));
        for (sequence, event) in [(0, status), (1, large)] {
            let payloads = sender.encode(sequence, "tenant", "t1", &event).unwrap();
            assert!(payloads.iter().all(|p| p.len() <= NOTIFY_PAYLOAD_BYTES_MAX));
            let mut receiver = Assembler::new(identity("b"));
            let (last, first) = payloads.split_last().unwrap();
            assert!(first.iter().all(|p| receiver.take(p).is_none()), "nothing before the last piece");
            let heard = receiver.take(last).unwrap();
            assert_eq!(
                heard,
                Remote::Event { tenant: "tenant".into(), id: "t1".into(), event: Box::new(event.clone()) }
            );
            assert!(receiver.partial.is_empty());
            // The sender and other agents ignore it.
            let mut own = Assembler::new(identity("a"));
            assert!(payloads.iter().all(|p| own.take(p).is_none()));
            let mut other_agent = Assembler::new(Identity { agent: "other".into(), replica: "b".into() });
            assert!(payloads.iter().all(|p| other_agent.take(p).is_none()));
        }
    }

    #[test]
    fn a_missing_piece_drops_the_event_and_bad_payloads_are_ignored() {
        let payloads = identity("a").encode(7, "", "t1", &artifact("x".repeat(20_000))).unwrap();
        assert_eq!(payloads.len(), 3);
        let mut receiver = Assembler::new(identity("b"));
        assert!(receiver.take(&payloads[0]).is_none());
        assert!(receiver.take(&payloads[2]).is_none(), "piece 2 without piece 1");
        assert!(receiver.partial.is_empty());
        for bad in ["", "no header", "{}\n{}", "{\"agent\":1}\nx"] {
            assert!(receiver.take(bad).is_none(), "{bad:?}");
        }
        // Too large to send at all: more pieces than allowed.
        let huge = artifact("x".repeat(NOTIFY_PAYLOAD_BYTES_MAX * (PIECES_PER_EVENT_MAX + 1)));
        assert!(identity("a").encode(8, "", "t1", &huge).is_none());
    }

    #[test]
    fn text_is_cut_into_the_fewest_pieces_that_fit_ending_on_character_boundaries() {
        assert_eq!(cut("abcdef", 2, 3), Some(vec!["ab", "cd", "ef"]), "exactly the most pieces allowed");
        assert_eq!(cut("abcdefg", 2, 3), None, "one piece too many");
        assert_eq!(cut("", 4, 1), Some(vec![]));
        // "é" is 2 bytes, "€" 3, "😀" 4: each piece is the longest whole-character prefix that fits.
        let text = "é€😀".repeat(5);
        for room in 4..12 {
            let pieces = cut(&text, room, 100).unwrap();
            assert_eq!(pieces.concat(), text);
            let (last, full) = pieces.split_last().unwrap();
            assert!(last.len() <= room);
            for piece in full {
                assert!(piece.len() <= room && piece.len() + 4 > room, "room {room}: {piece:?}");
            }
        }
    }

    #[test]
    fn a_header_announcing_more_pieces_than_allowed_is_dropped_before_any_is_kept() {
        let payloads = identity("a").encode(9, "", "t1", &artifact("x".repeat(20_000))).unwrap();
        let (line, piece) = payloads[0].split_once('\n').unwrap();
        // The first payload, its header announcing `pieces` pieces.
        let announcing = |pieces: usize| {
            let header = Header { pieces, ..serde_json::from_str(line).unwrap() };
            format!("{}\n{piece}", serde_json::to_string(&header).unwrap())
        };
        for pieces in [PIECES_PER_EVENT_MAX + 1, usize::MAX] {
            let mut receiver = Assembler::new(identity("b"));
            assert!(receiver.take(&announcing(pieces)).is_none());
            assert!(receiver.partial.is_empty(), "{pieces} pieces: nothing is held for it");
        }
        let mut receiver = Assembler::new(identity("b"));
        assert!(receiver.take(&announcing(PIECES_PER_EVENT_MAX)).is_none(), "one piece of many");
        assert_eq!(receiver.partial.len(), 1, "the most pieces allowed: its first is held");
    }

    #[test]
    fn events_in_pieces_are_assembled_side_by_side_up_to_a_bound() {
        let sender = identity("a");
        let first_pieces = |sequence: u64| sender.encode(sequence, "", "t1", &artifact("x".repeat(20_000))).unwrap();
        let mut receiver = Assembler::new(identity("b"));
        let interleaved = [first_pieces(1), first_pieces(2)];
        for payloads in &interleaved {
            assert!(receiver.take(&payloads[0]).is_none());
        }
        assert_eq!(receiver.partial.len(), 2, "two events under way at once");
        for payloads in &interleaved {
            let (last, middle) = payloads[1..].split_last().unwrap();
            assert!(middle.iter().all(|p| receiver.take(p).is_none()));
            assert!(receiver.take(last).is_some(), "each completes");
        }
        // Beyond the bound, what was under way is dropped rather than held without limit.
        for sequence in 0..ASSEMBLIES_MAX as u64 {
            assert!(receiver.take(&first_pieces(100 + sequence)[0]).is_none());
        }
        assert_eq!(receiver.partial.len(), ASSEMBLIES_MAX);
        assert!(receiver.take(&first_pieces(1_000)[0]).is_none());
        assert_eq!(receiver.partial.len(), 1, "the one started last");
    }

    #[test]
    fn listening_is_retried_ever_later_up_to_a_bound() {
        let mut retry = Duration::from_millis(LISTEN_RETRY_MS_MIN);
        let mut waits = Vec::new();
        for _ in 0..8 {
            waits.push(retry.as_millis());
            retry = listen_backoff(retry);
        }
        assert_eq!(waits, [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]);
    }

    #[tokio::test]
    async fn the_publisher_ends_once_every_sender_is_gone() {
        // Nothing listens there: were the publisher to go on, it would try to send and fail.
        let pool = PgPool::connect_lazy("postgres://nobody@127.0.0.1:1/none").unwrap();
        let (queue, outgoing) = mpsc::channel::<Vec<String>>(1);
        drop(queue);
        let ended = tokio::time::timeout(Duration::from_secs(5), publish_batches(pool, "c".into(), outgoing)).await;
        assert!(ended.is_ok(), "the publisher outlived its queue");
    }

    #[test]
    fn channels_fit_postgres_names() {
        let long = Identity { agent: "é".repeat(60), replica: "r".into() };
        assert!(long.channel().len() <= CHANNEL_BYTES_MAX && long.channel().starts_with(CHANNEL_PREFIX));
        assert_eq!(identity("a").channel(), "a2a_tasks:agent");
    }
}
