//! The task format of seed 002 (`POST /tasks/send`) and the response envelope of seed 003.
//!
//! Request: `{"id":"task_uuid","messages":[{"role":"user","parts":[{"type":"text","text":".."},{"type":"data","data":{..}}]}]}`.
//! Response: the same id, an outcome (`SUCCESS` or `PARTIAL` with warnings), the agent's reply
//! message and metadata. Failures answer with [`crate::error::ErrorBody`] instead.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Agent,
    /// Accepted as a synonym of `agent`, the spelling chat-completion style callers use.
    Assistant,
    System,
}

/// One piece of a message: free text or a JSON value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Part {
    Text { text: String },
    Data { data: Value },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub parts: Vec<Part>,
}

/// Body of `POST /tasks/send`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRequest {
    /// Caller-chosen task id; the agent assigns a UUID when it is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub messages: Vec<Message>,
    /// What A2A carries in message metadata, for a seed task (whose messages have none): the
    /// handoff context ([`crate::handoff::HANDOFF_METADATA_KEY`]).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

/// Why a [`TaskRequest`] cannot be processed, found before any work starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskShapeError {
    NoMessages,
    NoUserMessage,
    EmptyUserMessage,
}

impl std::fmt::Display for TaskShapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NoMessages => "the task has no messages",
            Self::NoUserMessage => "the task has no message with role \"user\"",
            Self::EmptyUserMessage => "the last user message has no parts",
        })
    }
}

impl std::error::Error for TaskShapeError {}

impl TaskRequest {
    /// A single-message task holding `text`, plus a data part when `data` is given.
    pub fn from_text(id: Option<String>, text: impl Into<String>, data: Option<Value>) -> Self {
        let mut parts = vec![Part::Text { text: text.into() }];
        parts.extend(data.map(|data| Part::Data { data }));
        Self { id, messages: vec![Message { role: Role::User, parts }], metadata: Map::new() }
    }

    /// The message the agent must answer: the last one written by the user.
    pub fn last_user_message(&self) -> Result<&Message, TaskShapeError> {
        if self.messages.is_empty() {
            return Err(TaskShapeError::NoMessages);
        }
        let message = self.messages.iter().rev().find(|m| m.role == Role::User).ok_or(TaskShapeError::NoUserMessage)?;
        if message.parts.is_empty() {
            return Err(TaskShapeError::EmptyUserMessage);
        }
        Ok(message)
    }
}

