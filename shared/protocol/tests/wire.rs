//! Wire-format tests against traffic captured from the official SDKs (a2a-sdk 1.3.0 server,
//! Python and JS clients; see `/work/shared/a2a-captures`). Every fixture must parse into its typed
//! struct and serialize back to the identical JSON value.
//!
//! Two fixtures are not verbatim: the capture of `ListTasks` is cut off after `"jsonrpc"`, so its
//! envelope is closed with `:"2.0"}`; and the capture logs only the answer to the 0.3
//! `message/send`, so `v03_message_send_request_reconstructed.json` rebuilds the request from it.

use std::path::Path;

use mesh_protocol::a2a::{binding, v1, v03};
use mesh_protocol::jsonrpc::{
    A2aErrorCode, ErrorObject, Id, Outcome, Request, Response, RestErrorBody, method, version_not_supported_message,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// Parses `json` (from its text, as a server would) as `T`, asserts that serializing it gives
/// back exactly `json`, and returns the typed value for further checks.
fn round_trip<T: DeserializeOwned + Serialize>(json: &Value) -> T {
    let typed: T = serde_json::from_str(&json.to_string())
        .unwrap_or_else(|error| panic!("does not parse as {}: {error}\n{json:#}", type_name::<T>()));
    let back = serde_json::to_value(&typed).expect("serializes");
    assert_eq!(back, *json, "{} does not round-trip", type_name::<T>());
    typed
}

fn type_name<T>() -> &'static str {
    std::any::type_name::<T>()
}

fn round_trip_fixture<T: DeserializeOwned + Serialize>(name: &str) -> T {
    round_trip(&fixture(name))
}

/// Each element of a fixture holding an array (one SSE `data:` payload per element).
fn round_trip_each<T: DeserializeOwned + Serialize>(name: &str) -> Vec<T> {
    match fixture(name) {
        Value::Array(items) => items.iter().map(round_trip).collect(),
        other => panic!("{name} is not an array: {other}"),
    }
}

fn result<T>(response: Response<T>) -> T {
    match response.into_result() {
        Ok(result) => result,
        Err(error) => panic!("error response: {error:?}"),
    }
}

mod v1_fixtures {
    use super::*;

    #[test]
    fn agent_card_carries_both_generations_of_fields() {
        let card: v1::AgentCard = round_trip_fixture("card.json");
        assert_eq!(card.name, "Echo Agent");
        let interfaces: Vec<_> = card
            .supported_interfaces
            .iter()
            .map(|i| (i.protocol_binding.as_str(), i.protocol_version.as_str()))
            .collect();
        assert_eq!(
            interfaces,
            [
                (binding::JSONRPC, "1.0"),
                (binding::HTTP_JSON, "1.0"),
                (binding::JSONRPC, "0.3"),
                (binding::HTTP_JSON, "0.3"),
            ]
        );
        assert_eq!(card.capabilities.streaming, Some(true));
        assert_eq!(card.capabilities.push_notifications, Some(false));
        assert_eq!(card.skills[0].tags, ["echo"]);
        assert_eq!(card.url.as_deref(), Some("http://127.0.0.1:18765/"));
        assert_eq!(card.preferred_transport.as_deref(), Some(binding::JSONRPC));
        assert_eq!(card.protocol_version.as_deref(), Some("0.3"));
        assert_eq!(
            card.additional_interfaces,
            Some(vec![v03::AgentInterface {
                transport: binding::HTTP_JSON.to_owned(),
                url: "http://127.0.0.1:18765/rest".to_owned(),
            }])
        );
    }

    #[test]
    fn a_card_without_supported_interfaces_is_still_readable() {
        // 0.3-only agents serve no supportedInterfaces; the client falls back to `url`.
        let mut legacy = fixture("card.json");
        legacy.as_object_mut().unwrap().remove("supportedInterfaces");
        let card: v1::AgentCard = serde_json::from_value(legacy).unwrap();
        assert!(card.supported_interfaces.is_empty());
        assert_eq!(card.url.as_deref(), Some("http://127.0.0.1:18765/"));
    }

