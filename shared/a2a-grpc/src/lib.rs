//! The wire of A2A's gRPC binding (service `lf.a2a.v1.A2AService`, A2A 1.0).
//!
//! The messages are not generated into Rust types: every A2A 1.0 message's JSON form in the other
//! bindings is its ProtoJSON form, so a gRPC request is decoded with the service's descriptors
//! into ProtoJSON and read by the same serde types as a JSON-RPC request, and an answer is written
//! back the same way. One set of wire types serves all three bindings.
//!
//! - [`method`]: a method of the service by name, with its request and response descriptors.
//! - [`decode_json`] / [`encode_json`]: a message between its protobuf bytes and ProtoJSON.
//! - [`status`]: an A2A error as a gRPC status with the `google.rpc.ErrorInfo` the SDKs read.
//! - [`BytesCodec`]: a tonic codec that leaves the messages as bytes, for the above.
//! - [`GrpcClient`]: calls an A2A agent over gRPC with ProtoJSON requests and answers.

mod client;
mod codec;

use std::sync::LazyLock;

use bytes::Bytes;
use mesh_protocol::jsonrpc::A2aErrorCode;
use prost::Message as _;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, SerializeOptions};
use serde_json::Value;

pub use client::GrpcClient;
pub use codec::BytesCodec;
pub use prost_reflect::{MessageDescriptor, MethodDescriptor};

/// The A2A service's full name; its methods are served at `/{SERVICE}/{method}`.
pub const SERVICE: &str = "lf.a2a.v1.A2AService";

/// The descriptors of `proto/a2a.proto` and the well-known types it imports, compiled by
/// `build.rs`.
static DESCRIPTORS: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(include_bytes!(concat!(env!("OUT_DIR"), "/a2a_descriptor_set.bin")).as_ref())
        .expect("the descriptor set compiled by build.rs decodes")
});

/// Why a message could not cross between protobuf and ProtoJSON.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("the message is not a valid {message}: {detail}")]
    Decode { message: String, detail: String },
    #[error("the answer does not fit {message}: {detail}")]
    Encode { message: String, detail: String },
    #[error("invalid gRPC address {0:?}: {1}")]
    Address(String, String),
}

/// The service's method called `name` (`SendMessage`, `SubscribeToTask`, ...), if it has one.
pub fn method(name: &str) -> Option<MethodDescriptor> {
    DESCRIPTORS.get_service_by_name(SERVICE)?.methods().find(|method| method.name() == name)
}

/// A message from its protobuf bytes to its ProtoJSON form (camelCase names, enums by name,
/// defaults left out), as the JSON bindings carry it.
pub fn decode_json(message: &MessageDescriptor, bytes: Bytes) -> Result<Value, WireError> {
    let failed = |detail: String| WireError::Decode { message: message.full_name().to_owned(), detail };
    let decoded = DynamicMessage::decode(message.clone(), bytes).map_err(|e| failed(e.to_string()))?;
    decoded
        .serialize_with_options(serde_json::value::Serializer, &SerializeOptions::new())
        .map_err(|e| failed(e.to_string()))
}

/// A message from ProtoJSON to its protobuf bytes. Members the message does not define are left
/// out: the JSON bindings' answers carry the 0.3 card fields beside the 1.0 ones.
pub fn encode_json(message: &MessageDescriptor, json: Value) -> Result<Bytes, WireError> {
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let encoded = DynamicMessage::deserialize_with_options(message.clone(), json, &options)
        .map_err(|e| WireError::Encode { message: message.full_name().to_owned(), detail: e.to_string() })?;
    Ok(Bytes::from(encoded.encode_to_vec()))
}

/// An A2A error as the gRPC status the spec's table gives for it, with the error's
/// `google.rpc.ErrorInfo` (reason and domain) in its details, as the official SDKs send and read it.
pub fn status(code: A2aErrorCode, message: impl Into<String>) -> tonic::Status {
    use tonic_types::{ErrorDetails, StatusExt};
    let details = ErrorDetails::with_error_info(code.reason(), mesh_protocol::jsonrpc::ERROR_DOMAIN, []);
    tonic::Status::with_error_details(grpc_code(code), message, details)
}

/// The A2A error a gRPC status carries, read from its `ErrorInfo` reason; `None` for a status
/// that is not an A2A error (a transport failure, say).
pub fn a2a_error(status: &tonic::Status) -> Option<A2aErrorCode> {
    use tonic_types::StatusExt;
    let info = status.get_details_error_info()?;
    (info.domain == mesh_protocol::jsonrpc::ERROR_DOMAIN).then(|| A2aErrorCode::from_reason(&info.reason)).flatten()
}

