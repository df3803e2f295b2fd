//! A2A 0.3 over HTTP+JSON: the ProtoJSON rendering of the 0.3 `a2a.proto`, as the official SDK
//! (a2a-sdk 1.3.0) serves and sends it at `/v1/message:send`, `/v1/message:stream`,
//! `/v1/tasks/{id}`, `/v1/tasks/{id}:cancel` and `/v1/tasks/{id}:subscribe`, and conversions
//! between it and the 1.0 model in [`super::v1`].
//!
//! It is a third spelling, neither the 0.3 JSON-RPC JSON of [`super::v03`] nor 1.0 JSON. What the
//! captures (`tests/fixtures/v03_rest_*.json`) show:
//! - no `kind`: unions wrap their member in one named key, `{"task": ..}` or `{"message": ..}` for
//!   a send, plus `{"statusUpdate": ..}` / `{"artifactUpdate": ..}` in a stream;
//! - a message's parts are under `content` (an artifact's stay under `parts`); a part is
//!   `{"text": ..}`, `{"file": {"fileWithUri" | "fileWithBytes", "mimeType", "name"}}` or
//!   `{"data": {"data": {..}}}`, each with an optional `metadata`;
//! - roles `ROLE_USER` / `ROLE_AGENT`, states `TASK_STATE_*` with 0.3's `TASK_STATE_CANCELLED`;
//! - proto3 defaults are left out: `final`, `append`, `lastChunk` and `blocking` appear only when
//!   true, empty lists and strings not at all;
//! - the SDK client writes proto field names (`{"request": {"message_id": .., "content": ..}}`),
//!   the server answers with JSON names (`messageId`, and `message` for the fields the proto calls
//!   `request`, `msg` and `update`). Protobuf's parser takes either, so every field here accepts
//!   both and serializes the JSON name;
//! - `fileWithBytes` is a proto `bytes` field holding the 0.3 `bytes` string, which is itself
//!   base64, so the content is base64-encoded twice on the wire. It is decoded once on parse, so
//!   [`FileSource::FileWithBytes`] holds the same text as 1.0's `raw`.
//!
//! Conversions go through [`super::v03`], as the SDK's go through its 0.3 model, so both 0.3
//! bindings render a 1.0 value alike and drop what [`super::v03`] drops (`filename` / `mediaType`
//! on text and data parts; non-object `data` is wrapped). In addition:
//! - `referenceTaskIds` is dropped: the 0.3 proto has no such field;
//! - empty `extensions` lists and empty part names are dropped, proto3 cannot tell them from
//!   absent;
//! - `final` is true on terminal states only, as the SDK sets it: a 0.3 stream that stops at
//!   `input-required` ends without a `final` event;
//! - a `configuration` without `blocking` asks for a non-blocking send (proto3 reads the absent
//!   bool as false; the SDK client sends `"configuration": {}` for it), while a request without
//!   `configuration` blocks; `historyLength` 0 means no limit, as in 0.3 JSON-RPC.

use serde::{Deserialize, Serialize};

use super::v1::{self, JsonObject};
use super::v03;

/// Lifecycle state of a [`Task`], the 0.3 proto enum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaskState {
    /// Proto3's default, hence also what an absent `state` means.
    #[default]
    #[serde(rename = "TASK_STATE_UNSPECIFIED")]
    Unspecified,
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Spelled with two Ls in 0.3, unlike 1.0's `TASK_STATE_CANCELED`.
    #[serde(rename = "TASK_STATE_CANCELLED")]
    Cancelled,
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

/// Where a file part's content is. The two keys of the proto `oneof file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FileSource {
    #[serde(alias = "file_with_uri")]
    FileWithUri(String),
    /// The 0.3 `bytes` text: the file content in base64, exactly 1.0's `raw`. The wire carries
    /// that text base64-encoded once more (see the module doc).
    #[serde(alias = "file_with_bytes", with = "proto_bytes")]
    FileWithBytes(String),
}