    #[test]
    fn jsonrpc_send_message_request() {
        let request: Request = round_trip_fixture("v1_jsonrpc_send_request.json");
        assert_eq!(request.method, method::v1::SEND_MESSAGE);
        assert_eq!(request.id, Some(Id::from("e20683be-17e4-48ac-bc62-d27a9499cf4f")));
        let params: v1::SendMessageRequest = round_trip(&request.params.unwrap());
        assert_eq!(params.message.role, v1::Role::User);
        assert_eq!(params.message.parts[0].as_text(), Some("hello a2a"));
        assert_eq!(params.configuration, Some(v1::SendMessageConfiguration::default()));
    }

    #[test]
    fn jsonrpc_send_message_response() {
        let response: Response<v1::SendMessageResponse> = round_trip_fixture("v1_jsonrpc_send_response.json");
        let v1::SendMessageResponse::Task(task) = result(response) else {
            panic!("expected a task");
        };
        assert_eq!(task.status.state, v1::TaskState::Completed);
        assert!(task.status.state.is_terminal());
        assert_eq!(task.status.timestamp.as_deref(), Some("2026-11-22T04:08:38.933199Z"));
        assert_eq!(task.artifacts[0].name.as_deref(), Some("echo"));
        assert_eq!(task.artifacts[0].parts[0].as_text(), Some("echo: hello a2a"));
        assert_eq!(task.history[0].task_id.as_deref(), Some(task.id.as_str()));
        assert_eq!(task.history[0].context_id.as_deref(), Some(task.context_id.as_str()));
    }

    #[test]
    fn js_client_send_message_with_a_numeric_id() {
        let request: Request = round_trip_fixture("v1_js_send_request.json");
        assert_eq!(request.id, Some(Id::from(1)));
        round_trip::<v1::SendMessageRequest>(&request.params.unwrap());
        let response: Response<v1::SendMessageResponse> = round_trip_fixture("v1_js_send_response.json");
        assert_eq!(response.id, Id::from(1));
        assert!(matches!(result(response), v1::SendMessageResponse::Task(_)));
    }

    /// The order every captured stream follows: the task, working, the artifact, completed.
    fn assert_echo_stream(events: &[v1::StreamResponse]) {
        let [
            v1::StreamResponse::Task(task),
            v1::StreamResponse::StatusUpdate(working),
            v1::StreamResponse::ArtifactUpdate(artifact),
            v1::StreamResponse::StatusUpdate(completed),
        ] = events
        else {
            panic!("unexpected event sequence: {events:#?}");
        };
        assert_eq!(task.status.state, v1::TaskState::Submitted);
        assert_eq!(task.status.timestamp, None);
        assert_eq!(working.status.state, v1::TaskState::Working);
        assert_eq!(working.task_id, task.id);
        assert_eq!(artifact.artifact.parts[0].as_text(), Some("echo: hello a2a"));
        assert!(!artifact.append && !artifact.last_chunk);
        assert_eq!(completed.status.state, v1::TaskState::Completed);
    }

    #[test]
    fn jsonrpc_streaming() {
        let request: Request = round_trip_fixture("v1_jsonrpc_stream_request.json");
        assert_eq!(request.method, method::v1::SEND_STREAMING_MESSAGE);
        round_trip::<v1::SendMessageRequest>(&request.params.unwrap());
        let events: Vec<Response<v1::StreamResponse>> = round_trip_each("v1_jsonrpc_stream_events.json");
        assert!(events.iter().all(|event| event.id == request.id.clone().unwrap()));
        assert_echo_stream(&events.into_iter().map(result).collect::<Vec<_>>());
    }

    #[test]
    fn rest_send_message() {
        let request: v1::SendMessageRequest = round_trip_fixture("v1_rest_send_request.json");
        assert_eq!(request.message.parts, [v1::Part::text("hello a2a")]);
        let response: v1::SendMessageResponse = round_trip_fixture("v1_rest_send_response.json");
        let v1::SendMessageResponse::Task(task) = response else {
            panic!("expected a task");
        };
        assert_eq!(task.status.state, v1::TaskState::Completed);
    }

