//! The JSON-RPC 2.0 binding at `POST /`: 1.0 methods for 1.0 clients, 0.3 methods for 0.3 ones.

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use mesh_protocol::a2a::v1::{
    ListTaskPushNotificationConfigsRequest, StreamResponse, SubscribeToTaskRequest, TaskPushNotificationConfigRequest,
};
use mesh_protocol::a2a::v03;
use mesh_protocol::jsonrpc::{A2aErrorCode, ErrorObject, Id, Response as RpcResponse, method};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::engine::{Follow, TaskEngine, TaskHandler};
use crate::methods::{Answering, METHODS_V1, call_v1, params};
use crate::surface::{ActivatedExtensions, CardRefusal, Surface};
use crate::{Failure, Inbound, StreamEnd, Version, require_json, send_blocking as send, sse, until_final};

#[derive(Debug)]
struct Rpc<H> {
    engine: TaskEngine<H>,
    surface: Arc<Surface>,
}

pub(super) fn router<H: TaskHandler>(engine: TaskEngine<H>, surface: Arc<Surface>) -> Router {
    Router::new().route("/", post(handle::<H>)).with_state(Arc::new(Rpc { engine, surface }))
}

/// The request as far as it could be read, for shaping the answer. Its params stay raw JSON,
/// borrowed from the body, until the method reads them as its request type: parsed once, never
/// built as a `serde_json::Value` first.
#[derive(Debug)]
struct Call<'a> {
    id: Id,
    version: Version,
    method: String,
    params: Option<&'a RawValue>,
}

/// A JSON-RPC request's members, each as raw JSON (a `null` member kept as such), checked one by
/// one afterwards so that a wrong member is answered with the request's id where it has one.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
}

/// A member that is present, `null` included (an `Option` alone would read `null` as absent).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

async fn handle<H: TaskHandler>(
    State(rpc): State<Arc<Rpc<H>>>,
    inbound: Inbound,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let call = match read_call(&headers, &body) {
        Ok(call) => call,
        Err((id, error)) => return Json(RpcResponse::<Value>::error(id, error)).into_response(),
    };
    let (id, version) = (call.id.clone(), call.version);
    let answered = match admit(&rpc.surface, &headers, &call) {
        Ok(activated) => dispatch(&rpc, &headers, call, &inbound).await.map(|reply| (reply, activated)),
        Err(failure) => Err(failure),
    };
    match answered {
        Ok((mut reply, activated)) => {
            activated.echo(reply.headers_mut());
            reply
        }
        Err(failure) => Json(RpcResponse::<Value>::error(id, error_object(version, failure))).into_response(),
    }
}

/// Admits a call before its params are read: a known method, in the version the client speaks,
/// then what the surface asks of every call (required extensions; streaming when offered).
fn admit(surface: &Surface, headers: &HeaderMap, call: &Call) -> Result<ActivatedExtensions, Failure> {
    let method = call.method.as_str();
    if !METHODS_V1.contains(&method) && !KNOWN_V03.contains(&method) {
        return Err(Failure::new(A2aErrorCode::MethodNotFound, format!("method {method:?} not found")));
    }
    Version::require(headers, call.version)?;
    surface.check_call(headers, STREAMING.contains(&method))
}

/// The 0.3 methods served.
const KNOWN_V03: [&str; 10] = [
    method::v03::MESSAGE_SEND,
    method::v03::MESSAGE_STREAM,
    method::v03::TASKS_GET,
    method::v03::TASKS_CANCEL,
    method::v03::TASKS_RESUBSCRIBE,
    method::v03::TASKS_PUSH_NOTIFICATION_CONFIG_SET,
    method::v03::TASKS_PUSH_NOTIFICATION_CONFIG_GET,
    method::v03::TASKS_PUSH_NOTIFICATION_CONFIG_LIST,
    method::v03::TASKS_PUSH_NOTIFICATION_CONFIG_DELETE,
    method::v03::AGENT_GET_AUTHENTICATED_EXTENDED_CARD,
];

/// The methods answered with a stream, refused by an agent that does not stream.
const STREAMING: [&str; 4] = [
    method::v1::SEND_STREAMING_MESSAGE,
    method::v1::SUBSCRIBE_TO_TASK,
    method::v03::MESSAGE_STREAM,
    method::v03::TASKS_RESUBSCRIBE,
];

/// The JSON-RPC error for a failure, in the version's shape: 1.0 carries `ErrorInfo` details,
/// 0.3 an explicit `"data": null`, as each SDK writes them.
fn error_object(version: Version, failure: Failure) -> ErrorObject {
    ErrorObject::in_version(failure.code, failure.message, version == Version::V1)
}

