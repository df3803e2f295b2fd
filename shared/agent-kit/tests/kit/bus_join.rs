//! HTTP and bus turns of one conversation share one history: a real agent on port 0 with the
//! conversation bus (the embedded log in a SQLite file) answers a bus turn, then an A2A
//! `SendMessage` whose `contextId` is the conversation, then a bus turn again. Each turn's
//! handler sees every earlier turn, role-relative; docmem and the topic hold every message once.

use std::time::{Duration, Instant};

use mesh_agent_kit::{AgentApp, AgentConfig, AgentError, AgentHandler, AgentReply, TaskInput};
use mesh_bus::{ACTION_APPEND, BusConfig, BusRecord, ConversationBus, conversation_root_context};
use mesh_client::HttpClient;
use mesh_docmem::{Context, Docmem};
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::seed::{Part, Role};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(20);
/// The user on the bus: any sender that is not the agent.
const UI_AGENT_ID: &str = "ui-test";

/// Answers with the conversation it was given: one line per message, `role: text`.
struct Transcript;

impl AgentHandler for Transcript {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        let lines: Vec<String> = task
            .messages
            .iter()
            .map(|message| {
                let role = match message.role {
                    Role::User | Role::System => "user",
                    Role::Agent | Role::Assistant => "assistant",
                };
                format!("{role}: {}", message.text())
            })
            .collect();
        Ok(AgentReply { parts: vec![Part::Text { text: lines.join(" | ") }], ..AgentReply::default() })
    }
}

/// Answers with the tenant its calls would carry on.
struct TenantEcho;

impl AgentHandler for TenantEcho {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        let tenant = task.call.context().tenant.clone().unwrap_or_else(|| "(none)".into());
        Ok(AgentReply { parts: vec![Part::Text { text: format!("tenant {tenant}") }], ..AgentReply::default() })
    }
}

fn card() -> AgentCard {
    serde_json::from_value(json!({
        "name": "transcriber", "description": "repeats the conversation", "version": "1.0.0",
        "supportedInterfaces": [], "capabilities": {}, "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "transcribe", "name": "transcribe", "description": "repeats", "tags": ["test"]}]
    }))
    .unwrap()
}

struct Conversation {
    bus: std::sync::Arc<dyn ConversationBus>,
    docmem: Docmem,
    topic: String,
    root: String,
}

impl Conversation {
    /// A message from the UI agent on the bus.
    async fn say(&self, text: &str) -> String {
        let node = self.docmem.append_child(&self.root, &Context::agent_text(UI_AGENT_ID), text).await.unwrap();
        self.bus
            .produce(&self.topic, &BusRecord::message(UI_AGENT_ID, &self.root, &node.id, ACTION_APPEND))
            .await
            .unwrap();
        node.id
    }

