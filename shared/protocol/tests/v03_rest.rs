//! Wire-format tests of A2A 0.3 over HTTP+JSON (`mesh_protocol::a2a::v03_rest`) against traffic
//! captured between the official SDK's 0.3 HTTP+JSON client and its server (a2a-sdk 1.3.0, the
//! echo agent of `tests/interop` with extra behaviours keyed by messageId prefix).
//!
//! Every `v03_rest_*.json` fixture is verbatim (one SSE `data:` payload per array element), except
//! `v03_rest_send_request_canonical.json`: the SDK's protobuf rendering of the captured request
//! with JSON names (`json_format.MessageToDict(Parse(capture))`), i.e. what our serializer must
//! write for it. The `*_v1.json` fixtures are the same tasks and events read back at the same
//! moment over the 1.0 HTTP+JSON binding, so converting them must give the 0.3 capture exactly.

use std::path::Path;

use mesh_protocol::a2a::{v1, v03_rest};
use mesh_protocol::jsonrpc::{A2aErrorCode, RestErrorBody};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn parse<T: DeserializeOwned>(json: &Value) -> T {
    serde_json::from_str(&json.to_string())
        .unwrap_or_else(|error| panic!("does not parse as {}: {error}\n{json:#}", std::any::type_name::<T>()))
}

/// Parses `json` as `T`, asserts that serializing it gives back exactly `json`, returns it.
fn round_trip<T: DeserializeOwned + Serialize>(json: &Value) -> T {
    let typed: T = parse(json);
    assert_eq!(serde_json::to_value(&typed).unwrap(), *json, "{} does not round-trip", std::any::type_name::<T>());
    typed
}

fn round_trip_fixture<T: DeserializeOwned + Serialize>(name: &str) -> T {
    round_trip(&fixture(name))
}

fn array(name: &str) -> Vec<Value> {
    match fixture(name) {
        Value::Array(items) => items,
        other => panic!("{name} is not an array: {other}"),
    }
}

/// Asserts that `value` serializes to exactly the JSON of fixture `name`.
fn assert_renders<T: Serialize>(value: &T, name: &str) {
    assert_eq!(serde_json::to_value(value).unwrap(), fixture(name), "does not render as {name}");
}

mod requests {
    use super::*;

    #[test]
    fn the_sdk_clients_proto_field_names_parse_and_serialize_as_json_names() {
        // The SDK client writes `request`, `message_id`, `file_with_bytes`, `history_length`...
        let captured = fixture("v03_rest_send_request.json");
        assert!(captured["request"]["message_id"].is_string());
        let request: v03_rest::SendMessageRequest = parse(&captured);
        assert_renders(&request, "v03_rest_send_request_canonical.json");
        let canonical: v03_rest::SendMessageRequest = round_trip_fixture("v03_rest_send_request_canonical.json");
        assert_eq!(canonical, request);
    }

    #[test]
    fn every_part_kind_converts_to_what_the_sdk_server_stored() {
        let request: v03_rest::SendMessageRequest = parse(&fixture("v03_rest_send_request.json"));
        let request = v1::SendMessageRequest::from(request);
        // The server's 1.0 view of the same message, read back from the task's history; the
        // server only added the ids it assigned.
        let stored: v1::Task = parse(&fixture("v03_rest_get_task_v1.json"));
        let mut expected = stored.history[0].clone();
        (expected.context_id, expected.task_id) = (None, None);
        assert_eq!(request.message, expected);
        // Including the double-base64 file, the unwrapped non-object data and the dropped
        // mediaType of a text part.
        let raw = &request.message.parts[1];
        assert_eq!(raw.content, v1::PartContent::Raw("AAFiaW5hcnn/".to_owned()));
        assert_eq!(request.message.parts[4].as_data(), Some(&json!([1.0, 2.0, 3.0])));
        assert_eq!(request.message.parts[4].metadata, None);

        let configuration = request.configuration.expect("configuration");
        assert_eq!(configuration.accepted_output_modes, ["text/plain", "application/json"]);
        assert_eq!(configuration.history_length, Some(5));
        assert!(!configuration.return_immediately);
        assert_eq!(request.metadata, Some(json!({"request_meta": "yes"}).as_object().unwrap().clone()));
        assert_eq!(request.tenant, None);
    }