    #[test]
    fn rest_streaming() {
        round_trip_fixture::<v1::SendMessageRequest>("v1_rest_stream_request.json");
        assert_echo_stream(&round_trip_each("v1_rest_stream_events.json"));
    }

    #[test]
    fn list_tasks_keeps_the_sdks_empty_defaults() {
        let response: Response<v1::ListTasksResponse> = round_trip_fixture("v1_list_tasks_response.json");
        assert_eq!(response.id, Id::from(11));
        let page = result(response);
        assert_eq!((page.page_size, page.total_size), (1, 6));
        assert!(!page.next_page_token.is_empty());
        let message = &page.tasks[0].history[0];
        assert_eq!(message.parts[0].filename.as_deref(), Some(""));
        assert_eq!(message.parts[0].media_type.as_deref(), Some(""));
        assert_eq!(message.extensions, Some(vec![]));
        assert_eq!(message.reference_task_ids, Some(vec![]));
    }
}

mod v03_fixtures {
    use super::*;

    #[test]
    fn message_send_request() {
        let request: Request = round_trip_fixture("v03_message_send_request_reconstructed.json");
        assert_eq!(request.method, method::v03::MESSAGE_SEND);
        let params: v03::MessageSendParams = round_trip(&request.params.unwrap());
        assert_eq!(params.message.role, v03::Role::User);
        assert_eq!(params.message.parts, [v03::Part::Text { text: "hi".to_owned(), metadata: None }]);
    }

    #[test]
    fn message_send_response() {
        let response: Response<v03::SendMessageResult> = round_trip_fixture("v03_message_send_response.json");
        let v03::SendMessageResult::Task(task) = result(response) else {
            panic!("expected a task");
        };
        assert_eq!(task.status.state, v03::TaskState::Completed);
        assert_eq!(task.history[0].message_id, "m1");
        assert_eq!(task.history[0].role, v03::Role::User);
    }