/// Reads the envelope: content type, JSON, the JSON-RPC request shape.
fn read_call<'a>(headers: &HeaderMap, body: &'a [u8]) -> Result<Call<'a>, (Id, ErrorObject)> {
    require_json(headers).map_err(|failure| (Id::Null, ErrorObject::with_error_info(failure.code, failure.message)))?;
    let invalid = |id: Id, why: &str| (id, ErrorObject::new(A2aErrorCode::InvalidRequest, why.to_owned()));
    // Not JSON at all is a parse error; JSON that is no request object an invalid request.
    let not_a_request = |why: &str| match serde_json::from_slice::<IgnoredAny>(body) {
        Ok(_) => invalid(Id::Null, why),
        Err(e) => (Id::Null, ErrorObject::new(A2aErrorCode::ParseError, format!("invalid JSON: {e}"))),
    };
    // A struct would also read a JSON array (its members in order): only an object is a request.
    if body.trim_ascii_start().first() != Some(&b'{') {
        return Err(not_a_request("a JSON-RPC request must be a JSON object (batches are not supported)"));
    }
    let envelope: Envelope =
        serde_json::from_slice(body).map_err(|e| not_a_request(&format!("not a JSON-RPC request object: {e}")))?;
    let id = match envelope.id.map(|raw| serde_json::from_str::<Value>(raw.get())) {
        None | Some(Ok(Value::Null)) => Id::Null,
        Some(Ok(Value::String(id))) => Id::String(id),
        Some(Ok(Value::Number(id))) => Id::Number(id),
        Some(_) => return Err(invalid(Id::Null, "the request id must be a string, a number or null")),
    };
    if envelope.jsonrpc.and_then(|raw| serde_json::from_str::<Cow<str>>(raw.get()).ok()).as_deref() != Some("2.0") {
        return Err(invalid(id, "\"jsonrpc\" must be \"2.0\""));
    }
    let Some(Ok(method)) = envelope.method.map(|raw| serde_json::from_str::<String>(raw.get())) else {
        return Err(invalid(id, "\"method\" must be a string"));
    };
    let version = match method.as_str() {
        m if is_v03_method(m) => Version::V03,
        _ => Version::V1,
    };
    Ok(Call { id, version, method, params: envelope.params })
}

fn is_v03_method(name: &str) -> bool {
    name.contains('/')
}

fn reply<T: Serialize>(id: Id, result: T) -> Response {
    let mut body = Vec::with_capacity(REPLY_CAPACITY_BYTES);
    // Written into a `Vec`, handed to the body whole: axum's `Json` writes through a `BytesMut`
    // writer, whose overhead per write is paid for each of the many pieces (quotes, names,
    // values) a task is written in.
    let response = RpcResponse::result(id, result);
    match serde_json::to_writer(&mut body, &response) {
        Ok(()) => ([(header::CONTENT_TYPE, HeaderValue::from_static(JSON_CONTENT_TYPE))], body).into_response(),
        Err(error) => {
            tracing::error!(%error, "could not write a JSON-RPC result");
            let error =
                ErrorObject::new(A2aErrorCode::InternalError, format!("the result could not be written: {error}"));
            Json(RpcResponse::<Value>::error(response.id, error)).into_response()
        }
    }
}

/// Room for a typical answer (a task with its history and an artifact) in one allocation.
const REPLY_CAPACITY_BYTES: usize = 1024;
const JSON_CONTENT_TYPE: &str = "application/json";

/// SSE of responses to request `id`: each event a result; an error, in `version`'s shape, ends it.
fn stream_reply<T: Serialize>(
    id: Id,
    version: Version,
    events: impl futures::Stream<Item = Result<T, Failure>> + Send + 'static,
) -> Response {
    sse(events.map(move |event| match event {
        Ok(event) => RpcResponse::result(id.clone(), event),
        Err(failure) => RpcResponse::error(id.clone(), error_object(version, failure)),
    }))
}