/// The `file` object of a part (proto `FilePart`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilePart {
    #[serde(flatten)]
    pub source: FileSource,
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "mime_type")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The `data` object of a part (proto `DataPart`): a wrapper around the JSON object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataPart {
    pub data: JsonObject,
}

/// The proto `oneof part`: exactly one of these keys appears in the part object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PartContent {
    Text(String),
    File(FilePart),
    Data(DataPart),
}

/// One piece of message or artifact content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    #[serde(flatten)]
    pub content: PartContent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// One unit of communication. `role` reuses [`v1::Role`], spelled the same in both protos;
/// `ROLE_UNSPECIFIED` is refused as in 1.0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    #[serde(alias = "message_id")]
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "context_id")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "task_id")]
    pub task_id: Option<String>,
    pub role: v1::Role,
    /// The parts (proto field `content`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

/// An output of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    #[serde(alias = "artifact_id")]
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

/// Current status of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    #[serde(default)]
    pub state: TaskState,
    /// Proto field `update`, JSON name `message`.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "update")]
    pub message: Option<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// The unit of work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    #[serde(default, alias = "context_id")]
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Streaming event: the task's status changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    #[serde(alias = "task_id")]
    pub task_id: String,
    #[serde(alias = "context_id")]
    pub context_id: String,
    pub status: TaskStatus,
    /// The last event of the stream; omitted when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub r#final: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Streaming event: an artifact was produced or extended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    #[serde(alias = "task_id")]
    pub task_id: String,
    #[serde(alias = "context_id")]
    pub context_id: String,
    pub artifact: Artifact,
    /// Omitted when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    /// Omitted when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not", alias = "last_chunk")]
    pub last_chunk: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// How a send wants to be served.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    #[serde(default, skip_serializing_if = "Vec::is_empty", alias = "accepted_output_modes")]
    pub accepted_output_modes: Vec<String>,
    /// The same object as in 0.3 JSON-RPC, whose field names are all single words.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "push_notification")]
    pub push_notification: Option<v03::PushNotificationConfig>,
    /// Most recent history messages to return; 0, like absence, means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "history_length")]
    pub history_length: Option<i32>,
    /// Wait for a terminal or interrupted state. Absent means false (see the module doc).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blocking: bool,
}

/// Body of `POST /v1/message:send` and `POST /v1/message:stream`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SendMessageRequest {
    /// Proto field `request`, JSON name `message`.
    #[serde(alias = "request")]
    pub message: Message,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<SendMessageConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// Answer of `POST /v1/message:send`: `{"task": ..}` or `{"message": ..}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SendMessageResponse {
    Task(Task),
    /// Proto field `msg`, JSON name `message`.
    #[serde(alias = "msg")]
    Message(Message),
}

/// A task's webhook at `/v1/tasks/{id}/pushNotificationConfigs`: the resource name
/// `tasks/{taskId}/pushNotificationConfigs/{configId}` and the 0.3 config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPushNotificationConfig {
    #[serde(default)]
    pub name: String,
    #[serde(alias = "push_notification_config")]
    pub push_notification_config: v03::PushNotificationConfig,
}

/// Body of `POST /v1/tasks/{id}/pushNotificationConfigs` (the SDK writes proto field names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateTaskPushNotificationConfigRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "config_id")]
    pub config_id: Option<String>,
    pub config: TaskPushNotificationConfig,
}

impl CreateTaskPushNotificationConfigRequest {
    /// The 1.0 config for task `task_id`: the config's own id, else the request's `configId`.
    pub fn into_v1(self, task_id: &str) -> v1::TaskPushNotificationConfig {
        let mut config = self.config.push_notification_config;
        config.id = config.id.filter(|id| !id.is_empty()).or(self.config_id).filter(|id| !id.is_empty());
        v1::TaskPushNotificationConfig { task_id: Some(task_id.to_owned()), ..config.into() }
    }
}

