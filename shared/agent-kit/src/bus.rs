//! Every kit agent on the conversation bus (seed 001): with a `bus` section in its configuration
//! it consumes its own topic, `{agent name}-{instance id}`, answering each new message from
//! someone else with the same handler that answers `POST /tasks/send`, so a query arriving over
//! the bus gets the answer it would get over HTTP. The role-relative conversation becomes the
//! task's messages (`assistant` as the agent's own, `user` as everyone else's).

use std::pin::Pin;
use std::sync::Arc;

use mesh_bus::{
    Answerer, BusConfig, BusError, BusRecord, ChatMessage, ConversationJoin, Participant, ParticipantSettings, Role,
    agent_id,
};
use mesh_client::CallScope;
use mesh_docmem::Node;
use mesh_protocol::call::CallContext;
use mesh_protocol::seed::{self, Part};
use serde_json::Map;
use tokio::sync::watch;

use crate::agent::{AgentHandler, TaskInput};
use crate::error::AgentError;

/// A shared handler is a handler: the HTTP routes and the bus answer through one instance.
impl<H: AgentHandler> AgentHandler for Arc<H> {
    async fn handle(&self, task: TaskInput) -> Result<crate::AgentReply, AgentError> {
        self.as_ref().handle(task).await
    }

    fn circuits(&self) -> Vec<mesh_client::CircuitReport> {
        self.as_ref().circuits()
    }
}

/// An agent's bus participant, ready to run beside its HTTP server.
pub struct BusRunner {
    agent_id: String,
    join: ConversationJoin,
    run: Pin<Box<dyn Future<Output = ()> + Send>>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for BusRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusRunner").field("agent_id", &self.agent_id).finish_non_exhaustive()
    }
}

impl BusRunner {
    /// Opens the configured bus and docmem for the agent named `agent_name`.
    pub async fn open<H: AgentHandler>(config: &BusConfig, agent_name: &str, handler: H) -> Result<Self, BusError> {
        let (bus, docmem) = mesh_bus::open_bus(config).await?;
        let id = agent_id(agent_name, &config.instance_id);
        let settings = ParticipantSettings {
            agent_id: id.clone(),
            topic: mesh_bus::agent_topic(&id),
            service: agent_name.to_owned(),
            cache_conversations_max: config.cache_conversations_max()?,
        };
        let join = ConversationJoin::new(bus.clone(), docmem.clone(), &id, &settings.topic);
        let answerer = Arc::new(HandlerAnswerer { agent: agent_name.to_owned(), handler });
        let participant = Participant::new(settings, bus, docmem, answerer);
        let (stop, mut stopped) = watch::channel(false);
        let run = Box::pin(participant.run_until(async move {
            let _ = stopped.wait_for(|stopped| *stopped).await;
        }));
        Ok(Self { agent_id: id, join, run, stop })
    }

    /// What lets the agent's HTTP turns join the conversations on its topic.
    pub fn join(&self) -> ConversationJoin {
        self.join.clone()
    }

    /// Runs the participant until [`BusStop::stop`].
    pub fn spawn(self) -> BusStop {
        tracing::info!(agent = %self.agent_id, "consuming the agent's bus topic");
        BusStop { task: tokio::spawn(self.run), stop: self.stop }
    }
}

/// Stops a running participant.
#[derive(Debug)]
pub struct BusStop {
    task: tokio::task::JoinHandle<()>,
    stop: watch::Sender<bool>,
}

impl BusStop {
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Answers bus messages with an agent's handler.
struct HandlerAnswerer<H> {
    agent: String,
    handler: H,
}

impl<H: AgentHandler> Answerer for HandlerAnswerer<H> {
    async fn answer(
        &self,
        record: &BusRecord,
        node: &Node,
        messages: Vec<ChatMessage>,
    ) -> Result<Option<String>, BusError> {
        let task = TaskInput {
            task_id: node.id.clone(),
            request_id: record.correlation_id.clone(),
            text: node.content.clone(),
            data: Map::new(),
            messages: messages.into_iter().map(seed_message).collect(),
            // The conversation's tenant (the user's who opened it) goes on with every call made
            // for this answer, as it does for a user's HTTP task.
            call: CallScope::received(
                self.agent.as_str(),
                CallContext { tenant: Some(node.tenant.clone()).filter(|t| !t.is_empty()), ..CallContext::default() },
            ),
            // Bus conversations are not link messages: no link context travels in their records.
            link: None,
        };
        // A failed task is still an answer: the sender reads why, as an HTTP caller would.
        let text = match self.handler.handle(task).await {
            Ok(reply) => plain_text(&reply.parts, &reply.warnings),
            Err(error) => format!("error: {error}"),
        };
        Ok(Some(text))
    }
}

pub(crate) fn seed_message(message: ChatMessage) -> seed::Message {
    let role = match message.role {
        Role::User => seed::Role::User,
        Role::Assistant => seed::Role::Agent,
    };
    seed::Message { role, parts: vec![Part::Text { text: message.content }] }
}

/// Docmem content is plain text: text parts as they are, data parts as their JSON text unless
/// the reply has text (then the text is for people and the data for programs, as the
/// orchestrator's answer), and warnings of a partial answer after them.
pub fn plain_text(parts: &[Part], warnings: &[String]) -> String {
    let has_text = parts.iter().any(|part| matches!(part, Part::Text { .. }));
    let mut lines: Vec<String> = parts
        .iter()
        .filter_map(|part| match part {
            Part::Text { text } => Some(text.clone()),
            Part::Data { .. } if has_text => None,
            Part::Data { data } => Some(data.to_string()),
        })
        .collect();
    lines.extend(warnings.iter().map(|w| format!("warning: {w}")));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use mesh_client::{CircuitReport, CircuitWord};

    use super::*;

    /// A handler calling one agent, whose circuit is open.
    struct Calling;

    impl AgentHandler for Calling {
        async fn handle(&self, _: TaskInput) -> Result<crate::AgentReply, AgentError> {
            Err(AgentError::Unavailable("not asked here".into()))
        }

        fn circuits(&self) -> Vec<CircuitReport> {
            vec![CircuitReport { agent: "search".into(), endpoint: "http://search/".into(), state: CircuitWord::Open }]
        }
    }

    #[test]
    fn a_shared_handler_reports_its_circuits() {
        let circuits = Arc::new(Calling).circuits();
        assert_eq!(
            circuits.iter().map(|c| (c.agent.as_str(), c.state)).collect::<Vec<_>>(),
            [("search", CircuitWord::Open)]
        );
    }

    #[test]
    fn replies_become_plain_text() {
        let parts = [Part::Text { text: "hello".into() }, Part::Data { data: serde_json::json!({"a": 1}) }];
        assert_eq!(plain_text(&parts, &["slow".into()]), "hello\nwarning: slow", "the text stands for the data");
        assert_eq!(plain_text(&parts[1..], &[]), "{\"a\":1}", "data alone is shown as JSON");
        assert_eq!(seed_message(ChatMessage { role: Role::Assistant, content: "x".into() }).role, seed::Role::Agent);
    }
}