    #[test]
    fn blocking_is_false_unless_written_but_no_configuration_blocks() {
        // Parsed only: these captures carry the client's proto field names (see above).
        let return_immediately = |json: Value| {
            let request: v03_rest::SendMessageRequest = parse(&json);
            v1::SendMessageRequest::from(request).configuration.map(|config| config.return_immediately)
        };
        // The SDK client's default send and its return-immediately send.
        assert_eq!(return_immediately(fixture("v03_rest_stream_request.json")), Some(false));
        let nonblocking = fixture("v03_rest_send_nonblocking_request.json");
        assert_eq!(nonblocking["configuration"], json!({}));
        assert_eq!(return_immediately(nonblocking), Some(true));
        let mut bare = fixture("v03_rest_stream_request.json");
        bare.as_object_mut().unwrap().remove("configuration");
        assert_eq!(return_immediately(bare), None);
    }

    #[test]
    fn history_length_zero_means_no_limit() {
        let mut json = fixture("v03_rest_stream_request.json");
        json["configuration"]["history_length"] = json!(0);
        let request = v1::SendMessageRequest::from(parse::<v03_rest::SendMessageRequest>(&json));
        assert_eq!(request.configuration.unwrap().history_length, None);
    }

    #[test]
    fn file_bytes_that_are_not_base64_text_are_refused() {
        let with_bytes = |bytes: &str| {
            json!({"message": {"messageId": "m", "role": "ROLE_USER",
                "content": [{"file": {"fileWithBytes": bytes}}]}})
        };
        // Once-encoded binary content (the SDK answers 500 to it) and plain garbage.
        for bad in ["AAFiaW5hcnn/", "not base64!"] {
            let parsed = serde_json::from_value::<v03_rest::SendMessageRequest>(with_bytes(bad));
            assert!(parsed.is_err(), "{bad} parsed");
        }
        // URL-safe and unpadded spellings of "AAFi" are accepted, as by protobuf's parser.
        for good in ["QUFGaQ==", "QUFGaQ"] {
            let request: v03_rest::SendMessageRequest = serde_json::from_value(with_bytes(good)).unwrap();
            let request = v1::SendMessageRequest::from(request);
            assert_eq!(request.message.parts[0].content, v1::PartContent::Raw("AAFi".to_owned()));
        }
    }
}

mod responses {
    use super::*;

    #[test]
    fn send_answer_with_a_task_matches_the_1_0_task_converted() {
        let captured: v03_rest::SendMessageResponse = round_trip_fixture("v03_rest_send_response.json");
        let v03_rest::SendMessageResponse::Task(task) = &captured else { panic!("expected a task") };
        assert_eq!(task.status.state, v03_rest::TaskState::Completed);
        assert_eq!(task.history[0].content.len(), 6);

        let task: v1::Task = round_trip_fixture("v03_rest_get_task_v1.json");
        let converted = v03_rest::SendMessageResponse::from(v1::SendMessageResponse::Task(task.clone()));
        assert_eq!(converted, captured);
        assert_renders(&converted, "v03_rest_send_response.json");
        assert_renders(&v03_rest::Task::from(task), "v03_rest_get_task.json");
        let _: v03_rest::Task = round_trip_fixture("v03_rest_get_task.json");
    }

    #[test]
    fn task_with_status_message_metadata_and_chunked_artifact() {
        let captured: v03_rest::Task = round_trip_fixture("v03_rest_get_task_status_message.json");
        let message = captured.status.message.as_ref().expect("status message");
        assert_eq!(message.role, v1::Role::Agent);
        let task: v1::Task = round_trip_fixture("v03_rest_get_task_status_message_v1.json");
        assert_eq!(v03_rest::Task::from(task), captured);
    }

    #[test]
    fn canceled_is_spelled_cancelled() {
        let captured: v03_rest::Task = round_trip_fixture("v03_rest_cancel_response.json");
        assert_eq!(fixture("v03_rest_cancel_response.json")["status"]["state"], "TASK_STATE_CANCELLED");
        let task: v1::Task = round_trip_fixture("v03_rest_cancel_response_v1.json");
        assert_eq!(task.status.state, v1::TaskState::Canceled);
        assert_eq!(v03_rest::Task::from(task), captured);
    }

    #[test]
    fn send_answer_with_a_message() {
        let captured: v03_rest::SendMessageResponse = round_trip_fixture("v03_rest_message_response.json");
        let v1::SendMessageResponse::Message(message) =
            round_trip_fixture::<v1::SendMessageResponse>("v03_rest_message_response_v1.json")
        else {
            panic!("expected a message");
        };
        assert_eq!(v03_rest::SendMessageResponse::from(v1::SendMessageResponse::Message(message.clone())), captured);
        // The streamed answer to the same request is the same message, alone in its stream.
        let events = array("v03_rest_stream_message_events.json");
        assert_eq!(events.len(), 1);
        let streamed: v03_rest::StreamResponse = round_trip(&events[0]);
        assert_eq!(v03_rest::StreamResponse::from(v1::StreamResponse::Message(message)), streamed);
    }