async fn dispatch<H: TaskHandler>(
    rpc: &Rpc<H>,
    headers: &HeaderMap,
    call: Call<'_>,
    inbound: &Inbound,
) -> Result<Response, Failure> {
    use method::{v1, v03 as m03};
    let engine = &rpc.engine;
    let Call { id, version, method, params: raw } = call;
    mesh_server::observe::record_a2a_method(&method);
    // The extended card is the binding's to answer (below): a refusal for want of credentials
    // takes the trust layer's JSON-RPC shape.
    if version == Version::V1 && method != v1::GET_EXTENDED_AGENT_CARD {
        return call_v1(engine, &method, raw, inbound, JsonRpcAnswer(id)).await;
    }
    match method.as_str() {
        m03::MESSAGE_SEND => {
            let request: v03::MessageSendParams = params(raw)?;
            let answer = send(engine, &inbound.tenant(None)?, request.into(), inbound.scope()).await?;
            Ok(reply(id, v03::SendMessageResult::from(answer)))
        }
        m03::MESSAGE_STREAM => {
            let request: v03::MessageSendParams = params(raw)?;
            let events = engine.start(&inbound.tenant(None)?, request.into(), inbound.scope(), Follow::Events).await?;
            let events = until_final(events, StreamEnd::TurnEnd).map(|event| event.map(v03::StreamEvent::from));
            Ok(stream_reply(id, Version::V03, events))
        }
        m03::TASKS_GET => {
            let request: v03::TaskQueryParams = params(raw)?;
            Ok(reply(id, v03::Task::from(engine.get(&inbound.tenant(None)?, &request.into()).await?)))
        }
        m03::TASKS_CANCEL => {
            let request: v03::TaskIdParams = params(raw)?;
            Ok(reply(id, v03::Task::from(engine.cancel(&inbound.tenant(None)?, &request.into()).await?)))
        }
        m03::TASKS_RESUBSCRIBE => {
            let request: v03::TaskIdParams = params(raw)?;
            let request: SubscribeToTaskRequest = request.into();
            let events = engine.subscribe(&inbound.tenant(None)?, &request.id).await?;
            let events = until_final(events, StreamEnd::TaskEnd).map(|event| event.map(v03::StreamEvent::from));
            Ok(stream_reply(id, Version::V03, events))
        }
        m03::TASKS_PUSH_NOTIFICATION_CONFIG_SET => {
            let config: v03::TaskPushNotificationConfig = params(raw)?;
            let stored = engine.create_push_config(&inbound.tenant(None)?, &config.into()).await?;
            Ok(reply(id, v03::TaskPushNotificationConfig::from(stored)))
        }
        m03::TASKS_PUSH_NOTIFICATION_CONFIG_GET => {
            let request: v03::PushNotificationConfigParams = params(raw)?;
            // Without a config id, the task's default config: the one named as the task.
            let config_id = request.push_notification_config_id.unwrap_or_else(|| request.id.clone());
            let request = TaskPushNotificationConfigRequest { tenant: None, task_id: request.id, id: config_id };
            let config = engine.push_config(&inbound.tenant(None)?, &request).await?;
            Ok(reply(id, v03::TaskPushNotificationConfig::from(config)))
        }
        m03::TASKS_PUSH_NOTIFICATION_CONFIG_LIST => {
            let request: v03::TaskIdParams = params(raw)?;
            let request = ListTaskPushNotificationConfigsRequest {
                tenant: None,
                task_id: request.id,
                page_size: None,
                page_token: None,
            };
            let listed = engine.push_configs(&inbound.tenant(None)?, &request).await?;
            let configs: Vec<v03::TaskPushNotificationConfig> = listed.configs.into_iter().map(Into::into).collect();
            Ok(reply(id, configs))
        }
        m03::TASKS_PUSH_NOTIFICATION_CONFIG_DELETE => {
            let request: v03::PushNotificationConfigParams = params(raw)?;
            let config_id = request
                .push_notification_config_id
                .ok_or_else(|| Failure::invalid_params("\"pushNotificationConfigId\" is missing"))?;
            let request = TaskPushNotificationConfigRequest { tenant: None, task_id: request.id, id: config_id };
            engine.delete_push_config(&inbound.tenant(None)?, &request).await?;
            Ok(reply(id, Value::Null))
        }
        // The methods left of the known ones: the extended card's, in 1.0 and 0.3 (the same
        // document: with the 0.3 fields on, it carries both versions' members).
        _ => match rpc.surface.extended_card(headers, inbound) {
            Ok(card) => Ok(reply(id, card.card())),
            Err(CardRefusal::Failure(failure)) => Err(failure),
            Err(CardRefusal::Unauthenticated(error)) => Ok(mesh_server::auth::credential_refusal(&error, Some(id))),
        },
    }
}

/// JSON-RPC's framing of a 1.0 method's answer: a response to request `id`, or SSE of them.
struct JsonRpcAnswer(Id);

impl Answering for JsonRpcAnswer {
    type Output = Response;

    fn unary<T: Serialize>(self, result: T) -> Response {
        reply(self.0, result)
    }

    fn stream(self, events: impl futures::Stream<Item = Result<StreamResponse, Failure>> + Send + 'static) -> Response {
        stream_reply(self.0, Version::V1, events)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn json_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers
    }

    /// Raw params as a value, to compare.
    fn parsed(params: Option<&RawValue>) -> Option<Value> {
        params.map(|raw| serde_json::from_str(raw.get()).expect("raw params are JSON"))
    }

    fn id() -> impl Strategy<Value = Id> {
        prop_oneof![
            Just(Id::Null),
            "\\PC{0,20}".prop_map(Id::String),
            any::<i64>().prop_map(Id::from),
            any::<u64>().prop_map(|n| Id::Number(n.into())),
        ]
    }

