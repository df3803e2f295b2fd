//! The A2A surface of a kit agent on port 0: JSON-RPC and HTTP+JSON, 1.0 and 0.3, streams,
//! multi-turn tasks, cancellation, subscriptions, durability and tenants (the task and listing
//! tests with the tasks in SQLite and in memory).

use std::time::Duration;

use mesh_agent_kit::{
    AgentApp, AgentConfig, AgentError, AgentHandler, AgentReply, TaskDurability, TaskEvents, TaskHandler, TaskInput,
    Turn,
};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::{AgentCard, TaskState};
use mesh_test_support::{eventually, logs};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{LOG_TARGETS, Served, TIMEOUT, sqlite_memory_config};

fn card(name: &str) -> AgentCard {
    serde_json::from_value(json!({
        "name": name, "description": "test agent", "version": "1",
        "supportedInterfaces": [], "capabilities": {},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "echo", "tags": ["echo"]}]
    }))
    .unwrap()
}

/// A seed agent: answers the text, upper-cased; `fail` fails.
#[derive(Debug)]
struct Upper;

impl AgentHandler for Upper {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        if task.text == "fail" {
            return Err(AgentError::InvalidInput("nothing to do".into()));
        }
        if task.text == "parts" {
            let parts: Vec<_> = task.messages.iter().flat_map(|m| &m.parts).collect();
            return Ok(AgentReply::data(json!({"parts": parts})));
        }
        Ok(AgentReply::data(json!({"upper": task.text.to_uppercase()})))
    }
}

/// A task agent: `ask` asks for input, `wait` works until canceled, `hello` answers a message,
/// anything else completes with an artifact.
#[derive(Debug)]
struct Conversational;

impl TaskHandler for Conversational {
    async fn run(&self, turn: Turn, events: TaskEvents) {
        let text = turn.message.parts.iter().filter_map(|p| p.as_text()).collect::<String>();
        let _ = match text.as_str() {
            "ask" => events.status(TaskState::InputRequired, Some("which city?")).await,
            // Asks, then goes on working a while before returning: the answer may start the
            // next turn first.
            "ask-then-linger" => {
                let asked = events.status(TaskState::InputRequired, Some("which city?")).await;
                tokio::time::sleep(Duration::from_millis(LINGER_MS)).await;
                asked
            }
            "wait" => {
                let _ = events.status(TaskState::Working, None).await;
                turn.cancellation.cancelled().await;
                Ok(())
            }
            "hello" => events.reply(events.agent_message("hi there")),
            _ => {
                let answer = mesh_protocol::a2a::v1::Artifact {
                    artifact_id: "a1".into(),
                    name: None,
                    description: None,
                    parts: vec![mesh_protocol::a2a::v1::Part::text(format!("got {text}"))],
                    metadata: None,
                    extensions: None,
                };
                let _ = events.artifact(answer, false, true).await;
                events.status(TaskState::Completed, None).await
            }
        };
    }
}

/// How long the `ask-then-linger` turn goes on after asking.
const LINGER_MS: u64 = 400;

/// The calls these tests make of a served agent: JSON-RPC, SSE and HTTP+JSON. A trait of this
/// module's, since [`Served`] is the test binary's and other modules give it calls of their own.
trait A2aCalls {
    async fn rpc(&self, version: Option<&str>, method: &str, params: Value) -> Value;
    async fn sse(&self, request: reqwest::RequestBuilder) -> Vec<Value>;
    async fn rest(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (StatusCode, Value);
}

impl A2aCalls for Served {
    async fn rpc(&self, version: Option<&str>, method: &str, params: Value) -> Value {
        let mut request = self
            .http
            .post(format!("{}/", self.url))
            .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}));
        if let Some(version) = version {
            request = request.header("A2A-Version", version);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    /// The `data:` documents of an SSE answer, read to its end.
    async fn sse(&self, request: reqwest::RequestBuilder) -> Vec<Value> {
        let response = request.header("A2A-Version", "1.0").send().await.unwrap();
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let body = response.text().await.unwrap();
        body.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect()
    }

    async fn rest(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.url)).header("A2A-Version", "1.0");
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap())
    }
}

async fn seed_agent() -> Served {
    Served::serve(
        AgentApp::build(&sqlite_memory_config(), card("upper"), Upper, HttpClient::with_reqwest().unwrap())
            .await
            .unwrap(),
    )
}

async fn task_agent(config: AgentConfig) -> Served {
    Served::serve(
        AgentApp::build_tasks(&config, card("talk"), Conversational, HttpClient::with_reqwest().unwrap())
            .await
            .unwrap(),
    )
}