/// The gRPC code of an A2A error, as the spec's table (§5.4) gives it. Three differ from the
/// `status` the HTTP+JSON binding writes (`A2aErrorCode::grpc_status`, which follows the official
/// SDK's traffic): push notifications not supported, an unsupported operation and an unsupported
/// version are `UNIMPLEMENTED` here, as the spec and its conformance kit (GRPC-ERR-002) require.
fn grpc_code(code: A2aErrorCode) -> tonic::Code {
    use tonic::Code;
    match code {
        A2aErrorCode::ParseError
        | A2aErrorCode::InvalidRequest
        | A2aErrorCode::InvalidParams
        | A2aErrorCode::ContentTypeNotSupported => Code::InvalidArgument,
        A2aErrorCode::MethodNotFound | A2aErrorCode::TaskNotFound => Code::NotFound,
        A2aErrorCode::InternalError | A2aErrorCode::InvalidAgentResponse => Code::Internal,
        A2aErrorCode::TaskNotCancelable
        | A2aErrorCode::ExtendedAgentCardNotConfigured
        | A2aErrorCode::ExtensionSupportRequired => Code::FailedPrecondition,
        A2aErrorCode::PushNotificationNotSupported
        | A2aErrorCode::UnsupportedOperation
        | A2aErrorCode::VersionNotSupported => Code::Unimplemented,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn output(name: &str) -> MessageDescriptor {
        method(name).unwrap().output()
    }

    #[test]
    fn every_method_of_the_a2a_service_is_described_with_its_streaming() {
        use mesh_protocol::jsonrpc::method::v1;
        let unary = [
            v1::SEND_MESSAGE,
            v1::GET_TASK,
            v1::LIST_TASKS,
            v1::CANCEL_TASK,
            v1::CREATE_TASK_PUSH_NOTIFICATION_CONFIG,
            v1::GET_TASK_PUSH_NOTIFICATION_CONFIG,
            v1::LIST_TASK_PUSH_NOTIFICATION_CONFIGS,
            v1::DELETE_TASK_PUSH_NOTIFICATION_CONFIG,
            v1::GET_EXTENDED_AGENT_CARD,
        ];
        for name in unary {
            let found = method(name).unwrap_or_else(|| panic!("{name} is not in the service"));
            assert!(!found.is_server_streaming() && !found.is_client_streaming(), "{name}");
        }
        for name in [v1::SEND_STREAMING_MESSAGE, v1::SUBSCRIBE_TO_TASK] {
            assert!(method(name).unwrap().is_server_streaming(), "{name}");
        }
        assert_eq!(DESCRIPTORS.get_service_by_name(SERVICE).unwrap().methods().len(), unary.len() + 2);
        assert!(method("message/send").is_none());
    }

    #[test]
    fn a_task_crosses_to_protobuf_and_back_as_the_same_protojson() {
        let task = json!({
            "id": "t-1",
            "contextId": "c-1",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-11-25T10:00:00.250Z"},
            "artifacts": [{"artifactId": "a", "parts": [
                {"text": "hello", "mediaType": "text/plain"},
                {"raw": "aGk=", "filename": "hi.bin"},
                {"data": {"n": 1.5, "tags": ["x"], "none": null}},
                {"url": "https://example.org/f"}
            ]}],
            "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}],
            "metadata": {"k": "v"}
        });
        let bytes = encode_json(&output("GetTask"), task.clone()).unwrap();
        assert_eq!(decode_json(&output("GetTask"), bytes).unwrap(), task);
    }

    #[test]
    fn members_the_message_does_not_define_are_left_out() {
        let card = json!({"name": "a", "version": "1", "url": "http://legacy", "preferredTransport": "JSONRPC",
            "capabilities": {"streaming": true}});
        let bytes = encode_json(&output("GetExtendedAgentCard"), card).unwrap();
        assert_eq!(
            decode_json(&output("GetExtendedAgentCard"), bytes).unwrap(),
            json!({"name": "a", "version": "1", "capabilities": {"streaming": true}})
        );
    }

    #[test]
    fn a_wrong_member_type_and_garbage_bytes_are_errors_not_panics() {
        let task = output("GetTask");
        assert!(matches!(encode_json(&task, json!({"id": 5, "status": "no"})), Err(WireError::Encode { .. })));
        let garbage = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(decode_json(&task, garbage), Err(WireError::Decode { .. })));
    }

    #[test]
    fn an_a2a_error_reads_back_from_its_status() {
        for code in A2aErrorCode::ALL {
            let status = status(code, "why");
            assert_eq!(status.message(), "why");
            assert_eq!(status.code(), grpc_code(code), "{code:?}");
            assert_eq!(a2a_error(&status), Some(code));
        }
        // The spec's table (§5.4), row by row.
        let table = [
            (A2aErrorCode::TaskNotFound, tonic::Code::NotFound),
            (A2aErrorCode::TaskNotCancelable, tonic::Code::FailedPrecondition),
            (A2aErrorCode::PushNotificationNotSupported, tonic::Code::Unimplemented),
            (A2aErrorCode::UnsupportedOperation, tonic::Code::Unimplemented),
            (A2aErrorCode::ContentTypeNotSupported, tonic::Code::InvalidArgument),
            (A2aErrorCode::InvalidAgentResponse, tonic::Code::Internal),
            (A2aErrorCode::ExtendedAgentCardNotConfigured, tonic::Code::FailedPrecondition),
            (A2aErrorCode::ExtensionSupportRequired, tonic::Code::FailedPrecondition),
            (A2aErrorCode::VersionNotSupported, tonic::Code::Unimplemented),
            (A2aErrorCode::InvalidParams, tonic::Code::InvalidArgument),
            (A2aErrorCode::InternalError, tonic::Code::Internal),
        ];
        for (code, grpc) in table {
            assert_eq!(status(code, "").code(), grpc, "{code:?}");
        }
        assert_eq!(a2a_error(&tonic::Status::unavailable("down")), None);
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            /// Any bytes given as a request are a message or a decode error, never a panic.
            #[test]
            fn any_request_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
                let request = method("SendMessage").unwrap().input();
                let _ = decode_json(&request, Bytes::from(bytes));
            }

            /// A message with any text and metadata crosses to protobuf and back unchanged.
            #[test]
            fn a_message_crosses_unchanged(id in "\\PC{1,16}", text in "\\PC{0,40}", key in "[a-z]{1,8}", value in "\\PC{0,8}") {
                let message = json!({"message": {"messageId": id, "role": "ROLE_AGENT",
                    "parts": [{"text": text}], "metadata": {key: value}}});
                let descriptor = output("SendMessage");
                let bytes = encode_json(&descriptor, message.clone()).unwrap();
                prop_assert_eq!(decode_json(&descriptor, bytes).unwrap(), message);
            }
        }
    }
}