    /// Waits until the conversation holds `count` messages, and returns them as `(sender, text)`.
    async fn messages(&self, count: usize) -> Vec<(String, String)> {
        let started = Instant::now();
        loop {
            let nodes = self.docmem.read_conversation(&self.root).await.unwrap();
            let messages: Vec<(String, String)> =
                nodes.iter().filter_map(|n| Some((n.context.agent_id()?.to_owned(), n.content.clone()))).collect();
            if messages.len() >= count {
                return messages;
            }
            assert!(started.elapsed() < DEADLINE, "{count} messages expected, have {messages:?}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Every record on the topic, in offset order.
    async fn records(&self) -> Vec<BusRecord> {
        let mut replay = self.bus.replay(&self.topic).await.unwrap();
        let mut records = Vec::new();
        while let Some(batch) = replay.next_batch().await.unwrap() {
            records.extend(batch.into_iter().map(|d| d.record));
        }
        records
    }
}

/// The embedded bus (a SQLite file in `data`) for the agent instance `instance_id`.
fn bus_in(data: &tempfile::TempDir, instance_id: &str) -> BusConfig {
    BusConfig {
        database_url: format!("sqlite://{}", data.path().join("bus.db").display()),
        instance_id: instance_id.into(),
        ..BusConfig::default()
    }
}

/// Serves a transcriber on port 0 with `bus` until the test ends; returns its URL.
async fn start_agent(bus: &BusConfig) -> String {
    start(bus, Transcript).await
}

/// Serves `handler` as the transcriber on port 0 with `bus` until the test ends; returns its URL.
async fn start(bus: &BusConfig, handler: impl AgentHandler) -> String {
    let config = AgentConfig {
        bus: Some(bus.clone()),
        task_store_url: Some("sqlite::memory:".into()),
        ..AgentConfig::default()
    };
    let app = AgentApp::build(&config, card(), handler, HttpClient::with_reqwest().unwrap()).await.unwrap();
    let url = app.url().to_owned();
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    url
}

async fn send_message(agent: &str, context_id: &str, message_id: &str, text: &str) -> Value {
    send_message_in(agent, None, context_id, message_id, text).await
}

/// `SendMessage` in `tenant` (an open agent takes the tenant a request names).
async fn send_message_in(agent: &str, tenant: Option<&str>, context_id: &str, message_id: &str, text: &str) -> Value {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"tenant": tenant, "message": {
            "messageId": message_id, "contextId": context_id, "role": "ROLE_USER", "parts": [{"text": text}]
        }}
    });
    let response = reqwest::Client::new().post(agent).header("A2A-Version", "1.0").json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// The text of the reply artifact of a completed task.
fn answer_of(response: &Value) -> &str {
    let task = &response["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{response}");
    task["artifacts"][0]["parts"][0]["text"].as_str().unwrap_or_else(|| panic!("no text answer in {response}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_bus_turns_share_one_history() {
    let data = tempfile::tempdir().unwrap();
    let bus_config = bus_in(&data, "7");
    let agent = start_agent(&bus_config).await;
    let me = mesh_bus::agent_id("transcriber", "7");
    let (bus, docmem) = mesh_bus::open_bus(&bus_config).await.unwrap();
    let topic = mesh_bus::agent_topic(&me);
    bus.ensure_topic(&topic).await.unwrap();
    let root = docmem.create_root("", &conversation_root_context(&topic), "").await.unwrap().id;
    let conversation = Conversation { bus, docmem, topic, root: root.clone() };

    // A bus turn: the agent's participant answers it.
    conversation.say("first on the bus").await;
    let after_bus = conversation.messages(2).await;
    assert_eq!(after_bus[1], (me.clone(), "user: first on the bus".into()));

    // An HTTP turn in the same conversation sees the bus turn, and joins the conversation.
    let response = send_message(&agent, &root, "m-http-1", "then over HTTP").await;
    assert_eq!(
        answer_of(&response),
        "user: first on the bus | assistant: user: first on the bus | user: then over HTTP"
    );
    assert_eq!(response["result"]["task"]["contextId"], root.as_str());
    let after_http = conversation.messages(4).await;
    assert_eq!(after_http[2], ("a2a-client".into(), "then over HTTP".into()));
    assert_eq!(after_http[3].0, me);

    // The next bus turn sees the HTTP turn.
    conversation.say("back on the bus").await;
    let after = conversation.messages(6).await;
    let expected = format!(
        "user: first on the bus | assistant: {} | user: then over HTTP | assistant: {} | user: back on the bus",
        after[1].1, after[3].1
    );
    assert_eq!(after[5].1, expected, "the five messages, role-relative");

    // Every message once in docmem and once on the topic: the participant did not answer the
    // HTTP turn a second time.
    let records = conversation.records().await;
    let mut nodes: Vec<&str> = records.iter().map(|r| r.node_id.as_str()).collect();
    let produced = nodes.len();
    nodes.sort_unstable();
    nodes.dedup();
    assert_eq!((produced, nodes.len()), (6, 6), "{records:?}");
    let ids: Vec<String> =
        conversation.docmem.read_conversation(&root).await.unwrap().into_iter().map(|n| n.id).collect();
    assert_eq!(ids.len(), 6);
    assert!(records.iter().all(|r| ids.contains(&r.node_id)));

    // A retried request (same messageId) writes its message once: a bus turn after it, once
    // answered, follows the six messages directly.
    send_message(&agent, &root, "m-http-1", "then over HTTP").await;
    conversation.say("last on the bus").await;
    let last = conversation.messages(8).await;
    assert_eq!(last.len(), 8, "{last:?}");
    assert_eq!(last[..6], after[..6], "nothing written between the six messages and the next turn");
    assert_eq!(last[6], (UI_AGENT_ID.to_owned(), "last on the bus".to_owned()));
    assert_eq!(last[7].0, me);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_that_is_no_conversation_on_the_topic_stays_an_a2a_context() {
    let data = tempfile::tempdir().unwrap();
    let bus_config = bus_in(&data, &BusConfig::default().instance_id);
    let agent = start_agent(&bus_config).await;
    let (_, docmem) = mesh_bus::open_bus(&bus_config).await.unwrap();
    // A conversation on another agent's topic is not this agent's to join.
    let elsewhere = docmem.create_root("", &conversation_root_context("search-1"), "").await.unwrap().id;

    for context in ["an-a2a-context", elsewhere.as_str()] {
        let response = send_message(&agent, context, &format!("m-{context}"), "hello").await;
        assert_eq!(answer_of(&response), "user: hello");
    }
    assert!(docmem.read_conversation(&elsewhere).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_is_joined_only_from_its_own_tenant() {
    let data = tempfile::tempdir().unwrap();
    let bus_config = bus_in(&data, "3");
    let agent = start_agent(&bus_config).await;
    let (_, docmem) = mesh_bus::open_bus(&bus_config).await.unwrap();
    let topic = mesh_bus::agent_topic(&mesh_bus::agent_id("transcriber", "3"));
    let root = docmem.create_root("acme", &conversation_root_context(&topic), "").await.unwrap().id;
    docmem.append_child(&root, &Context::agent_text(UI_AGENT_ID), "acme's secret").await.unwrap();

    // Another tenant naming the conversation gets a context of its own: no history, nothing written.
    for tenant in [None, Some("globex")] {
        let response = send_message_in(&agent, tenant, &root, &format!("m-{tenant:?}"), "hello").await;
        assert_eq!(answer_of(&response), "user: hello", "{tenant:?} must not see acme's history");
    }
    assert_eq!(docmem.read_conversation(&root).await.unwrap().len(), 1);

    // The conversation's own tenant joins it, history included.
    let response = send_message_in(&agent, Some("acme"), &root, "m-acme", "hello").await;
    assert_eq!(answer_of(&response), "user: acme's secret | user: hello");
    assert_eq!(docmem.read_conversation(&root).await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_turn_carries_its_conversations_tenant_on() {
    let data = tempfile::tempdir().unwrap();
    let bus_config = bus_in(&data, "4");
    start(&bus_config, TenantEcho).await;
    let (bus, docmem) = mesh_bus::open_bus(&bus_config).await.unwrap();
    let topic = mesh_bus::agent_topic(&mesh_bus::agent_id("transcriber", "4"));
    bus.ensure_topic(&topic).await.unwrap();
    for (tenant, expected) in [("acme", "tenant acme"), ("", "tenant (none)")] {
        let root = docmem.create_root(tenant, &conversation_root_context(&topic), "").await.unwrap().id;
        let conversation = Conversation { bus: bus.clone(), docmem: docmem.clone(), topic: topic.clone(), root };
        conversation.say("who am I working for?").await;
        assert_eq!(conversation.messages(2).await[1].1, expected);
    }
}
