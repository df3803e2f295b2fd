//! How a task changes: events applied to its state, and the views clients ask for.

use chrono::{SecondsFormat, Utc};
use mesh_protocol::a2a::v1::{
    Artifact, Message, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent,
};

/// A new id for a task, a context or a message: a UUID whose first bits are the time it was
/// made (version 7). The task table's keys and indexes then grow at their right edge, so a new
/// task's row lands on the last page of each rather than on a random page of each (random
/// version-4 ids made every write dirty a page per index). It reveals the millisecond the id was
/// made, which the task's own timestamps say anyway.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Now as an RFC 3339 UTC timestamp with microseconds (`2026-11-22T04:08:38.933199Z`), the form
/// the official SDK writes. Fixed width, so comparing the strings compares the instants.
pub fn now_timestamp() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Rewrites an RFC 3339 instant in the form of [`now_timestamp`], so that it compares with stored
/// timestamps as text; `None` when it is not an RFC 3339 instant.
pub fn normalize_timestamp(instant: &str) -> Option<String> {
    // The engine's own stamps are in that form already: every save of a task reads one, and a
    // parse and a format would cost it more than the rest of a save in memory.
    if is_normal_timestamp(instant) {
        return Some(instant.to_owned());
    }
    chrono::DateTime::parse_from_rfc3339(instant)
        .ok()
        .map(|t| t.with_timezone(&Utc).to_rfc3339_opts(SecondsFormat::Micros, true))
}

/// Whether `instant` is written as [`now_timestamp`] writes (`YYYY-MM-DDTHH:MM:SS.ffffffZ`) and
/// names a real instant. A leap second (`:60`) is left to the parser, which moves it.
fn is_normal_timestamp(instant: &str) -> bool {
    let bytes = instant.as_bytes();
    let shaped = bytes.len() == NORMAL_TIMESTAMP_SHAPE.len()
        && bytes.iter().zip(NORMAL_TIMESTAMP_SHAPE).all(|(&byte, &shape)| match shape {
            b'd' => byte.is_ascii_digit(),
            separator => byte == separator,
        });
    if !shaped {
        return false;
    }
    let number = |from: usize, to: usize| bytes[from..to].iter().fold(0, |n, digit| n * 10 + u32::from(digit - b'0'));
    let (year, month, day) = (number(0, 4), number(5, 7), number(8, 10));
    let real_date = i32::try_from(year).is_ok_and(|year| chrono::NaiveDate::from_ymd_opt(year, month, day).is_some());
    real_date && number(11, 13) < 24 && number(14, 16) < 60 && number(17, 19) < 60
}

/// The form of [`now_timestamp`]'s stamps, `d` standing for a digit.
const NORMAL_TIMESTAMP_SHAPE: &[u8; 27] = b"dddd-dd-ddTdd:dd:dd.ddddddZ";

/// The wire name of a state (`TASK_STATE_COMPLETED`), as stored for filtering.
pub fn state_name(state: TaskState) -> &'static str {
    state.as_str()
}

/// The wire names of the terminal states, as stored.
pub fn terminal_states() -> [&'static str; 4] {
    [TaskState::Completed, TaskState::Failed, TaskState::Canceled, TaskState::Rejected].map(state_name)
}

/// Applies one event of the task's own stream to it. The current status message lives in
/// `status.message` only (as the official SDK keeps it); when the status moves on, it joins the
/// history, so the conversation stays whole. Artifact chunks either extend the artifact with the
/// same id (`append`) or replace it.
pub fn apply(task: &mut Task, event: &StreamResponse) {
    match event {
        StreamResponse::Task(snapshot) => *task = snapshot.clone(),
        StreamResponse::Message(message) => task.history.push(message.clone()),
        StreamResponse::StatusUpdate(update) => {
            let replaced = std::mem::replace(&mut task.status, update.status.clone());
            task.history.extend(replaced.message);
        }
        StreamResponse::ArtifactUpdate(update) => apply_artifact(&mut task.artifacts, update),
    }
}

