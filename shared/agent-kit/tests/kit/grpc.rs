//! The gRPC binding of a kit agent on port 0 (the HTTP port, over HTTP/2): every method, streams,
//! the spec's statuses with their `ErrorInfo`, the version metadata, access control, the same
//! task seen through gRPC and JSON-RPC, and the surface every binding applies (the extended card,
//! required extensions, agents that do not stream).

use futures::StreamExt;
use mesh_a2a_grpc::{GrpcClient, a2a_error};
use mesh_agent_kit::{AgentApp, AgentConfig, TaskEvents, TaskHandler, Turn};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::{AgentCard, Artifact, Part, TaskState};
use mesh_protocol::jsonrpc::A2aErrorCode;
use mesh_tck_agent::{TCK_EXTENDED_SKILL_ID, TCK_REQUIRED_EXTENSION_URI, TckAgent, Variant};
use serde_json::{Value, json};
use tonic::Code;

use crate::common::{Served, skill_ids, sqlite_memory_config};

/// The metadata a 1.0 client sends.
const V1: &[(&str, &str)] = &[("a2a-version", "1.0")];

/// `wait` works until canceled, `hello` answers with a message, anything else completes with an
/// artifact `got <text>`.
#[derive(Debug)]
struct Worker;

impl TaskHandler for Worker {
    async fn run(&self, turn: Turn, events: TaskEvents) {
        let text = turn.message.parts.iter().filter_map(|p| p.as_text()).collect::<String>();
        let _ = match text.as_str() {
            "wait" => {
                let _ = events.status(TaskState::Working, None).await;
                turn.cancellation.cancelled().await;
                Ok(())
            }
            "hello" => events.reply(events.agent_message("hi there")),
            _ => {
                let artifact = Artifact {
                    artifact_id: "a1".into(),
                    name: None,
                    description: None,
                    parts: vec![Part::text(format!("got {text}"))],
                    metadata: None,
                    extensions: None,
                };
                let _ = events.artifact(artifact, false, true).await;
                events.status(TaskState::Completed, None).await
            }
        };
    }
}

fn card() -> AgentCard {
    serde_json::from_value(json!({
        "name": "grpc-worker", "description": "test agent", "version": "1",
        "supportedInterfaces": [], "capabilities": {},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "work", "name": "Work", "description": "works", "tags": ["work"]}]
    }))
    .unwrap()
}

async fn agent(config: AgentConfig) -> Served {
    let app = AgentApp::build_tasks(&config, card(), Worker, HttpClient::with_reqwest().unwrap()).await.unwrap();
    Served::serve(app)
}

fn send(text: &str) -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]}})
}

/// The gRPC address the agent's card announces.
async fn grpc_address(agent: &Served) -> String {
    let card = agent.public_card().await;
    let interfaces = card["supportedInterfaces"].as_array().unwrap();
    let grpc = interfaces.iter().find(|i| i["protocolBinding"] == "GRPC").expect("the card announces gRPC");
    assert_eq!(grpc["protocolVersion"], "1.0");
    grpc["url"].as_str().unwrap().to_owned()
}

async fn client(agent: &Served) -> GrpcClient {
    GrpcClient::connect(&grpc_address(agent).await).await.unwrap()
}

/// The status's A2A error, checked to be the gRPC code the spec's table gives.
fn a2a(status: &tonic::Status, code: Code) -> A2aErrorCode {
    assert_eq!(status.code(), code, "{status:?}");
    a2a_error(status).unwrap_or_else(|| panic!("no A2A ErrorInfo in {status:?}"))
}

#[tokio::test]
async fn the_card_announces_grpc_on_the_http_port_beside_the_other_bindings() {
    let agent = agent(sqlite_memory_config()).await;
    let port = url::Url::parse(&agent.url).unwrap().port().unwrap();
    assert_eq!(grpc_address(&agent).await, format!("127.0.0.1:{port}"));
    agent.stop().await;
}