    #[test]
    fn proto_field_names_of_the_unions_are_accepted() {
        let mut json = fixture("v03_rest_message_response.json");
        let message = json.as_object_mut().unwrap().remove("message").unwrap();
        let renamed: v03_rest::SendMessageResponse = parse(&json!({ "msg": message }));
        assert_eq!(renamed, parse(&fixture("v03_rest_message_response.json")));

        let mut json = fixture("v03_rest_get_task_status_message.json");
        let status = json["status"].as_object_mut().unwrap();
        let message = status.remove("message").unwrap();
        status.insert("update".to_owned(), message);
        let renamed: v03_rest::Task = parse(&json);
        assert_eq!(renamed, parse(&fixture("v03_rest_get_task_status_message.json")));

        let event = &array("v03_rest_subscribe_events.json")[1];
        let renamed: v03_rest::StreamResponse = parse(&json!({ "artifact_update": event["artifactUpdate"] }));
        assert_eq!(renamed, parse(event));
    }
}

mod streams {
    use super::*;

    fn events(name: &str) -> Vec<v03_rest::StreamResponse> {
        array(name).iter().map(round_trip).collect()
    }

    #[test]
    fn message_stream_events_round_trip() {
        let events = events("v03_rest_stream_events.json");
        let kinds: Vec<_> = events
            .iter()
            .map(|event| match event {
                v03_rest::StreamResponse::Task(_) => "task",
                v03_rest::StreamResponse::Message(_) => "message",
                v03_rest::StreamResponse::StatusUpdate(update) if update.r#final => "final status",
                v03_rest::StreamResponse::StatusUpdate(_) => "status",
                v03_rest::StreamResponse::ArtifactUpdate(_) => "artifact",
            })
            .collect();
        assert_eq!(kinds, ["task", "status", "artifact", "final status"]);
    }

    #[test]
    fn subscription_events_match_the_1_0_subscription_converted() {
        let captured = events("v03_rest_subscribe_events.json");
        let v1_events: Vec<v1::StreamResponse> =
            array("v03_rest_subscribe_events_v1.json").iter().map(round_trip).collect();
        assert_eq!(v1_events.len(), captured.len());
        for (v1_event, captured) in v1_events.into_iter().zip(captured) {
            assert_eq!(v03_rest::StreamResponse::from(v1_event), captured);
        }
    }

    #[test]
    fn final_is_set_on_terminal_states_only() {
        // The SDK ends an input-required stream without a final event.
        let captured = events("v03_rest_stream_input_required_events.json");
        let Some(v03_rest::StreamResponse::StatusUpdate(last)) = captured.last() else {
            panic!("expected a status update last");
        };
        assert_eq!((last.status.state, last.r#final), (v03_rest::TaskState::InputRequired, false));

        let v1::StreamResponse::StatusUpdate(completed) =
            parse::<v1::StreamResponse>(array("v03_rest_subscribe_events_v1.json").last().unwrap())
        else {
            panic!("expected a status update last");
        };
        let is_final = |state| {
            let mut event = completed.clone();
            event.status.state = state;
            v03_rest::TaskStatusUpdateEvent::from(event).r#final
        };
        for state in [v1::TaskState::Completed, v1::TaskState::Canceled, v1::TaskState::Failed, v1::TaskState::Rejected]
        {
            assert!(is_final(state), "{state:?}");
        }
        for state in [v1::TaskState::Working, v1::TaskState::InputRequired, v1::TaskState::AuthRequired] {
            assert!(!is_final(state), "{state:?}");
        }
    }
}

mod errors {
    use super::*;

    /// The 0.3 binding answers errors in the same `google.rpc.Status` body as 1.0. `code` (the
    /// HTTP status) is not compared: the SDK answers TaskNotCancelable with 400, where our
    /// catalogue follows the spec's 409.
    #[test]
    fn error_bodies_are_the_1_0_rest_bodies() {
        for (name, code, message) in [
            ("v03_rest_error_task_not_found.json", A2aErrorCode::TaskNotFound, "Task not found"),
            ("v03_rest_error_task_not_cancelable.json", A2aErrorCode::TaskNotCancelable, "Task cannot be canceled"),
            (
                "v03_rest_error_extended_card.json",
                A2aErrorCode::UnsupportedOperation,
                "The agent does not support authenticated extended cards",
            ),
        ] {
            let body: RestErrorBody = round_trip_fixture(name);
            let ours = RestErrorBody::new(code, message);
            assert_eq!((&body.error.status, &body.error.details), (&ours.error.status, &ours.error.details), "{name}");
        }
    }
}