/// Applies an artifact update to a task's artifacts: a chunk extends the artifact with the same
/// id (`append`), otherwise the update replaces it or adds a new one.
pub fn apply_artifact(artifacts: &mut Vec<Artifact>, update: &TaskArtifactUpdateEvent) {
    let existing = artifacts.iter_mut().find(|a| a.artifact_id == update.artifact.artifact_id);
    match existing {
        Some(artifact) if update.append => artifact.parts.extend(update.artifact.parts.iter().cloned()),
        Some(artifact) => *artifact = update.artifact.clone(),
        None => artifacts.push(update.artifact.clone()),
    }
}

/// The events that bring a subscriber's copy of a task to `stored`, a later read of it whose
/// events were not heard (a listener that reconnected, or started after the task moved on): each
/// artifact new or changed since the copy, whole (`append: false`, so it replaces what the
/// subscriber has), then the status when it differs. Empty when the copy is up to date.
pub fn catch_up(copy: &Task, stored: &Task) -> Vec<StreamResponse> {
    let finished = stored.status.state.is_terminal();
    let mut events: Vec<StreamResponse> = stored
        .artifacts
        .iter()
        .filter(|artifact| !copy.artifacts.contains(artifact))
        .map(|artifact| {
            StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: stored.id.clone(),
                context_id: stored.context_id.clone(),
                artifact: artifact.clone(),
                append: false,
                // Whether more of it may come is known only once the task has ended.
                last_chunk: finished,
                metadata: None,
            })
        })
        .collect();
    if copy.status != stored.status {
        events.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: stored.id.clone(),
            context_id: stored.context_id.clone(),
            status: stored.status.clone(),
            metadata: None,
        }));
    }
    events
}

/// Adds the user's next message: after the agent's status message it answers, which thereby
/// joins the history first.
pub fn add_user_message(task: &mut Task, message: Message) {
    task.history.extend(task.status.message.take());
    task.history.push(message);
}

/// Keeps the `history_length` most recent messages: `None` keeps all, `Some(0)` none.
pub fn trim_history(task: &mut Task, history_length: Option<usize>) {
    if let Some(keep) = history_length {
        let drop = task.history.len().saturating_sub(keep);
        task.history.drain(..drop);
    }
}

/// Whether a task in `state` may take another user message: only while it waits for one.
pub fn accepts_messages(state: TaskState) -> bool {
    state.is_interrupted()
}

#[cfg(test)]
mod tests {
    use mesh_protocol::a2a::v1::{Part, Role, TaskStatus};
    use proptest::prelude::*;

    use super::*;

    /// [`normalize_timestamp`] without its shortcut for stamps already normal.
    fn normalized_by_parsing(instant: &str) -> Option<String> {
        chrono::DateTime::parse_from_rfc3339(instant)
            .ok()
            .map(|t| t.with_timezone(&Utc).to_rfc3339_opts(SecondsFormat::Micros, true))
    }

    proptest! {
        /// Any string of a normal stamp's shape (real dates or not, leap seconds, hours past 23)
        /// is normalized as parsing and formatting it would.
        #[test]
        fn a_stamp_of_the_normal_shape_is_normalized_as_parsing_would(
            year in 0u32..10_000, month in 0u32..100, day in 0u32..100,
            hour in 0u32..100, minute in 0u32..100, second in 0u32..100, micros in 0u32..1_000_000,
        ) {
            let instant = format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{micros:06}Z");
            prop_assert_eq!(normalize_timestamp(&instant), normalized_by_parsing(&instant), "{}", instant);
        }

        /// So is any string at all.
        #[test]
        fn any_string_is_normalized_as_parsing_would(instant in "[0-9TZtz:.+-]{0,32}") {
            prop_assert_eq!(normalize_timestamp(&instant), normalized_by_parsing(&instant));
        }
    }

    #[test]
    fn stamps_are_normalized_to_utc_microseconds() {
        let now = now_timestamp();
        assert_eq!(normalize_timestamp(&now), Some(now.clone()));
        for (instant, normal) in [
            ("2024-02-29T23:59:59.999999Z", Some("2024-02-29T23:59:59.999999Z")),
            ("2026-11-22T04:08:38.933199+01:00", Some("2026-11-22T03:08:38.933199Z")),
            ("2026-11-22T04:08:38Z", Some("2026-11-22T04:08:38.000000Z")),
            ("2026-02-29T00:00:00.000000Z", None),
            ("2026-11-22T24:00:00.000000Z", None),
        ] {
            assert_eq!(normalize_timestamp(instant).as_deref(), normal, "{instant}");
        }
    }

