//! The A2A conformance kit's example agent (a2aproject/a2a-tck, `scenarios/*.feature`): what it
//! does depends on the prefix of the message id (`tck-complete-task-...`,
//! `tck-input-required-...`, ...). Any other message is echoed (`echo: <text>` as an artifact),
//! and `interop-long-running-...` keeps working until the task is canceled, for the official SDK's
//! interop checks. Served by this crate's binary (`src/main.rs`); `scripts/tck.sh` runs the kit against it,
//! and against each [`Variant`], which shows the kit a capability the standard agent lacks so that
//! its tests of that capability run.

use std::time::Duration;

use mesh_agent_kit::AgentConfig;
use mesh_protocol::a2a::v1::{AgentCard, AgentExtension, AgentSkill, Artifact, Part, PartContent, TaskState};
use serde_json::json;

use mesh_a2a_server::{TaskClosed, TaskEvents, TaskHandler, Turn};

/// The extension the kit's required-extension tests look for on the card (CORE-CAP-004).
pub const TCK_REQUIRED_EXTENSION_URI: &str = "urn:a2a:tck:required-extension";
/// Id of the skill the extended-card variant shows authenticated callers only.
pub const TCK_EXTENDED_SKILL_ID: &str = "tck-extended";

/// A capability the conformance agent shows the kit, beside the standard agent's (which streams,
/// offers push notifications and neither an extended card nor a required extension). The kit
/// runs its tests of a capability only when the card declares it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    #[default]
    Standard,
    /// An authenticated extended card with one more skill; callers open it with the configured
    /// `extended_card_token` (or their mesh credentials when access control is on).
    ExtendedCard,
    /// Requires [`TCK_REQUIRED_EXTENSION_URI`]: a call that does not activate it is refused.
    RequiredExtension,
    /// Says `streaming: false`: the streaming methods are refused.
    NoStreaming,
    /// Offers no push notifications: the push notification config methods are refused.
    NoPushNotifications,
}

impl Variant {
    /// Turns the standard agent's card and configuration into this variant's.
    pub fn apply(self, card: &mut AgentCard, config: &mut AgentConfig) {
        match self {
            Self::Standard => {}
            Self::ExtendedCard => config.extended_skills.push(AgentSkill {
                id: TCK_EXTENDED_SKILL_ID.into(),
                name: "TCK extended".into(),
                description: "Shown to authenticated callers only, on the extended agent card".into(),
                tags: vec!["tck".into()],
                examples: Vec::new(),
                input_modes: Vec::new(),
                output_modes: Vec::new(),
                security_requirements: None,
                security: None,
            }),
            Self::RequiredExtension => config.extensions.push(AgentExtension {
                uri: TCK_REQUIRED_EXTENSION_URI.into(),
                description: Some("Every call must activate it (A2A-Extensions)".into()),
                required: true,
                params: None,
            }),
            Self::NoStreaming => card.capabilities.streaming = Some(false),
            Self::NoPushNotifications => config.push_notifications = false,
        }
    }
}

/// How long `test-resubscribe-message-id` works: twice the kit's 2 s streaming timeout, so a
/// client can drop its stream and resubscribe before the end.
const RESUBSCRIBE_WORK_MS: u64 = 4_000;
/// Longest an `interop-long-running` task waits for its cancellation before failing.
const LONG_RUNNING_LIMIT_MS: u64 = 300_000;

/// What a message id asks for, by prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    CompleteTask,
    ArtifactText,
    ArtifactFileUrl,
    ArtifactFile,
    ArtifactData,
    MessageResponse,
    InputRequired,
    RejectTask,
    /// Working, one text artifact, completed.
    StreamText(&'static str),
    StreamStatusOnly,
    StreamFile,
    StreamChunked,
    Resubscribe,
    LongRunning,
    Echo,
}

/// Prefixes, longest first where one starts another (`tck-artifact-file-url` before
/// `tck-artifact-file`).
const SCENARIOS: &[(&str, Scenario)] = &[
    ("tck-complete-task", Scenario::CompleteTask),
    ("tck-artifact-text", Scenario::ArtifactText),
    ("tck-artifact-file-url", Scenario::ArtifactFileUrl),
    ("tck-artifact-file", Scenario::ArtifactFile),
    ("tck-artifact-data", Scenario::ArtifactData),
    ("tck-message-response", Scenario::MessageResponse),
    ("tck-input-required", Scenario::InputRequired),
    ("tck-reject-task", Scenario::RejectTask),
    ("tck-stream-001", Scenario::StreamText("Stream hello from TCK")),
    ("tck-stream-002", Scenario::StreamStatusOnly),
    ("tck-stream-003", Scenario::StreamText("Stream task lifecycle")),
    ("tck-stream-ordering-001", Scenario::StreamText("Ordered output")),
    ("tck-stream-artifact-text", Scenario::StreamText("Streamed text content")),
    ("tck-stream-artifact-file", Scenario::StreamFile),
    ("tck-stream-artifact-chunked", Scenario::StreamChunked),
    ("test-resubscribe-message-id", Scenario::Resubscribe),
    ("interop-long-running", Scenario::LongRunning),
];