impl Message {
    /// The text parts joined by newlines (the query, for agents that take one).
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                Part::Data { .. } => None,
            })
            .collect();
        texts.join("\n")
    }

    /// The data parts that are JSON objects, merged left to right (later keys win).
    pub fn data(&self) -> Map<String, Value> {
        let mut merged = Map::new();
        for part in &self.parts {
            if let Part::Data { data: Value::Object(fields) } = part {
                merged.extend(fields.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        merged
    }
}

/// Outcome of a request that produced an answer (seed 003); failures use [`crate::error::ErrorBody`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResponseStatus {
    Success,
    /// Answered with limitations, listed in `warnings`.
    Partial,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseMetadata {
    /// Name of the agent that answered.
    pub agent: String,
    /// Time the agent spent on the task, in milliseconds with sub-millisecond precision.
    pub processing_time_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// How sure the answering agent is of its result (seed 003's platform confidence levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConfidenceLevel {
    High,
    Medium,
    Low,
    Speculative,
}

/// Lowest score (0 to 1) of each level, highest level first: what [`ConfidenceLevel::from_score`]
/// maps a planner's or a model's numeric confidence with.
pub const CONFIDENCE_LEVEL_FLOORS: [(ConfidenceLevel, f64); 3] =
    [(ConfidenceLevel::High, 0.75), (ConfidenceLevel::Medium, 0.5), (ConfidenceLevel::Low, 0.25)];

impl ConfidenceLevel {
    /// The level an answer gets when its agent names none: a complete answer is `HIGH`, a
    /// partial one `MEDIUM`.
    pub fn for_status(status: ResponseStatus) -> Self {
        match status {
            ResponseStatus::Success => Self::High,
            ResponseStatus::Partial => Self::Medium,
        }
    }

    /// The level of a score between 0 and 1 (clamped; NaN is `SPECULATIVE`): `HIGH` from 0.75,
    /// `MEDIUM` from 0.5, `LOW` from 0.25, `SPECULATIVE` below.
    pub fn from_score(score: f64) -> Self {
        let score = if score.is_nan() { 0.0 } else { score.clamp(0.0, 1.0) };
        CONFIDENCE_LEVEL_FLOORS.iter().find(|(_, floor)| score >= *floor).map_or(Self::Speculative, |(level, _)| *level)
    }

    /// This level lowered by `steps` (never below `SPECULATIVE`).
    pub fn lowered(self, steps: usize) -> Self {
        const ORDER: [ConfidenceLevel; 4] =
            [ConfidenceLevel::High, ConfidenceLevel::Medium, ConfidenceLevel::Low, ConfidenceLevel::Speculative];
        // The enum lists levels from the highest down, as ORDER does: a level's number is its place.
        ORDER[(self as usize).saturating_add(steps).min(ORDER.len() - 1)]
    }

    /// The lower of the two levels.
    pub fn at_most(self, cap: Self) -> Self {
        // The enum lists levels from the highest down: the lower level is the greater variant.
        if (self as u8) < (cap as u8) { cap } else { self }
    }
}

/// Answer of `POST /tasks/send`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResponse {
    pub id: String,
    pub status: ResponseStatus,
    /// Required by seed 003 for SUCCESS and PARTIAL; answers from older agents lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence_level: Option<ConfidenceLevel>,
    /// The request id of the call, echoed (seed 003); also in `metadata`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The agent's reply, one message with role `agent`.
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    pub metadata: ResponseMetadata,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_the_seed_example_and_extracts_text_and_data() {
        let task: TaskRequest = serde_json::from_value(json!({
            "id": "task_uuid",
            "messages": [{"role": "user", "parts": [
                {"type": "text", "text": "User query or instruction"},
                {"type": "data", "data": {"key": "value", "additional_context": {}}}
            ]}]
        }))
        .unwrap();
        assert_eq!(task.id.as_deref(), Some("task_uuid"));
        let message = task.last_user_message().unwrap();
        assert_eq!(message.text(), "User query or instruction");
        assert_eq!(message.data().get("key"), Some(&json!("value")));
    }

    #[test]
    fn round_trips_through_json() {
        let task = TaskRequest::from_text(Some("t1".into()), "robots", Some(json!({"top_k": 5})));
        let back: TaskRequest = serde_json::from_str(&serde_json::to_string(&task).unwrap()).unwrap();
        assert_eq!(back, task);
    }

    #[test]
    fn later_data_keys_win_and_non_objects_are_ignored() {
        let message = Message {
            role: Role::User,
            parts: vec![
                Part::Data { data: json!({"a": 1, "b": 1}) },
                Part::Data { data: json!([1, 2]) },
                Part::Data { data: json!({"b": 2}) },
            ],
        };
        assert_eq!(Value::Object(message.data()), json!({"a": 1, "b": 2}));
        assert_eq!(message.text(), "");
    }

    #[test]
    fn rejects_tasks_without_a_usable_user_message() {
        let empty = TaskRequest { id: None, messages: vec![], metadata: Map::new() };
        assert_eq!(empty.last_user_message(), Err(TaskShapeError::NoMessages));
        let agent_only = TaskRequest {
            id: None,
            messages: vec![Message { role: Role::Agent, parts: vec![] }],
            metadata: Map::new(),
        };
        assert_eq!(agent_only.last_user_message(), Err(TaskShapeError::NoUserMessage));
        let no_parts =
            TaskRequest { id: None, messages: vec![Message { role: Role::User, parts: vec![] }], metadata: Map::new() };
        assert_eq!(no_parts.last_user_message(), Err(TaskShapeError::EmptyUserMessage));
        // The words a caller reads in the error body.
        assert_eq!(TaskShapeError::NoMessages.to_string(), "the task has no messages");
        assert_eq!(TaskShapeError::NoUserMessage.to_string(), "the task has no message with role \"user\"");
        assert_eq!(TaskShapeError::EmptyUserMessage.to_string(), "the last user message has no parts");
    }

    #[test]
    fn scores_map_to_levels_and_levels_lower() {
        use ConfidenceLevel::*;
        let table = [(1.0, High), (0.75, High), (0.74, Medium), (0.5, Medium), (0.3, Low), (0.1, Speculative)];
        for (score, level) in table {
            assert_eq!(ConfidenceLevel::from_score(score), level, "{score}");
        }
        assert_eq!(ConfidenceLevel::from_score(7.0), High, "clamped");
        assert_eq!(ConfidenceLevel::from_score(-1.0), Speculative, "clamped");
        assert_eq!(ConfidenceLevel::from_score(f64::NAN), Speculative);
        assert_eq!(High.lowered(0), High);
        assert_eq!(High.lowered(2), Low);
        assert_eq!(Medium.lowered(9), Speculative);
        assert_eq!(Medium.lowered(1), Low);
        assert_eq!(Speculative.lowered(1), Speculative);
        assert_eq!(Low.lowered(usize::MAX), Speculative);
        assert_eq!(High.at_most(Medium), Medium);
        assert_eq!(Low.at_most(Medium), Low);
    }

    #[test]
    fn unknown_part_type_is_a_deserialization_error() {
        let err = serde_json::from_value::<Part>(json!({"type": "video", "url": "x"})).unwrap_err();
        assert!(err.to_string().contains("unknown variant"), "{err}");
    }
}