    /// The shortcut is what spares a save the parse: every stamp the engine writes takes it, and
    /// nothing that the parser would refuse or rewrite does. (A shortcut that never fires gives
    /// the same answers as above, only slower, so only this test sees it.)
    #[test]
    fn the_engines_own_stamps_take_the_shortcut() {
        for normal in [
            now_timestamp(),
            "2026-11-22T04:08:38.933199Z".into(),
            "2024-02-29T23:59:59.999999Z".into(),
            "0001-01-01T00:00:00.000000Z".into(),
        ] {
            assert!(is_normal_timestamp(&normal), "{normal}");
        }
        for other in [
            "2026-11-22T04:08:38Z",
            "2026-11-22T04:08:38.933199+00:00",
            "2026-11-22 04:08:38.933199Z",
            "2026-11-22T04:08:38,933199Z",
            "2026-13-22T04:08:38.933199Z",
            "2026-02-29T04:08:38.933199Z",
            "2026-11-22T24:08:38.933199Z",
            "2026-11-22T04:60:38.933199Z",
            "2026-11-22T04:08:60.933199Z",
            "2026-11-22T04:08:38.93319xZ",
        ] {
            assert!(!is_normal_timestamp(other), "{other}");
        }
    }

    #[test]
    fn new_ids_are_unique_and_sort_in_the_order_they_were_made() {
        let ids: Vec<String> = (0..1_000).map(|_| new_id()).collect();
        let parsed = uuid::Uuid::parse_str(&ids[0]).unwrap();
        assert_eq!(parsed.get_version_num(), 7);
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        // Made in order within this process, so their text order is the order they were made.
        assert_eq!(sorted, ids);
    }

    fn task() -> Task {
        Task {
            id: "t1".into(),
            context_id: "c1".into(),
            status: TaskStatus { state: TaskState::Submitted, message: None, timestamp: None },
            artifacts: Vec::new(),
            history: vec![Message::text(Role::User, "m1", "hi")],
            metadata: None,
        }
    }