fn scenario(message_id: &str) -> Scenario {
    SCENARIOS.iter().find(|(prefix, _)| message_id.starts_with(prefix)).map_or(Scenario::Echo, |(_, s)| *s)
}

fn artifact(parts: Vec<Part>) -> Artifact {
    Artifact {
        artifact_id: uuid::Uuid::new_v4().to_string(),
        name: None,
        description: None,
        parts,
        metadata: None,
        extensions: None,
    }
}

fn file_part(content: PartContent) -> Part {
    Part { content, metadata: None, filename: Some("output.txt".into()), media_type: Some("text/plain".into()) }
}

/// The conformance kit's example agent: plays each scenario by message-id prefix.
#[derive(Debug, Clone, Copy, Default)]
pub struct TckAgent;

impl TaskHandler for TckAgent {
    async fn run(&self, turn: Turn, events: TaskEvents) {
        // Every event after a cancellation is refused (`TaskClosed`): the task is already over.
        let _ = play(&turn, &events).await;
    }
}

async fn play(turn: &Turn, events: &TaskEvents) -> Result<(), TaskClosed> {
    let complete = |text: Option<String>| async move { events.status(TaskState::Completed, text.as_deref()).await };
    match scenario(&turn.message.message_id) {
        Scenario::CompleteTask => complete(Some("Hello from TCK".into())).await,
        Scenario::ArtifactText => {
            events.artifact(artifact(vec![Part::text("Generated text content")]), false, true).await?;
            complete(None).await
        }
        Scenario::ArtifactFileUrl => {
            let part = file_part(PartContent::Url("https://example.com/output.txt".into()));
            events.artifact(artifact(vec![part]), false, true).await?;
            complete(None).await
        }
        Scenario::ArtifactFile => {
            // "dGNr" is "tck" in base64.
            events.artifact(artifact(vec![file_part(PartContent::Raw("dGNr".into()))]), false, true).await?;
            complete(None).await
        }
        Scenario::ArtifactData => {
            events.artifact(artifact(vec![Part::data(json!({"key": "value", "count": 42}))]), false, true).await?;
            complete(None).await
        }
        Scenario::MessageResponse => {
            let mut message = events.agent_message("Direct message response");
            // No task comes of it, so the message names none.
            message.task_id = None;
            events.reply(message)
        }
        Scenario::InputRequired => events.status(TaskState::InputRequired, None).await,
        Scenario::RejectTask => events.status(TaskState::Rejected, Some("rejected")).await,
        Scenario::StreamText(text) => {
            events.status(TaskState::Working, None).await?;
            events.artifact(artifact(vec![Part::text(text)]), false, true).await?;
            complete(None).await
        }
        Scenario::StreamStatusOnly => complete(None).await,
        Scenario::StreamFile => {
            events.status(TaskState::Working, None).await?;
            events.artifact(artifact(vec![file_part(PartContent::Raw("dGNr".into()))]), false, true).await?;
            complete(None).await
        }
        Scenario::StreamChunked => {
            events.status(TaskState::Working, None).await?;
            let first = artifact(vec![Part::text("chunk-1 ")]);
            let second = Artifact { parts: vec![Part::text("chunk-2")], ..first.clone() };
            events.artifact(first, false, false).await?;
            events.artifact(second, true, true).await?;
            complete(None).await
        }
        Scenario::Resubscribe => {
            events.status(TaskState::Working, None).await?;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(RESUBSCRIBE_WORK_MS)) => complete(None).await,
                () = turn.cancellation.cancelled() => Ok(()),
            }
        }
        Scenario::LongRunning => {
            events.status(TaskState::Working, Some("working until canceled")).await?;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(LONG_RUNNING_LIMIT_MS)) => {
                    events.status(TaskState::Failed, Some("nobody canceled the task in time")).await
                }
                () = turn.cancellation.cancelled() => Ok(()),
            }
        }
        Scenario::Echo => {
            let text: Vec<&str> = turn.message.parts.iter().filter_map(Part::as_text).collect();
            let echo = format!("echo: {}", text.join("\n"));
            events.artifact(artifact(vec![Part::text(echo)]), false, true).await?;
            complete(Some(format!("Unhandled messageId prefix: {}", turn.message.message_id))).await
        }
    }
}

/// Its card (interfaces are filled in when it is served).
pub fn card() -> Result<AgentCard, serde_json::Error> {
    serde_json::from_value(json!({
        "name": "tck",
        "description": "The A2A conformance kit's scenarios, played on the mesh agent kit",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [{"id": "tck", "name": "TCK conformance", "description": "Plays the conformance kit's scenarios", "tags": ["tck"]}]
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_wins() {
        assert_eq!(scenario("tck-artifact-file-url-1234"), Scenario::ArtifactFileUrl);
        assert_eq!(scenario("tck-artifact-file-1234"), Scenario::ArtifactFile);
        assert_eq!(scenario("tck-dm-test-001-1234"), Scenario::Echo);
    }
}
