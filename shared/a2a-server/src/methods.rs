//! The A2A 1.0 methods over the task engine, whatever binding carries them: JSON-RPC's 1.0
//! methods and the gRPC binding read the same ProtoJSON params (gRPC decodes its protobuf
//! request into them) and give the same answers, each binding writing them in its own framing
//! ([`Answering`]).

use futures::Stream;
use mesh_protocol::a2a::v1::{
    CancelTaskRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest, ListTasksRequest, SendMessageRequest,
    StreamResponse, SubscribeToTaskRequest, TaskPushNotificationConfig, TaskPushNotificationConfigRequest,
};
use mesh_protocol::jsonrpc::A2aErrorCode;
use mesh_protocol::jsonrpc::method::v1;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::engine::{Follow, TaskEngine, TaskHandler};
use crate::{Failure, Inbound, StreamEnd, send_blocking, until_final};

/// Every A2A 1.0 method, as JSON-RPC names it and as gRPC names it in its paths.
pub(super) const METHODS_V1: [&str; 11] = [
    v1::SEND_MESSAGE,
    v1::SEND_STREAMING_MESSAGE,
    v1::GET_TASK,
    v1::LIST_TASKS,
    v1::CANCEL_TASK,
    v1::SUBSCRIBE_TO_TASK,
    v1::CREATE_TASK_PUSH_NOTIFICATION_CONFIG,
    v1::GET_TASK_PUSH_NOTIFICATION_CONFIG,
    v1::LIST_TASK_PUSH_NOTIFICATION_CONFIGS,
    v1::DELETE_TASK_PUSH_NOTIFICATION_CONFIG,
    v1::GET_EXTENDED_AGENT_CARD,
];

/// How a binding puts a method's answer on the wire.
pub(super) trait Answering {
    type Output;

    /// A single answer (the method's response message).
    fn unary<T: Serialize>(self, result: T) -> Self::Output;

    /// A stream of events, ended by the binding when the source ends, or after an error.
    fn stream(self, events: impl Stream<Item = Result<StreamResponse, Failure>> + Send + 'static) -> Self::Output;
}

/// A method's params as a binding hands them over: raw JSON from a JSON-RPC body, or a value a
/// binding built (gRPC, from its protobuf request); `None` when the request has none.
pub(super) trait Params {
    /// No params, or `null`.
    fn is_empty(&self) -> bool;

    /// The params read as the method's request type; `None` when there are none.
    fn read<T: DeserializeOwned>(self) -> Option<Result<T, serde_json::Error>>;
}

impl Params for Option<Value> {
    fn is_empty(&self) -> bool {
        self.as_ref().is_none_or(Value::is_null)
    }

    fn read<T: DeserializeOwned>(self) -> Option<Result<T, serde_json::Error>> {
        self.map(serde_json::from_value)
    }
}

impl Params for Option<&RawValue> {
    fn is_empty(&self) -> bool {
        self.is_none_or(|raw| raw.get() == "null")
    }

    fn read<T: DeserializeOwned>(self) -> Option<Result<T, serde_json::Error>> {
        self.map(|raw| serde_json::from_str(raw.get()))
    }
}

/// The method's params, read as its request type.
pub(super) fn params<T: DeserializeOwned>(params: impl Params) -> Result<T, Failure> {
    let read = params.read().ok_or_else(|| Failure::invalid_params("\"params\" is missing"))?;
    read.map_err(|e| Failure::invalid_params(format!("invalid params: {e}")))
}

/// Runs 1.0 `method` (one of [`METHODS_V1`] but the extended card's; the binding checked the
/// client's version and admitted the call through its `Surface`) with its ProtoJSON params, for
/// the caller `inbound`.
pub(super) async fn call_v1<H: TaskHandler, A: Answering>(
    engine: &TaskEngine<H>,
    method: &str,
    raw: impl Params,
    inbound: &Inbound,
    answer: A,
) -> Result<A::Output, Failure> {
    match method {
        v1::SEND_MESSAGE => {
            let request: SendMessageRequest = params(raw)?;
            let tenant = inbound.tenant(request.tenant.as_deref())?;
            Ok(answer.unary(send_blocking(engine, &tenant, request, inbound.scope()).await?))
        }
        v1::SEND_STREAMING_MESSAGE => {
            let request: SendMessageRequest = params(raw)?;
            let tenant = inbound.tenant(request.tenant.as_deref())?;
            let events = engine.start(&tenant, request, inbound.scope(), Follow::Events).await?;
            Ok(answer.stream(until_final(events, StreamEnd::TurnEnd)))
        }
        v1::GET_TASK => {
            let request: GetTaskRequest = params(raw)?;
            Ok(answer.unary(engine.get(&inbound.tenant(request.tenant.as_deref())?, &request).await?))
        }
        v1::LIST_TASKS => {
            // Every filter is optional, so no params at all lists everything.
            let request: ListTasksRequest = if raw.is_empty() { ListTasksRequest::default() } else { params(raw)? };
            Ok(answer.unary(engine.list(&inbound.tenant(request.tenant.as_deref())?, &request).await?))
        }
        v1::CANCEL_TASK => {
            let request: CancelTaskRequest = params(raw)?;
            Ok(answer.unary(engine.cancel(&inbound.tenant(request.tenant.as_deref())?, &request).await?))
        }
        v1::SUBSCRIBE_TO_TASK => {
            let request: SubscribeToTaskRequest = params(raw)?;
            let events = engine.subscribe(&inbound.tenant(request.tenant.as_deref())?, &request.id).await?;
            Ok(answer.stream(until_final(events, StreamEnd::TaskEnd)))
        }
        v1::CREATE_TASK_PUSH_NOTIFICATION_CONFIG => {
            let mut config: TaskPushNotificationConfig = params(raw)?;
            let tenant = inbound.tenant(config.tenant.take().as_deref())?;
            Ok(answer.unary(engine.create_push_config(&tenant, &config).await?))
        }
        v1::GET_TASK_PUSH_NOTIFICATION_CONFIG => {
            let request: TaskPushNotificationConfigRequest = params(raw)?;
            Ok(answer.unary(engine.push_config(&inbound.tenant(request.tenant.as_deref())?, &request).await?))
        }
        v1::LIST_TASK_PUSH_NOTIFICATION_CONFIGS => {
            let request: ListTaskPushNotificationConfigsRequest = params(raw)?;
            Ok(answer.unary(engine.push_configs(&inbound.tenant(request.tenant.as_deref())?, &request).await?))
        }
        v1::DELETE_TASK_PUSH_NOTIFICATION_CONFIG => {
            let request: TaskPushNotificationConfigRequest = params(raw)?;
            engine.delete_push_config(&inbound.tenant(request.tenant.as_deref())?, &request).await?;
            // `google.protobuf.Empty`: the SDK answers it as a null JSON-RPC result.
            Ok(answer.unary(EMPTY))
        }
        // `GetExtendedAgentCard` included: each binding answers it, as it answers a caller
        // without credentials in its own shape (see `Surface::extended_card`).
        _ => Err(Failure::new(A2aErrorCode::MethodNotFound, format!("method {method:?} not found"))),
    }
}

/// `google.protobuf.Empty`, which JSON-RPC writes as `null` and gRPC as an empty message.
const EMPTY: Option<()> = None;