    fn artifact_update(parts: &[&str], append: bool) -> StreamResponse {
        StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: "t1".into(),
            context_id: "c1".into(),
            artifact: Artifact {
                artifact_id: "a1".into(),
                name: None,
                description: None,
                parts: parts.iter().map(|p| Part::text(*p)).collect(),
                metadata: None,
                extensions: None,
            },
            append,
            last_chunk: false,
            metadata: None,
        })
    }

    #[test]
    fn artifact_chunks_append_or_replace() {
        let mut task = task();
        apply(&mut task, &artifact_update(&["a"], false));
        apply(&mut task, &artifact_update(&["b"], true));
        assert_eq!(task.artifacts.len(), 1);
        let texts: Vec<_> = task.artifacts[0].parts.iter().filter_map(Part::as_text).collect();
        assert_eq!(texts, ["a", "b"]);
        apply(&mut task, &artifact_update(&["c"], false));
        let texts: Vec<_> = task.artifacts[0].parts.iter().filter_map(Part::as_text).collect();
        assert_eq!(texts, ["c"]);
    }

    #[test]
    fn a_status_message_joins_the_history_when_replaced() {
        let mut task = task();
        let question = Message::text(Role::Agent, "m2", "which city?");
        apply(
            &mut task,
            &StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: "t1".into(),
                context_id: "c1".into(),
                status: TaskStatus {
                    state: TaskState::InputRequired,
                    message: Some(question.clone()),
                    timestamp: None,
                },
                metadata: None,
            }),
        );
        assert_eq!(task.status.state, TaskState::InputRequired);
        assert_eq!(task.status.message.as_ref(), Some(&question));
        assert_eq!(task.history.len(), 1, "the current status message is not yet history");
        apply(
            &mut task,
            &StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: "t1".into(),
                context_id: "c1".into(),
                status: TaskStatus { state: TaskState::Working, message: None, timestamp: None },
                metadata: None,
            }),
        );
        assert_eq!(task.history.last(), Some(&question));
        let answer = Message::text(Role::User, "m3", "Paris");
        let mut asked = task.clone();
        asked.status.message = Some(Message::text(Role::Agent, "m4", "when?"));
        add_user_message(&mut asked, answer.clone());
        let ids: Vec<_> = asked.history.iter().map(|m| m.message_id.as_str()).collect();
        assert_eq!(ids, ["m1", "m2", "m4", "m3"]);
        assert_eq!(asked.status.message, None);
        assert!(!accepts_messages(task.status.state), "a working task takes no message");
        assert!(accepts_messages(TaskState::InputRequired));
    }

    /// The kinds, artifact texts and `last_chunk` of `events`, for comparing them whole.
    fn described(events: &[StreamResponse]) -> Vec<String> {
        events
            .iter()
            .map(|event| match event {
                StreamResponse::ArtifactUpdate(update) => {
                    let texts: Vec<_> = update.artifact.parts.iter().filter_map(Part::as_text).collect();
                    format!(
                        "artifact {} {texts:?} append={} last={}",
                        update.artifact.artifact_id, update.append, update.last_chunk
                    )
                }
                StreamResponse::StatusUpdate(update) => format!("status {:?}", update.status.state),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn catching_up_tells_the_artifacts_and_status_a_copy_missed_and_nothing_it_has() {
        let copy = task();
        assert!(catch_up(&copy, &copy).is_empty(), "an up-to-date copy needs nothing");

        // Working elsewhere, with one artifact in two chunks: told whole, more may come.
        let mut working = copy.clone();
        for event in [artifact_update(&["a"], false), artifact_update(&["b"], true)] {
            apply(&mut working, &event);
        }
        working.status.state = TaskState::Working;
        assert_eq!(
            described(&catch_up(&copy, &working)),
            ["artifact a1 [\"a\", \"b\"] append=false last=false", "status Working"]
        );

        // Completed with a second artifact, the copy having the first one: only the new one, and
        // as the last chunk, since the task has ended.
        let mut completed = working.clone();
        let mut second = artifact_update(&["c"], false);
        if let StreamResponse::ArtifactUpdate(update) = &mut second {
            update.artifact.artifact_id = "a2".into();
        }
        apply(&mut completed, &second);
        completed.status.state = TaskState::Completed;
        assert_eq!(
            described(&catch_up(&working, &completed)),
            ["artifact a2 [\"c\"] append=false last=true", "status Completed"]
        );

        // An artifact changed in place (chunks appended), the status the same: the artifact only.
        let mut appended = working.clone();
        apply(&mut appended, &artifact_update(&["d"], true));
        assert_eq!(
            described(&catch_up(&working, &appended)),
            ["artifact a1 [\"a\", \"b\", \"d\"] append=false last=false"]
        );

        // Applied to the copy, the events bring it to the stored task.
        let mut caught = copy;
        for event in catch_up(&caught.clone(), &completed) {
            apply(&mut caught, &event);
        }
        assert_eq!(caught.artifacts, completed.artifacts);
        assert_eq!(caught.status, completed.status);
    }

    #[test]
    fn history_keeps_the_most_recent() {
        let mut task = task();
        task.history.push(Message::text(Role::Agent, "m2", "hello"));
        let mut all = task.clone();
        trim_history(&mut all, None);
        assert_eq!(all.history.len(), 2);
        trim_history(&mut task, Some(1));
        assert_eq!(task.history[0].message_id, "m2");
        trim_history(&mut task, Some(0));
        assert!(task.history.is_empty());
    }

    #[test]
    fn timestamps_normalize_to_one_sortable_form() {
        assert_eq!(normalize_timestamp("2026-11-22T05:08:38+01:00").as_deref(), Some("2026-11-22T04:08:38.000000Z"));
        assert_eq!(normalize_timestamp("yesterday"), None);
        assert_eq!(now_timestamp().len(), "2026-11-22T04:08:38.933199Z".len());
        assert_eq!(state_name(TaskState::Completed), "TASK_STATE_COMPLETED");
    }
}