#[tokio::test]
async fn unary_methods_answer_over_grpc_as_json_rpc_does() {
    let agent = agent(sqlite_memory_config()).await;
    let mut grpc = client(&agent).await;

    let sent = grpc.unary("SendMessage", send("ping"), V1).await.unwrap();
    let task = &sent["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "got ping");
    let id = task["id"].as_str().unwrap();

    // The task read over gRPC is the task read over JSON-RPC, member for member (written in
    // ProtoJSON, which leaves out the empty and default members JSON-RPC may carry).
    let over_grpc = grpc.unary("GetTask", json!({"id": id}), V1).await.unwrap();
    let over_rpc: Value = agent
        .http
        .post(format!("{}/", agent.url))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task_message = mesh_a2a_grpc::method("GetTask").unwrap().output();
    let rpc_task = mesh_a2a_grpc::encode_json(&task_message, over_rpc["result"].clone()).unwrap();
    assert_eq!(over_grpc, mesh_a2a_grpc::decode_json(&task_message, rpc_task).unwrap());
    assert_eq!(over_grpc["id"], over_rpc["result"]["id"]);

    let message = grpc.unary("SendMessage", send("hello"), V1).await.unwrap();
    assert_eq!(message["message"]["parts"][0]["text"], "hi there");
    assert_eq!(message["message"]["role"], "ROLE_AGENT");

    let listed = grpc.unary("ListTasks", json!({}), V1).await.unwrap();
    let ids: Vec<&str> = listed["tasks"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [id]);
    assert_eq!(listed["totalSize"], 1);
    agent.stop().await;
}

#[tokio::test]
async fn a_streamed_message_and_a_subscription_end_with_the_task() {
    let agent = agent(sqlite_memory_config()).await;
    let mut grpc = client(&agent).await;

    let events: Vec<Value> =
        grpc.stream("SendStreamingMessage", send("stream me"), V1).await.unwrap().map(Result::unwrap).collect().await;
    let first = events.first().unwrap();
    let id = first["task"]["id"].as_str().expect("the stream starts with the task").to_owned();
    assert!(events.iter().any(|e| e["artifactUpdate"]["artifact"]["parts"][0]["text"] == "got stream me"));
    assert_eq!(events.last().unwrap()["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");

    // A working task: subscribe, cancel it from another call, and the subscription ends canceled.
    let mut waiting = send("wait");
    waiting["configuration"] = json!({"returnImmediately": true});
    let started = grpc.unary("SendMessage", waiting, V1).await.unwrap();
    let waiting_id = started["task"]["id"].as_str().unwrap().to_owned();
    let mut subscription = grpc.stream("SubscribeToTask", json!({"id": waiting_id}), V1).await.unwrap();
    assert_eq!(subscription.next().await.unwrap().unwrap()["task"]["id"], waiting_id);
    let canceled = grpc.clone().unary("CancelTask", json!({"id": waiting_id}), V1).await.unwrap();
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
    let rest: Vec<Value> = subscription.map(Result::unwrap).collect().await;
    assert_eq!(rest.last().unwrap()["statusUpdate"]["status"]["state"], "TASK_STATE_CANCELED");

    // A finished task cannot be canceled: the spec's FAILED_PRECONDITION.
    let refused = grpc.unary("CancelTask", json!({"id": id}), V1).await.unwrap_err();
    assert_eq!(a2a(&refused, Code::FailedPrecondition), A2aErrorCode::TaskNotCancelable);
    agent.stop().await;
}

#[tokio::test]
async fn push_notification_configs_are_created_read_listed_and_deleted() {
    let config = AgentConfig { push_allowed_networks: vec!["10.0.0.0/8".into()], ..sqlite_memory_config() };
    let agent = agent(config).await;
    let mut grpc = client(&agent).await;
    let mut waiting = send("wait");
    waiting["configuration"] = json!({"returnImmediately": true});
    let task = grpc.unary("SendMessage", waiting, V1).await.unwrap()["task"]["id"].as_str().unwrap().to_owned();

    let config = json!({"taskId": task, "id": "hook", "url": "http://10.1.2.3:9000/hook", "token": "secret"});
    let created = grpc.unary("CreateTaskPushNotificationConfig", config.clone(), V1).await.unwrap();
    assert_eq!(created, config);
    let read = grpc.unary("GetTaskPushNotificationConfig", json!({"taskId": task, "id": "hook"}), V1).await.unwrap();
    assert_eq!(read, config);
    let listed = grpc.unary("ListTaskPushNotificationConfigs", json!({"taskId": task}), V1).await.unwrap();
    assert_eq!(listed["configs"], json!([config]));
    let deleted = grpc.unary("DeleteTaskPushNotificationConfig", json!({"taskId": task, "id": "hook"}), V1).await;
    assert_eq!(deleted.unwrap(), json!({}), "google.protobuf.Empty");
    let gone = grpc.unary("GetTaskPushNotificationConfig", json!({"taskId": task, "id": "hook"}), V1).await;
    assert_eq!(a2a(&gone.unwrap_err(), Code::NotFound), A2aErrorCode::TaskNotFound);

    // A webhook on an address the policy refuses is refused when the config is created.
    let metadata_address = json!({"taskId": task, "id": "bad", "url": "http://169.254.169.254/hook"});
    let refused = grpc.unary("CreateTaskPushNotificationConfig", metadata_address, V1).await.unwrap_err();
    assert_eq!(a2a(&refused, Code::InvalidArgument), A2aErrorCode::InvalidParams);
    grpc.unary("CancelTask", json!({"id": task}), V1).await.unwrap();
    agent.stop().await;
}

#[tokio::test]
async fn errors_are_the_specs_statuses_with_their_error_info() {
    let agent = agent(sqlite_memory_config()).await;
    let mut grpc = client(&agent).await;

    let missing = grpc.unary("GetTask", json!({"id": "no-such-task"}), V1).await.unwrap_err();
    assert_eq!(a2a(&missing, Code::NotFound), A2aErrorCode::TaskNotFound);
    assert_eq!(missing.message(), "Task not found");

    // Without `a2a-version` a client speaks 0.3, which this binding does not serve.
    let unversioned = grpc.unary("GetTask", json!({"id": "x"}), &[]).await.unwrap_err();
    assert_eq!(a2a(&unversioned, Code::Unimplemented), A2aErrorCode::VersionNotSupported);
    let future = grpc.unary("GetTask", json!({"id": "x"}), &[("a2a-version", "2.0")]).await.unwrap_err();
    assert_eq!(a2a(&future, Code::Unimplemented), A2aErrorCode::VersionNotSupported);

    let empty = grpc.unary("SendMessage", json!({}), V1).await.unwrap_err();
    assert_eq!(a2a(&empty, Code::InvalidArgument), A2aErrorCode::InvalidParams);

    // A card that does not announce an extended card: the spec's UnsupportedOperation.
    let card = grpc.unary("GetExtendedAgentCard", json!({}), V1).await.unwrap_err();
    assert_eq!(a2a(&card, Code::Unimplemented), A2aErrorCode::UnsupportedOperation);

    // A tenant that is not a tenant id is refused before anything is read.
    let bad_tenant = grpc.unary("GetTask", json!({"id": "x", "tenant": "../etc"}), V1).await.unwrap_err();
    assert_eq!(a2a(&bad_tenant, Code::InvalidArgument), A2aErrorCode::InvalidParams);
    agent.stop().await;
}

/// A gRPC call by hand (HTTP/2, one length-prefixed `frame`), as version 1.0, for what a client
/// library would not send.
async fn raw_call(http2: &reqwest::Client, address: &str, path: &str, frame: Vec<u8>) -> reqwest::Response {
    http2
        .post(format!("http://{address}/{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("a2a-version", "1.0")
        .body(frame)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn malformed_calls_are_refused_with_a_status() {
    let agent = agent(sqlite_memory_config()).await;
    let address = grpc_address(&agent).await;

    // A method the service does not have.
    let http2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let unknown = raw_call(&http2, &address, "lf.a2a.v1.A2AService/Teleport", vec![0u8, 0, 0, 0, 0]).await;
    assert_eq!(unknown.headers()["grpc-status"], (Code::Unimplemented as i32).to_string());
    // 0.3's service, which is not served: the 404 of a route that does not exist, as gRPC.
    let old = raw_call(&http2, &address, "a2a.v1.A2AService/SendMessage", vec![0u8, 0, 0, 0, 0]).await;
    assert_eq!(old.headers()["content-type"], "application/grpc");
    assert_eq!(old.headers()["grpc-status"], (Code::Unimplemented as i32).to_string());

    // A message whose bytes are not a SendMessageRequest.
    let garbage = [0u8, 0, 0, 0, 3, 0xff, 0xff, 0xff];
    let refused = raw_call(&http2, &address, "lf.a2a.v1.A2AService/SendMessage", garbage.to_vec()).await;
    // An error before any answer is a trailers-only response: the status is in its headers.
    assert_eq!(refused.headers()["grpc-status"], (Code::InvalidArgument as i32).to_string());
    agent.stop().await;
}

#[tokio::test]
async fn with_access_control_a_call_needs_a_credential() {
    let mut config = sqlite_memory_config();
    config.auth.jwt_hs256_secret = Some("a-secret-of-at-least-thirty-two-bytes!".into());
    let token = config.auth.mint("ada", "team-a", &[mesh_auth::Role::User], 60).unwrap().unwrap();
    let agent = agent(config).await;
    let mut grpc = client(&agent).await;

    // The trust layer's refusal, as a gRPC status with its challenge.
    let anonymous = grpc.unary("ListTasks", json!({}), V1).await.unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated, "{anonymous:?}");
    assert!(anonymous.message().starts_with("AUTH_"), "{anonymous:?}");
    assert!(anonymous.metadata().get("www-authenticate").is_some(), "{anonymous:?}");

    let bearer = format!("Bearer {token}");
    let with_token = [("a2a-version", "1.0"), ("authorization", bearer.as_str())];
    let sent = grpc.unary("SendMessage", send("ping"), &with_token).await.unwrap();
    assert_eq!(sent["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    // Tasks live in the caller's tenant: another tenant's caller does not see them.
    let listed = grpc.unary("ListTasks", json!({}), &with_token).await.unwrap();
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 1);
    agent.stop().await;
}

/// The conformance agent as `variant`, on `config`.
async fn variant(variant: Variant, mut config: AgentConfig) -> Served {
    let mut card = mesh_tck_agent::card().unwrap();
    variant.apply(&mut card, &mut config);
    Served::serve(AgentApp::build_tasks(&config, card, TckAgent, HttpClient::with_reqwest().unwrap()).await.unwrap())
}

#[tokio::test]
async fn the_extended_card_opens_to_its_token_over_grpc() {
    const TOKEN: &str = "grpc-extended-card-token";
    let agent = variant(
        Variant::ExtendedCard,
        AgentConfig { extended_card_token: Some(TOKEN.into()), ..sqlite_memory_config() },
    )
    .await;
    let mut grpc = client(&agent).await;
    let bearer = format!("Bearer {TOKEN}");
    let with_token = [("a2a-version", "1.0"), ("authorization", bearer.as_str())];
    let card = grpc.unary("GetExtendedAgentCard", json!({}), &with_token).await.unwrap();
    assert_eq!(skill_ids(&card), ["tck", TCK_EXTENDED_SKILL_ID]);
    assert_eq!(card["capabilities"]["extendedAgentCard"], true);

    let anonymous = grpc.unary("GetExtendedAgentCard", json!({}), V1).await.unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated, "{anonymous:?}");
    let wrong = [("a2a-version", "1.0"), ("authorization", "Bearer not-the-token")];
    let refused = grpc.unary("GetExtendedAgentCard", json!({}), &wrong).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    agent.stop().await;
}

#[tokio::test]
async fn a_required_extension_must_be_activated_over_grpc() {
    let agent = variant(Variant::RequiredExtension, sqlite_memory_config()).await;
    let mut grpc = client(&agent).await;
    for method in ["ListTasks", "GetExtendedAgentCard"] {
        let refused = grpc.unary(method, json!({}), V1).await.unwrap_err();
        assert_eq!(a2a(&refused, Code::FailedPrecondition), A2aErrorCode::ExtensionSupportRequired, "{method}");
        assert!(refused.message().contains(TCK_REQUIRED_EXTENSION_URI), "{refused:?}");
    }
    let refused = grpc.stream("SendStreamingMessage", send("hi"), V1).await.err().expect("refused");
    assert_eq!(a2a(&refused, Code::FailedPrecondition), A2aErrorCode::ExtensionSupportRequired);

    let activated = [("a2a-version", "1.0"), ("a2a-extensions", TCK_REQUIRED_EXTENSION_URI)];
    let listed = grpc.unary("ListTasks", json!({}), &activated).await.unwrap();
    // ProtoJSON leaves an empty list out.
    assert_eq!(listed.get("tasks"), None, "{listed}");
    agent.stop().await;
}

#[tokio::test]
async fn an_agent_that_does_not_stream_refuses_the_streaming_methods_over_grpc() {
    let agent = variant(Variant::NoStreaming, sqlite_memory_config()).await;
    let mut grpc = client(&agent).await;
    for (method, request) in [("SendStreamingMessage", send("hi")), ("SubscribeToTask", json!({"id": "any"}))] {
        let refused = grpc.stream(method, request, V1).await.err().expect("refused");
        assert_eq!(a2a(&refused, Code::Unimplemented), A2aErrorCode::UnsupportedOperation, "{method}");
    }
    // Its unary methods serve as usual.
    let sent = grpc.unary("SendMessage", send("hello"), V1).await.unwrap();
    assert!(sent.get("task").is_some() || sent.get("message").is_some(), "{sent}");
    agent.stop().await;
}