    #[test]
    fn stream_events_are_told_apart_by_kind() {
        let events: Vec<Response<v03::StreamEvent>> = round_trip_each("v03_stream_events.json");
        let events: Vec<_> = events.into_iter().map(result).collect();
        let [
            v03::StreamEvent::Task(task),
            v03::StreamEvent::StatusUpdate(working),
            v03::StreamEvent::ArtifactUpdate(artifact),
            v03::StreamEvent::StatusUpdate(completed),
        ] = events.as_slice()
        else {
            panic!("unexpected event sequence: {events:#?}");
        };
        assert_eq!(task.status.state, v03::TaskState::Submitted);
        assert_eq!((working.status.state, working.r#final), (v03::TaskState::Working, false));
        assert_eq!((artifact.append, artifact.last_chunk), (Some(false), Some(false)));
        assert_eq!((completed.status.state, completed.r#final), (v03::TaskState::Completed, true));
    }

    #[test]
    fn a_message_result_is_not_mistaken_for_a_task() {
        let json = json!({"kind": "message", "messageId": "a1", "role": "agent",
            "parts": [{"kind": "data", "data": {"n": 1}}]});
        assert!(matches!(round_trip::<v03::SendMessageResult>(&json), v03::SendMessageResult::Message(_)));
        assert!(matches!(round_trip::<v03::StreamEvent>(&json), v03::StreamEvent::Message(_)));
    }
}

mod errors {
    use super::*;

    /// The fixture parses, round-trips, and equals what our constructor builds.
    fn assert_error(name: &str, built: Response) {
        let captured: Response = round_trip_fixture(name);
        assert_eq!(captured, built, "{name}");
        assert_eq!(serde_json::to_value(&built).unwrap(), fixture(name), "{name}");
    }

    fn v1_error(id: i64, code: A2aErrorCode, message: &str) -> Response {
        Response::error(Id::from(id), ErrorObject::with_error_info(code, message))
    }

    #[test]
    fn version_not_supported() {
        let missing_header = version_not_supported_message("0.3", "1.0");
        assert_eq!(missing_header, "A2A version '0.3' is not supported by this handler. Expected version '1.0'.");
        assert_error(
            "error_v1_version_header_missing.json",
            v1_error(2, A2aErrorCode::VersionNotSupported, &missing_header),
        );
        assert_error(
            "error_v1_version_2_0.json",
            v1_error(7, A2aErrorCode::VersionNotSupported, &version_not_supported_message("2.0", "1.0")),
        );
    }

    #[test]
    fn v1_a2a_errors_carry_error_info() {
        for (name, id, code) in [
            ("error_v1_task_not_found.json", 4, A2aErrorCode::TaskNotFound),
            ("error_v1_task_not_cancelable.json", 9, A2aErrorCode::TaskNotCancelable),
            ("error_v1_push_not_supported.json", 10, A2aErrorCode::PushNotificationNotSupported),
        ] {
            assert_error(name, v1_error(id, code, code.default_message()));
        }
    }

    #[test]
    fn v03_errors_have_null_data() {
        let task_not_found = A2aErrorCode::TaskNotFound;
        assert_error(
            "error_v03_task_not_found.json",
            Response::error(Id::from(5), ErrorObject::with_null_data(task_not_found, task_not_found.default_message())),
        );
        // The SDK's 0.3 handler reports a wrong version header as an internal error.
        assert_error(
            "error_v03_version_not_supported.json",
            Response::error(
                Id::from(3),
                ErrorObject::with_null_data(A2aErrorCode::InternalError, version_not_supported_message("1.0", "0.3")),
            ),
        );
    }

    #[test]
    fn protocol_errors_have_no_data() {
        let method_not_found = A2aErrorCode::MethodNotFound;
        assert_error(
            "error_method_not_found.json",
            Response::error(Id::from(6), ErrorObject::new(method_not_found, method_not_found.default_message())),
        );
        assert_error(
            "error_parse.json",
            Response::error(
                Id::Null,
                ErrorObject::new(
                    A2aErrorCode::ParseError,
                    "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
                ),
            ),
        );
    }

    #[test]
    fn rest_error_bodies() {
        let task_not_found = A2aErrorCode::TaskNotFound;
        let body: RestErrorBody = round_trip_fixture("rest_error_task_not_found.json");
        assert_eq!(body, RestErrorBody::new(task_not_found, task_not_found.default_message()));
        assert_eq!(body.error.code, 404);

        let body: RestErrorBody = round_trip_fixture("rest_error_version_not_supported.json");
        assert_eq!(
            body,
            RestErrorBody::new(A2aErrorCode::VersionNotSupported, version_not_supported_message("0.3", "1.0"))
        );
    }

    #[test]
    fn rest_validation_error_keeps_every_detail() {
        let body: RestErrorBody = round_trip_fixture("rest_error_invalid_params.json");
        assert_eq!(body.error.details.len(), 2);
        let reason = body.error.details[0]["reason"].as_str().unwrap();
        let code = A2aErrorCode::from_reason(reason).unwrap();
        assert_eq!(code, A2aErrorCode::InvalidParams);
        assert_eq!((body.error.code, body.error.status.as_str()), (code.http_status(), code.grpc_status()));
    }
}

mod error_catalogue {
    use super::*;

    #[test]
    fn codes_and_http_statuses_follow_the_spec_table() {
        let table: Vec<_> =
            A2aErrorCode::ALL.into_iter().map(|code| (code.code(), code.http_status(), code.grpc_status())).collect();
        assert_eq!(
            table,
            [
                (-32700, 400, "INVALID_ARGUMENT"),
                (-32600, 400, "INVALID_ARGUMENT"),
                (-32601, 404, "NOT_FOUND"),
                (-32602, 400, "INVALID_ARGUMENT"),
                (-32603, 500, "INTERNAL"),
                (-32001, 404, "NOT_FOUND"),
                (-32002, 409, "FAILED_PRECONDITION"),
                (-32003, 400, "FAILED_PRECONDITION"),
                (-32004, 400, "FAILED_PRECONDITION"),
                (-32005, 415, "INVALID_ARGUMENT"),
                (-32006, 502, "INTERNAL"),
                (-32007, 400, "FAILED_PRECONDITION"),
                (-32008, 400, "FAILED_PRECONDITION"),
                (-32009, 400, "FAILED_PRECONDITION"),
            ]
        );
    }

    #[test]
    fn every_code_is_found_by_number_and_by_reason() {
        for code in A2aErrorCode::ALL {
            assert_eq!(A2aErrorCode::from_code(code.code()), Some(code));
            assert_eq!(A2aErrorCode::from_reason(code.reason()), Some(code));
        }
        assert_eq!(A2aErrorCode::from_code(-32010), None);
        assert_eq!(A2aErrorCode::from_reason("NOPE"), None);
    }

    #[test]
    fn error_info_is_the_google_rpc_detail() {
        assert_eq!(
            A2aErrorCode::ExtensionSupportRequired.error_details(),
            [json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "EXTENSION_SUPPORT_REQUIRED",
                "domain": "a2a-protocol.org",
                "metadata": {}
            })]
        );
    }
}

mod envelope {
    use super::*;

    #[test]
    fn absent_and_null_ids_stay_distinct() {
        let notification: Request = serde_json::from_value(json!({"jsonrpc": "2.0", "method": "GetTask"})).unwrap();
        assert_eq!(notification.id, None);
        let null_id: Request =
            serde_json::from_value(json!({"jsonrpc": "2.0", "id": null, "method": "GetTask"})).unwrap();
        assert_eq!(null_id.id, Some(Id::Null));
        assert_eq!(serde_json::to_value(&notification).unwrap(), json!({"jsonrpc": "2.0", "method": "GetTask"}));
    }

    #[test]
    fn only_version_2_0_is_accepted() {
        let error =
            serde_json::from_value::<Request>(json!({"jsonrpc": "1.0", "id": 1, "method": "GetTask"})).unwrap_err();
        assert!(error.to_string().contains("2.0"), "{error}");
    }

    #[test]
    fn request_constructor_and_typed_results() {
        let params = json!({"id": "t1", "historyLength": 2});
        let request = Request::new("r1", method::v1::GET_TASK, Some(params.clone()));
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            json!({"jsonrpc": "2.0", "id": "r1", "method": "GetTask", "params": params})
        );
        let get: v1::GetTaskRequest = round_trip(&params);
        assert_eq!(get.history_length, Some(2));

        let response = Response::result(Id::from("r1"), json!({"ok": true}));
        assert_eq!(
            serde_json::to_value(&response).unwrap(),
            json!({"jsonrpc": "2.0", "id": "r1", "result": {"ok": true}})
        );
        let failed: Response<v1::Task> = serde_json::from_value(
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "Task not found"}}),
        )
        .unwrap();
        assert!(matches!(&failed.outcome, Outcome::Error(e) if e.data.is_none()));
        assert_eq!(failed.into_result().unwrap_err().code, -32001);
    }
}