fn message(text: &str, extra: Value) -> Value {
    let mut message =
        json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]});
    message.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    message
}

#[tokio::test]
async fn a_seed_agent_answers_send_message_with_a_stored_task() {
    let agent = seed_agent().await;
    let answer = agent.rpc(Some("1.0"), "SendMessage", json!({"message": message("robots", json!({}))})).await;
    let task = &answer["result"]["task"];
    assert_eq!(answer["id"], 7);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    assert_eq!(task["artifacts"][0]["parts"][0]["data"], json!({"upper": "ROBOTS"}));
    assert!(task["status"]["timestamp"].as_str().unwrap().ends_with('Z'));
    let id = task["id"].as_str().unwrap();
    let got = agent.rpc(Some("1.0"), "GetTask", json!({"id": id, "history_length": 0})).await;
    assert_eq!(got["result"]["id"], id);
    assert!(got["result"].get("history").is_none(), "historyLength 0 leaves no history: {got}");
    let listed = agent.rpc(Some("1.0"), "ListTasks", json!({"contextId": task["contextId"]})).await;
    assert_eq!(listed["result"]["totalSize"], 1, "{listed}");
    assert_eq!(listed["result"]["nextPageToken"], "");

    // A failing handler fails the task, with the mesh error body in the status message.
    let failed = agent.rpc(Some("1.0"), "SendMessage", json!({"message": message("fail", json!({}))})).await;
    assert_eq!(failed["result"]["task"]["status"]["state"], "TASK_STATE_FAILED");
    assert_eq!(failed["result"]["task"]["status"]["message"]["parts"][1]["data"]["error_code"], "TASK_INVALID_INPUT");

    // The seed route lands in the same task model.
    let seed = json!({"id": "seed-1", "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}]});
    let response = agent.http.post(format!("{}/tasks/send", agent.url)).json(&seed).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let got = agent.rpc(Some("1.0"), "GetTask", json!({"id": "seed-1"})).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
    assert_eq!(got["result"]["artifacts"][0]["parts"][0]["data"], json!({"upper": "HI"}));
    agent.stop().await;
}

#[tokio::test]
async fn a_seed_handler_sees_the_text_and_data_parts_of_an_a2a_message() {
    let agent = seed_agent().await;
    let sent = message("parts", json!({"parts": [{"text": "parts"}, {"data": {"k": 1}}]}));
    let answer = agent.rpc(Some("1.0"), "SendMessage", json!({"message": sent})).await;
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    let parts = json!([{"type": "text", "text": "parts"}, {"type": "data", "data": {"k": 1}}]);
    assert_eq!(task["artifacts"][0]["parts"][0]["data"], json!({"parts": parts}));
}

#[tokio::test]
async fn versions_and_malformed_requests_get_their_error_codes() {
    let agent = seed_agent().await;
    let missing = agent.rpc(None, "SendMessage", json!({"message": message("x", json!({}))})).await;
    assert_eq!(missing["error"]["code"], -32009, "{missing}");
    assert_eq!(missing["error"]["data"][0]["reason"], "VERSION_NOT_SUPPORTED");
    let future = agent.rpc(Some("99.0"), "SendMessage", json!({"message": message("x", json!({}))})).await;
    assert_eq!(future["error"]["code"], -32009);
    let unknown = agent.rpc(Some("1.0"), "NoSuchMethod", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601);
    let empty = agent.rpc(Some("1.0"), "SendMessage", json!({})).await;
    assert_eq!(empty["error"]["code"], -32602);
    assert_eq!(empty["error"]["data"][0]["reason"], "INVALID_PARAMS");
    let no_parts = agent
        .rpc(Some("1.0"), "SendMessage", json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}))
        .await;
    assert_eq!(no_parts["error"]["code"], -32602, "{no_parts}");
    let not_found = agent.rpc(Some("1.0"), "GetTask", json!({"id": "nope"})).await;
    assert_eq!(
        not_found["error"],
        json!({"code": -32001, "message": "Task not found", "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org", "metadata": {}}]})
    );
    let push = agent
        .rpc(Some("1.0"), "CreateTaskPushNotificationConfig", json!({"task_id": "t", "url": "https://example.com"}))
        .await;
    // Push notifications are offered (see `push.rs`): a config for a task that is not there is refused so.
    assert_eq!(push["error"]["code"], -32001, "{push}");

    let raw = |body: &'static str, content_type: &'static str| {
        agent
            .http
            .post(format!("{}/", agent.url))
            .header("content-type", content_type)
            .header("A2A-Version", "1.0")
            .body(body)
    };
    let parse: Value = raw("{not json", "application/json").send().await.unwrap().json().await.unwrap();
    assert_eq!((parse["error"]["code"].clone(), parse["id"].clone()), (json!(-32700), Value::Null));
    let plain: Value = raw("hello", "text/plain").send().await.unwrap().json().await.unwrap();
    assert_eq!(plain["error"]["code"], -32005, "{plain}");
    let batch: Value = raw("[]", "application/json").send().await.unwrap().json().await.unwrap();
    assert_eq!(batch["error"]["code"], -32600);

    // 0.3: old method names and shapes, served to clients without the header.
    let old = agent
        .rpc(None, "message/send", json!({"message": {"kind": "message", "messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "old"}]}}))
        .await;
    assert_eq!(old["result"]["kind"], "task", "{old}");
    assert_eq!(old["result"]["status"]["state"], "completed");
    let id = old["result"]["id"].clone();
    let got = agent.rpc(None, "tasks/get", json!({"id": id})).await;
    assert_eq!(got["result"]["history"][0]["parts"][0], json!({"kind": "text", "text": "old"}));
    let not_found = agent.rpc(None, "tasks/get", json!({"id": "nope"})).await;
    assert_eq!(not_found["error"], json!({"code": -32001, "message": "Task not found", "data": null}));
    let mismatched = agent.rpc(Some("1.0"), "message/send", json!({})).await;
    assert_eq!(mismatched["error"]["code"], -32009);
    agent.stop().await;
}

#[tokio::test]
async fn streams_carry_the_task_then_its_changes_until_it_ends() {
    let agent = seed_agent().await;
    let request = json!({"jsonrpc": "2.0", "id": "s1", "method": "SendStreamingMessage", "params": {"message": message("go", json!({}))}});
    let events = agent.sse(agent.http.post(format!("{}/", agent.url)).json(&request)).await;
    let kinds: Vec<String> =
        events.iter().map(|e| e["result"].as_object().unwrap().keys().next().unwrap().clone()).collect();
    assert_eq!(kinds, ["task", "statusUpdate", "artifactUpdate", "statusUpdate"], "{events:?}");
    assert!(events.iter().all(|e| e["id"] == "s1" && e["jsonrpc"] == "2.0"));
    assert_eq!(events[0]["result"]["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
    assert_eq!(events[3]["result"]["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");

    // The same over HTTP+JSON: bare events.
    let events = agent
        .sse(
            agent
                .http
                .post(format!("{}/message:stream", agent.url))
                .json(&json!({"message": message("go", json!({}))})),
        )
        .await;
    assert_eq!(events.len(), 4);
    assert_eq!(events[3]["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");
    agent.stop().await;
}

/// [`config`], and the same agent keeping its tasks in memory: what both must serve alike.
fn configs() -> [AgentConfig; 2] {
    [sqlite_memory_config(), AgentConfig { task_durability: TaskDurability::Memory, ..sqlite_memory_config() }]
}

#[tokio::test]
async fn tasks_take_turns_cancel_and_follow_subscriptions() {
    for config in configs() {
        tasks_take_turns_cancel_and_follow_subscriptions_with(config).await;
    }
}

async fn tasks_take_turns_cancel_and_follow_subscriptions_with(config: AgentConfig) {
    let agent = task_agent(config).await;
    // A message answer makes no task.
    let hello = agent.rpc(Some("1.0"), "SendMessage", json!({"message": message("hello", json!({}))})).await;
    assert_eq!(hello["result"]["message"]["parts"][0]["text"], "hi there", "{hello}");

    // Input required, a subscription, then the answer that completes it.
    let asked =
        agent.rpc(Some("1.0"), "SendMessage", json!({"message": message("ask", json!({"contextId": "ctx-1"}))})).await;
    let task = &asked["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    assert_eq!(task["contextId"], "ctx-1");
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "which city?");
    let id = task["id"].as_str().unwrap().to_owned();
    // The stream's head comes once the agent subscribed it: the answers below are all on it.
    let subscription = {
        let request =
            agent.http.post(format!("{}/tasks/{id}:subscribe", agent.url)).header("content-type", "application/json");
        let stream = request.header("A2A-Version", "1.0").send().await.unwrap();
        assert_eq!(stream.status(), 200);
        tokio::spawn(async move { stream.text().await.unwrap() })
    };
    let wrong_context = agent
        .rpc(
            Some("1.0"),
            "SendMessage",
            json!({"message": message("Paris", json!({"taskId": id, "contextId": "other"}))}),
        )
        .await;
    assert_eq!(wrong_context["error"]["code"], -32602);
    let answered =
        agent.rpc(Some("1.0"), "SendMessage", json!({"message": message("Paris", json!({"taskId": id}))})).await;
    let task = &answered["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answered}");
    let history: Vec<&str> =
        task["history"].as_array().unwrap().iter().map(|m| m["parts"][0]["text"].as_str().unwrap()).collect();
    assert_eq!(history, ["ask", "which city?", "Paris"]);
    assert!(task["history"].as_array().unwrap().iter().all(|m| m["contextId"] == "ctx-1" && m["taskId"] == id));
    let streamed = subscription.await.unwrap();
    let events: Vec<Value> =
        streamed.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(events[0]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{streamed}");
    assert_eq!(events.last().unwrap()["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");

    // A finished task takes no more messages, no cancellation and no subscription.
    let again = agent.rpc(Some("1.0"), "SendMessage", json!({"message": message("more", json!({"taskId": id}))})).await;
    assert_eq!(again["error"]["code"], -32004);
    let cancel = agent.rpc(Some("1.0"), "CancelTask", json!({"id": id})).await;
    assert_eq!(cancel["error"]["code"], -32002);
    let (status, body) = agent.rest(reqwest::Method::POST, &format!("/tasks/{id}:cancel"), None).await;
    assert_eq!((status, body["error"]["status"].clone()), (StatusCode::CONFLICT, json!("FAILED_PRECONDITION")));
    let subscribe = agent.rpc(Some("1.0"), "SubscribeToTask", json!({"id": id})).await;
    assert_eq!(subscribe["error"]["code"], -32004);

    // A running task is canceled at once, and its handler told.
    let running = agent
        .rpc(
            Some("1.0"),
            "SendMessage",
            json!({"message": message("wait", json!({})), "configuration": {"returnImmediately": true}}),
        )
        .await;
    let running_id = running["result"]["task"]["id"].as_str().unwrap().to_owned();
    let canceled = agent.rpc(Some("1.0"), "CancelTask", json!({"id": running_id})).await;
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED", "{canceled}");
    let (status, got) = agent.rest(reqwest::Method::GET, &format!("/tasks/{running_id}"), None).await;
    assert_eq!((status, got["status"]["state"].clone()), (StatusCode::OK, json!("TASK_STATE_CANCELED")));
    agent.stop().await;
}

#[tokio::test]
async fn the_http_json_binding_serves_tasks_lists_and_aip_193_errors() {
    for config in configs() {
        the_http_json_binding_serves_tasks_lists_and_aip_193_errors_with(config).await;
    }
}

async fn the_http_json_binding_serves_tasks_lists_and_aip_193_errors_with(config: AgentConfig) {
    let agent = task_agent(config).await;
    let (status, sent) = agent
        .rest(
            reqwest::Method::POST,
            "/message:send",
            Some(json!({"message": message("one", json!({"contextId": "c"}))})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let id = sent["task"]["id"].as_str().unwrap().to_owned();
    agent
        .rest(
            reqwest::Method::POST,
            "/message:send",
            Some(json!({"message": message("two", json!({"contextId": "c"}))})),
        )
        .await;
    let (_, got) = agent.rest(reqwest::Method::GET, &format!("/tasks/{id}?historyLength=1"), None).await;
    assert_eq!(got["history"].as_array().unwrap().len(), 1);
    let (_, page) = agent.rest(reqwest::Method::GET, "/tasks?contextId=c&pageSize=1&includeArtifacts=true", None).await;
    assert_eq!((page["totalSize"].clone(), page["pageSize"].clone()), (json!(2), json!(1)), "{page}");
    assert_eq!(page["tasks"][0]["artifacts"][0]["parts"][0]["text"], "got two");
    let token = page["nextPageToken"].as_str().unwrap();
    let (_, rest) =
        agent.rest(reqwest::Method::GET, &format!("/tasks?contextId=c&pageSize=1&pageToken={token}"), None).await;
    assert_eq!(rest["tasks"][0]["id"], id);
    assert!(rest["tasks"][0].get("artifacts").is_none(), "artifacts only when asked");

    let (status, missing) = agent.rest(reqwest::Method::GET, "/tasks/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(missing["error"]["code"], 404);
    assert_eq!(missing["error"]["details"][0]["reason"], "TASK_NOT_FOUND");
    let (status, push) = agent
        .rest(reqwest::Method::POST, "/tasks/t/pushNotificationConfigs", Some(json!({"url": "https://example.com"})))
        .await;
    assert_eq!(
        (status, push["error"]["details"][0]["reason"].clone()),
        (StatusCode::NOT_FOUND, json!("TASK_NOT_FOUND"))
    );
    let response = agent
        .http
        .post(format!("{}/message:send", agent.url))
        .header("A2A-Version", "1.0")
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let response = agent
        .http
        .post(format!("{}/message:send", agent.url))
        .json(&json!({"message": message("x", json!({}))}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST, "no A2A-Version header: a 0.3 client at a 1.0 path");

    // Tenants see only their own tasks.
    let (status, mine) = agent
        .rest(reqwest::Method::POST, "/team-a/message:send", Some(json!({"message": message("t", json!({}))})))
        .await;
    assert_eq!(status, StatusCode::OK);
    let tenant_id = mine["task"]["id"].as_str().unwrap();
    assert_eq!(agent.rest(reqwest::Method::GET, &format!("/team-a/tasks/{tenant_id}"), None).await.0, StatusCode::OK);
    assert_eq!(agent.rest(reqwest::Method::GET, &format!("/tasks/{tenant_id}"), None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        agent.rest(reqwest::Method::GET, &format!("/team-b/tasks/{tenant_id}"), None).await.0,
        StatusCode::NOT_FOUND
    );

    // The card names the JSON bindings in both versions, 1.0 first, and gRPC (1.0).
    let card = agent.public_card().await;
    let interfaces: Vec<(String, String)> = card["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["protocolBinding"].as_str().unwrap().to_owned(), i["protocolVersion"].as_str().unwrap().to_owned()))
        .collect();
    let expected =
        [("JSONRPC", "1.0"), ("HTTP+JSON", "1.0"), ("GRPC", "1.0"), ("JSONRPC", "0.3"), ("HTTP+JSON", "0.3")];
    assert_eq!(interfaces, expected.map(|(b, v)| (b.to_owned(), v.to_owned())));
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["preferredTransport"], "JSONRPC", "0.3 fields for old clients");
    agent.stop().await;
}

#[tokio::test]
async fn tasks_outlive_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let config = AgentConfig { task_store_url: Some(store), ..AgentConfig::default() };
    let agent = task_agent(config.clone()).await;
    let asked = agent.rpc(Some("1.0"), "SendMessage", json!({"message": message("ask", json!({}))})).await;
    let done = agent.rpc(Some("1.0"), "SendMessage", json!({"message": message("done", json!({}))})).await;
    agent.stop().await;

    let agent = task_agent(config).await;
    let done_id = done["result"]["task"]["id"].clone();
    let got = agent.rpc(Some("1.0"), "GetTask", json!({"id": done_id})).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
    // A task that waited for input before the restart takes its answer after it.
    let asked_id = asked["result"]["task"]["id"].clone();
    let answered =
        agent.rpc(Some("1.0"), "SendMessage", json!({"message": message("Rome", json!({"taskId": asked_id}))})).await;
    assert_eq!(answered["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answered}");
    agent.stop().await;
}

#[tokio::test]
async fn a_turn_that_returns_after_the_next_one_started_leaves_it_alone() {
    logs::capture(LOG_TARGETS);
    let agent = task_agent(sqlite_memory_config()).await;
    let asked = agent.rpc(Some("1.0"), "SendMessage", json!({"message": message("ask-then-linger", json!({}))})).await;
    assert_eq!(asked["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let id = asked["result"]["task"]["id"].as_str().unwrap().to_owned();
    // The next turn works until it is canceled; the first turn returns meanwhile.
    let next = agent
        .rpc(
            Some("1.0"),
            "SendMessage",
            json!({"message": message("wait", json!({"taskId": id})), "configuration": {"returnImmediately": true}}),
        )
        .await;
    assert!(next.get("result").is_some(), "{next}");
    // The engine says when a turn ends after the next one started: only then can its end be
    // checked to have left the task alone.
    let task_field = format!("task={id}");
    eventually("the first turn to end", TIMEOUT, async || {
        logs::logged(&["a turn ended after the next one started", &task_field])
    })
    .await;
    let got = agent.rpc(Some("1.0"), "GetTask", json!({"id": id})).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_WORKING", "the first turn's end did not fail it: {got}");
    // The running turn still owns the task: a third message is refused.
    let third =
        agent.rpc(Some("1.0"), "SendMessage", json!({"message": message("Paris", json!({"taskId": id}))})).await;
    assert!(third.get("error").is_some(), "{third}");
    let canceled = agent.rpc(Some("1.0"), "CancelTask", json!({"id": id})).await;
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED", "{canceled}");
}