impl From<v1::TaskPushNotificationConfig> for TaskPushNotificationConfig {
    fn from(config: v1::TaskPushNotificationConfig) -> Self {
        let name = format!(
            "tasks/{}/pushNotificationConfigs/{}",
            config.task_id.as_deref().unwrap_or_default(),
            config.id.as_deref().unwrap_or_default()
        );
        Self { name, push_notification_config: config.into() }
    }
}

/// One event (one SSE `data:`) of `/v1/message:stream` and `/v1/tasks/{id}:subscribe`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    Task(Task),
    /// Proto field `msg`, JSON name `message`.
    #[serde(alias = "msg")]
    Message(Message),
    #[serde(alias = "status_update")]
    StatusUpdate(TaskStatusUpdateEvent),
    #[serde(alias = "artifact_update")]
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// The outer base64 layer of `fileWithBytes`: ProtoJSON's encoding of a `bytes` field.
mod proto_bytes {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn serialize<S: Serializer>(text: &str, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&encode(text.as_bytes()))
    }

    /// Fails, as the SDK does, when the field is not base64 or does not decode to text.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        let wire = String::deserialize(deserializer)?;
        let bytes = decode(&wire).ok_or_else(|| D::Error::custom("fileWithBytes is not base64"))?;
        String::from_utf8(bytes).map_err(|_| D::Error::custom("fileWithBytes does not hold base64 text"))
    }

    /// Standard alphabet, padded, as protobuf writes it.
    pub(super) fn encode(bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let group =
                chunk.iter().enumerate().fold(0u32, |group, (i, &byte)| group | u32::from(byte) << (16 - 8 * i));
            for i in 0..4 {
                // A chunk of n bytes fills n + 1 sextets; the rest of the quad is padding.
                if i <= chunk.len() {
                    out.push(char::from(ALPHABET[(group >> (18 - 6 * i) & 0x3f) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    /// Standard or URL-safe alphabet, padding optional: every form protobuf's parser accepts.
    pub(super) fn decode(text: &str) -> Option<Vec<u8>> {
        let digits = text.trim_end_matches('=').as_bytes();
        if digits.len() % 4 == 1 {
            return None;
        }
        let mut out = Vec::with_capacity(digits.len() * 3 / 4);
        for chunk in digits.chunks(4) {
            let mut group = 0u32;
            for (i, &digit) in chunk.iter().enumerate() {
                group |= sextet(digit)? << (18 - 6 * i);
            }
            // n digits carry n - 1 whole bytes, the high ones of the 24-bit group.
            out.extend_from_slice(&group.to_be_bytes()[1..chunk.len()]);
        }
        Some(out)
    }

    fn sextet(digit: u8) -> Option<u32> {
        let value = match digit {
            b'A'..=b'Z' => digit - b'A',
            b'a'..=b'z' => digit - b'a' + 26,
            b'0'..=b'9' => digit - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        Some(u32::from(value))
    }
}

impl From<v03::TaskState> for TaskState {
    fn from(state: v03::TaskState) -> Self {
        match state {
            v03::TaskState::Submitted => Self::Submitted,
            v03::TaskState::Working => Self::Working,
            v03::TaskState::InputRequired => Self::InputRequired,
            v03::TaskState::Completed => Self::Completed,
            v03::TaskState::Canceled => Self::Cancelled,
            v03::TaskState::Failed => Self::Failed,
            v03::TaskState::Rejected => Self::Rejected,
            v03::TaskState::AuthRequired => Self::AuthRequired,
            v03::TaskState::Unknown => Self::Unspecified,
        }
    }
}

impl From<v03::Part> for Part {
    fn from(part: v03::Part) -> Self {
        let (content, metadata) = match part {
            v03::Part::Text { text, metadata } => (PartContent::Text(text), metadata),
            v03::Part::Data { data, metadata } => (PartContent::Data(DataPart { data }), metadata),
            v03::Part::File { file, metadata } => {
                let source = match file.source {
                    v03::FileSource::Bytes(bytes) => FileSource::FileWithBytes(bytes),
                    v03::FileSource::Uri(uri) => FileSource::FileWithUri(uri),
                };
                (PartContent::File(FilePart { source, mime_type: file.mime_type, name: file.name }), metadata)
            }
        };
        Self { content, metadata }
    }
}

impl From<Part> for v03::Part {
    fn from(part: Part) -> Self {
        let metadata = part.metadata;
        match part.content {
            PartContent::Text(text) => Self::Text { text, metadata },
            PartContent::Data(DataPart { data }) => Self::Data { data, metadata },
            PartContent::File(file) => {
                let source = match file.source {
                    FileSource::FileWithBytes(bytes) => v03::FileSource::Bytes(bytes),
                    FileSource::FileWithUri(uri) => v03::FileSource::Uri(uri),
                };
                // Proto3 writes an unset string as "", which 0.3 JSON-RPC leaves out.
                let non_empty = |value: Option<String>| value.filter(|value| !value.is_empty());
                Self::File {
                    file: v03::FileContent { source, name: non_empty(file.name), mime_type: non_empty(file.mime_type) },
                    metadata,
                }
            }
        }
    }
}

fn convert_all<T: Into<U>, U>(items: Vec<T>) -> Vec<U> {
    items.into_iter().map(Into::into).collect()
}

impl From<v03::Message> for Message {
    /// Drops `referenceTaskIds` and `kind`, which the 0.3 proto does not have.
    fn from(message: v03::Message) -> Self {
        Self {
            message_id: message.message_id,
            context_id: message.context_id,
            task_id: message.task_id,
            role: message.role.into(),
            content: convert_all(message.parts),
            metadata: message.metadata,
            extensions: message.extensions.unwrap_or_default(),
        }
    }
}

impl From<Message> for v03::Message {
    fn from(message: Message) -> Self {
        Self {
            kind: v03::MessageKind::Message,
            message_id: message.message_id,
            context_id: message.context_id,
            task_id: message.task_id,
            role: message.role.into(),
            parts: convert_all(message.content),
            metadata: message.metadata,
            extensions: Some(message.extensions).filter(|extensions| !extensions.is_empty()),
            reference_task_ids: None,
        }
    }
}

impl From<v1::Message> for Message {
    fn from(message: v1::Message) -> Self {
        v03::Message::from(message).into()
    }
}

impl From<v03::Artifact> for Artifact {
    fn from(artifact: v03::Artifact) -> Self {
        Self {
            artifact_id: artifact.artifact_id,
            name: artifact.name,
            description: artifact.description,
            parts: convert_all(artifact.parts),
            metadata: artifact.metadata,
            extensions: artifact.extensions.unwrap_or_default(),
        }
    }
}

impl From<v03::TaskStatus> for TaskStatus {
    fn from(status: v03::TaskStatus) -> Self {
        Self { state: status.state.into(), message: status.message.map(Into::into), timestamp: status.timestamp }
    }
}

impl From<v03::Task> for Task {
    fn from(task: v03::Task) -> Self {
        Self {
            id: task.id,
            context_id: task.context_id,
            status: task.status.into(),
            artifacts: convert_all(task.artifacts),
            history: convert_all(task.history),
            metadata: task.metadata,
        }
    }
}

impl From<v1::Task> for Task {
    /// The answer of `GET /v1/tasks/{id}` and `POST /v1/tasks/{id}:cancel`, and the `task` of a
    /// send or stream.
    fn from(task: v1::Task) -> Self {
        v03::Task::from(task).into()
    }
}

impl From<v1::TaskStatusUpdateEvent> for TaskStatusUpdateEvent {
    fn from(event: v1::TaskStatusUpdateEvent) -> Self {
        let state = event.status.state;
        Self {
            task_id: event.task_id,
            context_id: event.context_id,
            status: v03::TaskStatus::from(event.status).into(),
            r#final: state.is_terminal(),
            metadata: event.metadata,
        }
    }
}

impl From<v1::TaskArtifactUpdateEvent> for TaskArtifactUpdateEvent {
    fn from(event: v1::TaskArtifactUpdateEvent) -> Self {
        Self {
            task_id: event.task_id,
            context_id: event.context_id,
            artifact: v03::Artifact::from(event.artifact).into(),
            append: event.append,
            last_chunk: event.last_chunk,
            metadata: event.metadata,
        }
    }
}

impl From<v1::SendMessageResponse> for SendMessageResponse {
    fn from(response: v1::SendMessageResponse) -> Self {
        match response {
            v1::SendMessageResponse::Task(task) => Self::Task(task.into()),
            v1::SendMessageResponse::Message(message) => Self::Message(message.into()),
        }
    }
}

impl From<v1::StreamResponse> for StreamResponse {
    fn from(response: v1::StreamResponse) -> Self {
        match response {
            v1::StreamResponse::Task(task) => Self::Task(task.into()),
            v1::StreamResponse::Message(message) => Self::Message(message.into()),
            v1::StreamResponse::StatusUpdate(update) => Self::StatusUpdate(update.into()),
            v1::StreamResponse::ArtifactUpdate(update) => Self::ArtifactUpdate(update.into()),
        }
    }
}

impl From<SendMessageConfiguration> for v03::MessageSendConfiguration {
    /// `blocking` becomes explicit: here absence already means false.
    fn from(config: SendMessageConfiguration) -> Self {
        Self {
            accepted_output_modes: config.accepted_output_modes,
            blocking: Some(config.blocking),
            history_length: config.history_length,
            push_notification_config: config.push_notification,
        }
    }
}

impl From<SendMessageRequest> for v03::MessageSendParams {
    fn from(request: SendMessageRequest) -> Self {
        Self {
            message: request.message.into(),
            configuration: request.configuration.map(Into::into),
            metadata: request.metadata,
        }
    }
}

impl From<SendMessageRequest> for v1::SendMessageRequest {
    /// The body of `/v1/message:send|stream` as the server's request; `tenant` stays unset.
    fn from(request: SendMessageRequest) -> Self {
        v03::MessageSendParams::from(request).into()
    }
}

#[cfg(test)]
mod tests {
    use super::proto_bytes::{decode, encode};

    #[test]
    fn base64_encodes_with_padding_and_decodes_every_protobuf_form() {
        for (bytes, text) in [(&b""[..], ""), (b"f", "Zg=="), (b"fo", "Zm8="), (b"foo", "Zm9v"), (b"\xfb\xff", "+/8=")]
        {
            assert_eq!(encode(bytes), text);
            assert_eq!(decode(text).as_deref(), Some(bytes));
        }
        assert_eq!(decode("-_8").as_deref(), Some(&b"\xfb\xff"[..]), "URL-safe, unpadded");
        assert_eq!(decode("Zm9vY"), None, "a lone trailing digit");
        assert_eq!(decode("Zm9*"), None, "not in either alphabet");
    }

    fn create_request(own_id: Option<&str>, config_id: Option<&str>) -> super::CreateTaskPushNotificationConfigRequest {
        super::CreateTaskPushNotificationConfigRequest {
            parent: None,
            config_id: config_id.map(str::to_owned),
            config: super::TaskPushNotificationConfig {
                name: String::new(),
                push_notification_config: super::v03::PushNotificationConfig {
                    id: own_id.map(str::to_owned),
                    url: "http://hook.test/".into(),
                    token: Some("t".into()),
                    authentication: None,
                },
            },
        }
    }

    #[test]
    fn a_created_config_takes_its_own_id_else_the_requests_and_its_task_from_the_path() {
        for (own, request, expected) in [
            (Some("own"), Some("asked"), Some("own")),
            (Some(""), Some("asked"), Some("asked")),
            (None, Some("asked"), Some("asked")),
            (Some(""), Some(""), None),
            (None, None, None),
        ] {
            let config = create_request(own, request).into_v1("task-1");
            assert_eq!(config.id.as_deref(), expected, "own {own:?}, request {request:?}");
            assert_eq!(config.task_id.as_deref(), Some("task-1"));
            assert_eq!((config.url.as_str(), config.token.as_deref()), ("http://hook.test/", Some("t")));
        }
    }
}