mod model {
    use super::*;

    #[test]
    fn task_states_on_the_wire_and_their_classes() {
        use v1::TaskState::*;
        let states =
            [Unspecified, Submitted, Working, Completed, Failed, Canceled, InputRequired, Rejected, AuthRequired];
        let wire: Vec<_> = states.iter().map(|state| serde_json::to_value(state).unwrap()).collect();
        assert_eq!(
            wire,
            [
                "TASK_STATE_UNSPECIFIED",
                "TASK_STATE_SUBMITTED",
                "TASK_STATE_WORKING",
                "TASK_STATE_COMPLETED",
                "TASK_STATE_FAILED",
                "TASK_STATE_CANCELED",
                "TASK_STATE_INPUT_REQUIRED",
                "TASK_STATE_REJECTED",
                "TASK_STATE_AUTH_REQUIRED",
            ]
        );
        let named: Vec<_> = states.iter().map(|state| state.as_str()).collect();
        assert_eq!(wire, named, "as_str spells each state as it is serialized");
        let terminal: Vec<_> = states.into_iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(terminal, [Completed, Failed, Canceled, Rejected]);
        let interrupted: Vec<_> = states.into_iter().filter(|s| s.is_interrupted()).collect();
        assert_eq!(interrupted, [InputRequired, AuthRequired]);
    }

    #[test]
    fn role_unspecified_is_rejected() {
        assert!(serde_json::from_value::<v1::Role>(json!("ROLE_UNSPECIFIED")).is_err());
        assert_eq!(serde_json::to_value(v1::Role::Agent).unwrap(), "ROLE_AGENT");
    }