    fn params() -> impl Strategy<Value = Option<Value>> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::String),
        ];
        let value = leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("\\PC{0,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        proptest::option::of(value)
    }

    /// A member of an envelope: absent, right, or of another value or type.
    fn member() -> impl Strategy<Value = Option<Value>> {
        proptest::option::of(prop_oneof![
            Just(json!("2.0")),
            "\\PC{0,8}".prop_map(Value::String),
            any::<i64>().prop_map(Value::from),
            Just(Value::Null),
            Just(json!([1])),
            Just(json!({"a": true})),
        ])
    }

    proptest! {
        /// A request rendered as JSON-RPC reads back with its id, method and params, in the
        /// version its method names.
        #[test]
        fn a_rendered_request_reads_back(id in id(), method in "\\PC{0,30}", params in params()) {
            let mut request = json!({"jsonrpc": "2.0", "id": id, "method": method});
            if let Some(params) = &params {
                request["params"] = params.clone();
            }
            let body = serde_json::to_vec(&request).unwrap();
            let call = read_call(&json_headers(), &body).map_err(|(_, e)| e.message).unwrap();
            prop_assert_eq!(call.id, id);
            prop_assert_eq!(call.version, if method.contains('/') { Version::V03 } else { Version::V1 });
            prop_assert_eq!(call.method, method);
            prop_assert_eq!(parsed(call.params), params);
        }

        /// Any body gives a call, or the JSON-RPC error its fault calls for: a parse error for
        /// what is not JSON, an invalid request for JSON that is not a request; never a panic.
        #[test]
        fn any_body_gives_a_call_or_the_matching_error(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let parsed = serde_json::from_slice::<Value>(&body);
            match (read_call(&json_headers(), &body), parsed) {
                (Ok(call), Ok(value)) => prop_assert_eq!(value["method"].as_str(), Some(call.method.as_str())),
                (Ok(_), Err(_)) => prop_assert!(false, "a body that is not JSON was read as a call"),
                (Err((id, error)), Err(_)) => {
                    prop_assert_eq!(id, Id::Null);
                    prop_assert_eq!(error.code, A2aErrorCode::ParseError.code());
                }
                (Err((_, error)), Ok(_)) => prop_assert_eq!(error.code, A2aErrorCode::InvalidRequest.code()),
            }
        }

        /// A JSON object is a call exactly when `jsonrpc` is "2.0", `method` a string and `id`
        /// absent, a string, a number or null; any other is an invalid request.
        #[test]
        fn an_envelope_is_a_call_exactly_when_its_members_are_right(
            jsonrpc in member(),
            method in member(),
            id in member(),
            params in params(),
        ) {
            let mut envelope = serde_json::Map::new();
            for (name, value) in [("jsonrpc", &jsonrpc), ("method", &method), ("id", &id), ("params", &params)] {
                if let Some(value) = value {
                    envelope.insert(name.to_owned(), value.clone());
                }
            }
            let valid = jsonrpc == Some(json!("2.0"))
                && method.as_ref().is_some_and(Value::is_string)
                && id.as_ref().is_none_or(|id| id.is_string() || id.is_number() || id.is_null());
            let body = serde_json::to_vec(&envelope).unwrap();
            match read_call(&json_headers(), &body) {
                Ok(call) => {
                    prop_assert!(valid, "{envelope:?} was read as a call");
                    prop_assert_eq!(Some(Value::String(call.method)), method);
                    prop_assert_eq!(parsed(call.params), params);
                }
                Err((_, error)) => {
                    prop_assert!(!valid, "{envelope:?} was refused: {}", error.message);
                    prop_assert_eq!(error.code, A2aErrorCode::InvalidRequest.code());
                }
            }
        }
    }

    #[test]
    fn a_batch_or_a_request_naming_a_member_twice_is_an_invalid_request() {
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage"}"#;
        let twice = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","method":"GetTask"}"#;
        for body in [format!("[{call}]"), format!(" \n[{call}]"), twice.to_owned()] {
            let (id, error) = read_call(&json_headers(), body.as_bytes()).unwrap_err();
            assert_eq!((id, error.code), (Id::Null, A2aErrorCode::InvalidRequest.code()), "{body}");
        }
        let (_, error) = read_call(&json_headers(), b" [1, ").unwrap_err();
        assert_eq!(error.code, A2aErrorCode::ParseError.code(), "what is not JSON is a parse error");
    }

    #[test]
    fn a_body_that_is_not_json_content_is_refused_before_it_is_read() {
        let (id, error) = read_call(&HeaderMap::new(), br#"{"jsonrpc":"2.0","id":1,"method":"m"}"#).unwrap_err();
        assert_eq!((id, error.code), (Id::Null, A2aErrorCode::ContentTypeNotSupported.code()));
    }
}