    #[test]
    fn part_helpers_and_shapes() {
        let data = json!({"rows": [1, 2]});
        assert_eq!(serde_json::to_value(v1::Part::text("hi")).unwrap(), json!({"text": "hi"}));
        assert_eq!(serde_json::to_value(v1::Part::data(data.clone())).unwrap(), json!({"data": data}));
        assert_eq!(v1::Part::data(data.clone()).as_data(), Some(&data));
        assert_eq!(v1::Part::data(data).as_text(), None);

        let file: v1::Part = round_trip(&json!({"url": "https://x/a.pdf", "filename": "a.pdf",
            "mediaType": "application/pdf", "metadata": {"k": 1}}));
        assert_eq!(file.content, v1::PartContent::Url("https://x/a.pdf".to_owned()));
        let raw: v1::Part = round_trip(&json!({"raw": "aGk=", "mediaType": "text/plain"}));
        assert_eq!(raw.content, v1::PartContent::Raw("aGk=".to_owned()));
        assert!(serde_json::from_value::<v1::Part>(json!({"filename": "a.pdf"})).is_err());
    }

    #[test]
    fn message_text_constructor() {
        let message = v1::Message::text(v1::Role::Agent, "m2", "hello");
        assert_eq!(
            serde_json::to_value(&message).unwrap(),
            json!({"messageId": "m2", "role": "ROLE_AGENT", "parts": [{"text": "hello"}]})
        );
    }

    #[test]
    fn request_objects_round_trip() {
        round_trip::<v1::ListTasksRequest>(&json!({"contextId": "c1",
            "status": "TASK_STATE_WORKING", "pageSize": 50, "pageToken": "p",
            "historyLength": 0, "statusTimestampAfter": "2026-01-01T00:00:00Z",
            "includeArtifacts": true, "tenant": "t"}));
        round_trip::<v1::CancelTaskRequest>(&json!({"id": "t1", "metadata": {"why": "x"}}));
        round_trip::<v1::SubscribeToTaskRequest>(&json!({"id": "t1"}));
        let send: v1::SendMessageRequest = round_trip(&json!({
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
            "configuration": {"acceptedOutputModes": ["text/plain"], "historyLength": 3,
                "returnImmediately": true, "taskPushNotificationConfig": {"url": "https://hook",
                "token": "tok", "authentication": {"scheme": "Bearer", "credentials": "c"}}}}));
        assert!(send.configuration.unwrap().return_immediately);
    }
}

mod conversions {
    use super::*;

    fn v03_task() -> v03::Task {
        let response: Response<v03::SendMessageResult> = round_trip_fixture("v03_message_send_response.json");
        match result(response) {
            v03::SendMessageResult::Task(task) => task,
            other => panic!("expected a task: {other:?}"),
        }
    }

    #[test]
    fn a_captured_v03_task_survives_v1_and_back() {
        let original = v03_task();
        let task = v1::Task::from(original.clone());
        assert_eq!(
            serde_json::to_value(&task).unwrap(),
            json!({
                "id": "c9d5539c-bceb-451d-b66f-66c2fa02e9c0",
                "contextId": "da78401f-7229-4711-b5f8-9755c4f62fd5",
                "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-11-22T04:08:52.469485Z"},
                "artifacts": [{"artifactId": "41983079-2712-4114-8913-cac79c6d4222", "name": "echo",
                    "parts": [{"text": "echo: hi"}]}],
                "history": [{"messageId": "m1", "contextId": "da78401f-7229-4711-b5f8-9755c4f62fd5",
                    "taskId": "c9d5539c-bceb-451d-b66f-66c2fa02e9c0", "role": "ROLE_USER",
                    "parts": [{"text": "hi"}]}]
            })
        );
        assert_eq!(v03::Task::from(task), original);
    }

    #[test]
    fn captured_v03_stream_survives_v1_and_back() {
        for json in fixture("v03_stream_events.json").as_array().unwrap() {
            let event: v03::StreamEvent = serde_json::from_value(json["result"].clone()).unwrap();
            let back = v03::StreamEvent::from(v1::StreamResponse::from(event));
            assert_eq!(serde_json::to_value(back).unwrap(), json["result"]);
        }
    }

    #[test]
    fn captured_v1_stream_survives_v03_and_back() {
        for json in fixture("v1_rest_stream_events.json").as_array().unwrap() {
            let event: v1::StreamResponse = serde_json::from_value(json.clone()).unwrap();
            let back = v1::StreamResponse::from(v03::StreamEvent::from(event));
            assert_eq!(serde_json::to_value(back).unwrap(), *json);
        }
    }

    #[test]
    fn a_push_config_keeps_its_task_and_webhook_both_ways() {
        let old: v03::TaskPushNotificationConfig = serde_json::from_value(json!({
            "taskId": "task-1",
            "pushNotificationConfig": {"id": "c1", "url": "http://hook.test/", "token": "t",
                "authentication": {"schemes": ["Bearer"], "credentials": "secret"}}
        }))
        .unwrap();
        let new = v1::TaskPushNotificationConfig::from(old.clone());
        assert_eq!(
            serde_json::to_value(&new).unwrap(),
            json!({"id": "c1", "taskId": "task-1", "url": "http://hook.test/", "token": "t",
                "authentication": {"scheme": "Bearer", "credentials": "secret"}})
        );
        assert_eq!(v03::TaskPushNotificationConfig::from(new), old);
    }

    #[test]
    fn every_state_and_role_maps_both_ways() {
        let pairs = [
            (v03::TaskState::Submitted, v1::TaskState::Submitted),
            (v03::TaskState::Working, v1::TaskState::Working),
            (v03::TaskState::InputRequired, v1::TaskState::InputRequired),
            (v03::TaskState::Completed, v1::TaskState::Completed),
            (v03::TaskState::Canceled, v1::TaskState::Canceled),
            (v03::TaskState::Failed, v1::TaskState::Failed),
            (v03::TaskState::Rejected, v1::TaskState::Rejected),
            (v03::TaskState::AuthRequired, v1::TaskState::AuthRequired),
            (v03::TaskState::Unknown, v1::TaskState::Unspecified),
        ];
        for (old, new) in pairs {
            assert_eq!(v1::TaskState::from(old), new);
            assert_eq!(v03::TaskState::from(new), old);
        }
        let kebab: Vec<_> = pairs.iter().map(|(old, _)| serde_json::to_value(old).unwrap()).collect();
        assert_eq!(
            kebab,
            [
                "submitted",
                "working",
                "input-required",
                "completed",
                "canceled",
                "failed",
                "rejected",
                "auth-required",
                "unknown",
            ]
        );
        for (old, new) in [(v03::Role::User, v1::Role::User), (v03::Role::Agent, v1::Role::Agent)] {
            assert_eq!(v1::Role::from(old), new);
            assert_eq!(v03::Role::from(new), old);
        }
    }

    fn v1_part(json: Value) -> v1::Part {
        serde_json::from_value(json).unwrap()
    }

    fn to_v03(part: &v1::Part) -> Value {
        serde_json::to_value(v03::Part::from(part.clone())).unwrap()
    }

    #[test]
    fn file_parts_nest_under_file_and_come_back() {
        let raw = v1_part(json!({"raw": "aGk=", "filename": "hi.txt", "mediaType": "text/plain"}));
        assert_eq!(
            to_v03(&raw),
            json!({"kind": "file", "file": {"bytes": "aGk=", "name": "hi.txt", "mimeType": "text/plain"}})
        );
        assert_eq!(v1::Part::from(v03::Part::from(raw.clone())), raw);

        let url = v1_part(json!({"url": "https://x/y.png", "metadata": {"k": "v"}}));
        assert_eq!(to_v03(&url), json!({"kind": "file", "file": {"uri": "https://x/y.png"}, "metadata": {"k": "v"}}));
        assert_eq!(v1::Part::from(v03::Part::from(url.clone())), url);
    }

    #[test]
    fn non_object_data_is_wrapped_for_v03_and_unwrapped_back() {
        let list = v1_part(json!({"data": [1, 2], "metadata": {"source": "db"}}));
        assert_eq!(
            to_v03(&list),
            json!({"kind": "data", "data": {"value": [1, 2]},
                "metadata": {"source": "db", "data_part_compat": true}})
        );
        assert_eq!(v1::Part::from(v03::Part::from(list.clone())), list);

        let bare = v1::Part::data(json!("just a string"));
        assert_eq!(v1::Part::from(v03::Part::from(bare.clone())), bare);

        let object = v1::Part::data(json!({"value": 1}));
        assert_eq!(to_v03(&object), json!({"kind": "data", "data": {"value": 1}}));
        assert_eq!(v1::Part::from(v03::Part::from(object.clone())), object);
    }

    #[test]
    fn what_v03_cannot_say_is_dropped() {
        let text = v1_part(json!({"text": "# hi", "mediaType": "text/markdown", "filename": ""}));
        assert_eq!(to_v03(&text), json!({"kind": "text", "text": "# hi"}));
        let unnamed = v1_part(json!({"url": "https://x", "filename": "", "mediaType": ""}));
        assert_eq!(to_v03(&unnamed), json!({"kind": "file", "file": {"uri": "https://x"}}));
    }

    #[test]
    fn final_is_derived_from_the_state() {
        let event = |state| v1::TaskStatusUpdateEvent {
            task_id: "t".to_owned(),
            context_id: "c".to_owned(),
            status: v1::TaskStatus { state, message: None, timestamp: None },
            metadata: None,
        };
        let is_final = |state| v03::TaskStatusUpdateEvent::from(event(state)).r#final;
        assert!(!is_final(v1::TaskState::Working));
        assert!(is_final(v1::TaskState::InputRequired));
        assert!(is_final(v1::TaskState::Failed));
    }

    #[test]
    fn message_send_params_become_a_send_message_request() {
        let params: v03::MessageSendParams = serde_json::from_value(json!({
            "message": {"kind": "message", "messageId": "m", "role": "user",
                "parts": [{"kind": "text", "text": "x"}], "referenceTaskIds": ["t0"]},
            "configuration": {"blocking": false, "historyLength": 2,
                "acceptedOutputModes": ["text/plain"],
                "pushNotificationConfig": {"url": "https://hook", "id": "p1",
                    "authentication": {"schemes": ["Bearer", "Basic"], "credentials": "c"}}},
            "metadata": {"trace": "1"}
        }))
        .unwrap();
        let request = v1::SendMessageRequest::from(params);
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            json!({
                "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}],
                    "referenceTaskIds": ["t0"]},
                "configuration": {"acceptedOutputModes": ["text/plain"], "historyLength": 2,
                    "returnImmediately": true,
                    "taskPushNotificationConfig": {"id": "p1", "url": "https://hook",
                        "authentication": {"scheme": "Bearer", "credentials": "c"}}},
                "metadata": {"trace": "1"}
            })
        );
        let blocking_by_default = v03::MessageSendConfiguration::default();
        assert!(!v1::SendMessageConfiguration::from(blocking_by_default).return_immediately);
        let back = v03::MessageSendParams::from(request);
        assert_eq!(back.configuration.unwrap().blocking, Some(false));
    }

    #[test]
    fn task_id_params_become_v1_requests() {
        // 0.3 clients read a historyLength of 0 as no limit; 1.0's 0 would mean no history.
        for (sent, asked) in [(json!(0), None), (json!(2), Some(2))] {
            let params: v03::TaskQueryParams =
                serde_json::from_value(json!({"id": "t1", "historyLength": sent})).unwrap();
            assert_eq!(
                v1::GetTaskRequest::from(params),
                v1::GetTaskRequest { tenant: None, id: "t1".to_owned(), history_length: asked }
            );
        }
        let params: v03::TaskIdParams = serde_json::from_value(json!({"id": "t1", "metadata": {"a": 1}})).unwrap();
        assert_eq!(v1::SubscribeToTaskRequest::from(params.clone()).id, "t1");
        assert_eq!(
            serde_json::to_value(v1::CancelTaskRequest::from(params)).unwrap(),
            json!({"id": "t1", "metadata": {"a": 1}})
        );
    }
}
