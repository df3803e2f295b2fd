//! The HTTP+JSON binding: 1.0 at the root (optionally under `/{tenant}/`), 0.3 under `/v1/`.
//! Errors are AIP-193 bodies (`{"error": {"code", "status", "message", "details"}}`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use futures::{Stream, StreamExt};
use mesh_protocol::a2a::v1::{
    CancelTaskRequest, GetTaskRequest, JsonObject, ListTaskPushNotificationConfigsRequest, ListTasksRequest,
    SendMessageRequest, TaskPushNotificationConfig, TaskPushNotificationConfigRequest, TaskState,
};
use mesh_protocol::a2a::{v03, v03_rest};
use mesh_protocol::jsonrpc::{A2aErrorCode, RestErrorBody};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::engine::{Follow, TaskEngine, TaskHandler};
use crate::surface::{ActivatedExtensions, CardRefusal, Surface};
use crate::{Failure, Inbound, StreamEnd, Version, require_json, send_blocking, sse, until_final};
use mesh_server::http::no_route;

#[derive(Debug)]
struct Rest<H> {
    engine: TaskEngine<H>,
    surface: Arc<Surface>,
}

impl<H> Rest<H> {
    /// Admits a call in the form of `version`: the client speaks it, and the surface lets the
    /// call in (required extensions; a `streaming` call when the agent streams).
    fn admit(&self, headers: &HeaderMap, version: Version, streaming: bool) -> Result<ActivatedExtensions, Failure> {
        Version::require(headers, version)?;
        self.surface.check_call(headers, streaming)
    }
}

/// `response`, listing the extensions its call activated.
fn echoed(activated: &ActivatedExtensions, mut response: Response) -> Response {
    activated.echo(response.headers_mut());
    response
}

type Shared<H> = State<Arc<Rest<H>>>;

impl axum::response::IntoResponse for Failure {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(RestErrorBody::new(self.code, self.message))).into_response()
    }
}

/// One event of an HTTP+JSON stream: a stream response, or the error that ends the stream, in
/// the body an error answer has.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Streamed<T> {
    Event(T),
    Error(RestErrorBody),
}

/// Server-Sent Events of a stream's events, an error the last.
fn stream<T: Serialize>(events: impl Stream<Item = Result<T, Failure>> + Send + 'static) -> Response {
    sse(events.map(|event| match event {
        Ok(event) => Streamed::Event(event),
        Err(failure) => Streamed::Error(RestErrorBody::new(failure.code, failure.message)),
    }))
}

pub(super) fn router<H: TaskHandler>(engine: TaskEngine<H>, surface: Arc<Surface>) -> Router {
    let mut router = Router::new();
    for prefix in ["", "/{tenant}"] {
        router = router
            .route(&format!("{prefix}/message:send"), post(send_v1::<H>))
            .route(&format!("{prefix}/message:stream"), post(stream_v1::<H>))
            .route(&format!("{prefix}/tasks"), get(list_v1::<H>))
            .route(&format!("{prefix}/tasks/{{target}}"), get(task_v1::<H>).post(task_v1::<H>))
            .route(&format!("{prefix}/tasks/{{target}}/pushNotificationConfigs"), any(push_configs_v1::<H>))
            .route(&format!("{prefix}/tasks/{{target}}/pushNotificationConfigs/{{config}}"), any(push_configs_v1::<H>))
            .route(&format!("{prefix}/extendedAgentCard"), get(extended_card_v1::<H>));
    }
    router
        .route("/v1/message:send", post(send_v03::<H>))
        .route("/v1/message:stream", post(stream_v03::<H>))
        .route("/v1/tasks/{target}", get(task_v03::<H>).post(task_v03::<H>))
        .route("/v1/tasks/{target}/pushNotificationConfigs", any(push_configs_v03::<H>))
        .route("/v1/tasks/{target}/pushNotificationConfigs/{config}", any(push_configs_v03::<H>))
        .route("/v1/card", get(extended_card_v03::<H>))
        .with_state(Arc::new(Rest { engine, surface }))
}

fn json<T: Serialize>(value: T) -> Response {
    Json(value).into_response()
}

/// The JSON body, checked: a JSON content type, then JSON, then the expected shape.
fn body<T: DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> Result<T, Failure> {
    require_json(headers)?;
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| Failure::new(A2aErrorCode::ParseError, format!("invalid JSON: {e}")))?;
    serde_json::from_value(value).map_err(|e| Failure::invalid_params(format!("invalid request body: {e}")))
}

fn path_tenant(path: &HashMap<String, String>, inbound: &Inbound) -> Result<String, Failure> {
    inbound.tenant(path.get("tenant").map(String::as_str))
}

/// The query string as pairs; later duplicates win.
fn query(raw: Option<String>) -> HashMap<String, String> {
    url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes()).into_owned().collect()
}

fn int_param(query: &HashMap<String, String>, name: &str) -> Result<Option<i32>, Failure> {
    query
        .get(name)
        .map(|v| v.parse().map_err(|_| Failure::invalid_params(format!("{name} must be an integer, not {v:?}"))))
        .transpose()
}

async fn send_v1<H: TaskHandler>(
    State(rest): Shared<H>,
    Path(path): Path<HashMap<String, String>>,
    inbound: Inbound,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, Failure> {
    mesh_server::observe::record_a2a_method(mesh_protocol::jsonrpc::method::v1::SEND_MESSAGE);
    let activated = rest.admit(&headers, Version::V1, false)?;
    let (tenant, request) = send_request(&path, &headers, &bytes, &inbound)?;
    Ok(echoed(&activated, json(send_blocking(&rest.engine, &tenant, request, inbound.scope()).await?)))
}

/// The 1.0 `message:send` / `message:stream` request and the tenant it is for.
fn send_request(
    path: &HashMap<String, String>,
    headers: &HeaderMap,
    bytes: &Bytes,
    inbound: &Inbound,
) -> Result<(String, SendMessageRequest), Failure> {
    let mut request: SendMessageRequest = body(headers, bytes)?;
    let tenant = tenant_of(path, request.tenant.take().as_deref(), inbound)?;
    Ok((tenant, request))
}

/// The tenant from the path prefix, or else the one the body names.
fn tenant_of(path: &HashMap<String, String>, named: Option<&str>, inbound: &Inbound) -> Result<String, Failure> {
    match path.contains_key("tenant") {
        true => path_tenant(path, inbound),
        false => inbound.tenant(named),
    }
}

async fn stream_v1<H: TaskHandler>(
    State(rest): Shared<H>,
    Path(path): Path<HashMap<String, String>>,
    inbound: Inbound,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, Failure> {
    mesh_server::observe::record_a2a_method(mesh_protocol::jsonrpc::method::v1::SEND_STREAMING_MESSAGE);
    let activated = rest.admit(&headers, Version::V1, true)?;
    let (tenant, request) = send_request(&path, &headers, &bytes, &inbound)?;
    let events = rest.engine.start(&tenant, request, inbound.scope(), Follow::Events).await?;
    Ok(echoed(&activated, stream(until_final(events, StreamEnd::TurnEnd))))
}

async fn list_v1<H: TaskHandler>(
    State(rest): Shared<H>,
    Path(path): Path<HashMap<String, String>>,
    inbound: Inbound,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, Failure> {
    let activated = rest.admit(&headers, Version::V1, false)?;
    let query = query(raw);
    let status = query
        .get("status")
        .map(|s| {
            serde_json::from_value::<TaskState>(serde_json::Value::String(s.clone()))
                .map_err(|_| Failure::invalid_params(format!("status {s:?} is not a task state (TASK_STATE_...)")))
        })
        .transpose()?;
    let include_artifacts = query
        .get("includeArtifacts")
        .map(|v| {
            v.parse::<bool>()
                .map_err(|_| Failure::invalid_params(format!("includeArtifacts must be true or false, not {v:?}")))
        })
        .transpose()?;
    let request = ListTasksRequest {
        tenant: None,
        context_id: query.get("contextId").cloned(),
        status,
        page_size: int_param(&query, "pageSize")?,
        page_token: query.get("pageToken").cloned(),
        history_length: int_param(&query, "historyLength")?,
        status_timestamp_after: query.get("statusTimestampAfter").cloned(),
        include_artifacts,
    };
    Ok(echoed(&activated, json(rest.engine.list(&path_tenant(&path, &inbound)?, &request).await?)))
}

async fn task_v1<H: TaskHandler>(
    State(rest): Shared<H>,
    Path(path): Path<HashMap<String, String>>,
    inbound: Inbound,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, Failure> {
    let target = path.get("target").map(String::as_str).unwrap_or_default();
    let Some(operation) = TaskOperation::parse(target, &method) else {
        return Ok(no_route(&method, uri.path()).into_response());
    };
    let activated = rest.admit(&headers, Version::V1, operation.streams())?;
    let tenant = path_tenant(&path, &inbound)?;
    let response = match operation {
        TaskOperation::Get(id) => {
            let history_length = int_param(&query(uri.query().map(str::to_owned)), "historyLength")?;
            let request = GetTaskRequest { tenant: None, id: id.to_owned(), history_length };
            json(rest.engine.get(&tenant, &request).await?)
        }
        TaskOperation::Cancel(id) => {
            let ActionBody { metadata, .. } = action_body(&headers, &bytes, id)?;
            let request = CancelTaskRequest { tenant: None, id: id.to_owned(), metadata };
            json(rest.engine.cancel(&tenant, &request).await?)
        }
        TaskOperation::Subscribe(id) => {
            action_body(&headers, &bytes, id)?;
            let events = rest.engine.subscribe(&tenant, id).await?;
            stream(until_final(events, StreamEnd::TaskEnd))
        }
    };
    Ok(echoed(&activated, response))
}

/// The body of a task action (`{id}:cancel`, `{id}:subscribe`), where the binding maps the rest
/// of the request message: 1.0 sends `{"id", "metadata"}`, 0.3 `{"name": "tasks/{id}"}`, and a
/// subscription usually nothing.
///
/// The handlers take the body whole even where they need none of it: an answer given before a
/// request's body has arrived makes the server close the connection after it, and a client that
/// sends its next request on that pooled connection sees it dropped unanswered.
#[derive(Debug, Default, Deserialize)]
struct ActionBody {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    metadata: Option<JsonObject>,
}

/// The action body, checked when there is one: JSON, an object, and naming no other task than
/// the path's `id`.
fn action_body(headers: &HeaderMap, bytes: &Bytes, id: &str) -> Result<ActionBody, Failure> {
    if bytes.is_empty() {
        return Ok(ActionBody::default());
    }
    let action: ActionBody = body(headers, bytes)?;
    match action.id.as_deref() {
        Some(named) if named != id => {
            Err(Failure::invalid_params(format!("the body names task {named:?}, the path task {id:?}")))
        }
        _ => Ok(action),
    }
}

/// What `/tasks/{target}` asks for: `GET {id}`, `POST {id}:cancel` or `{id}:subscribe` (GET as
/// the spec has it, POST as the 0.3 SDK sends it).
#[derive(Debug, PartialEq)]
enum TaskOperation<'a> {
    Get(&'a str),
    Cancel(&'a str),
    Subscribe(&'a str),
}

/// The actions a task target may end in, after its last `:`.
const TASK_ACTIONS: [&str; 2] = ["cancel", "subscribe"];

impl<'a> TaskOperation<'a> {
    /// `None` for any other target or method, which is then no route at all (404), as elsewhere.
    /// Only an action word after the last `:` is an action: the rest of a target is the task id,
    /// which may hold colons itself (a caller-chosen seed id such as `job:7`).
    fn parse(target: &'a str, method: &Method) -> Option<Self> {
        let action = target.rsplit_once(':').filter(|(_, action)| TASK_ACTIONS.contains(action));
        match (action, method) {
            (None, &Method::GET) => Some(Self::Get(target)),
            (Some((id, "cancel")), &Method::POST) => Some(Self::Cancel(id)),
            (Some((id, "subscribe")), &Method::GET | &Method::POST) => Some(Self::Subscribe(id)),
            _ => None,
        }
    }

    /// Whether the operation answers with a stream.
    fn streams(&self) -> bool {
        matches!(self, Self::Subscribe(_))
    }
}

/// What `/tasks/{id}/pushNotificationConfigs[/{config}]` asks for, by method: `POST` creates,
/// `GET` lists (or, with a config, gets), `DELETE` (with a config) deletes.
#[derive(Debug, PartialEq)]
enum PushOperation<'a> {
    Create,
    List,
    Get(&'a str),
    Delete(&'a str),
}

impl<'a> PushOperation<'a> {
    /// `None` for any other method (no route: 404, as elsewhere).
    fn parse(path: &'a HashMap<String, String>, method: &Method) -> Option<(&'a str, Self)> {
        let task_id = path.get("target")?.as_str();
        let operation = match (path.get("config").map(String::as_str), method) {
            (None, &Method::POST) => Self::Create,
            (None, &Method::GET) => Self::List,
            (Some(config), &Method::GET) => Self::Get(config),
            (Some(config), &Method::DELETE) => Self::Delete(config),
            _ => return None,
        };
        Some((task_id, operation))
    }
}

async fn push_configs_v1<H: TaskHandler>(
    State(rest): Shared<H>,
    Path(path): Path<HashMap<String, String>>,
    inbound: Inbound,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, Failure> {
    let Some((task_id, operation)) = PushOperation::parse(&path, &method) else {
        return Ok(no_route(&method, uri.path()).into_response());
    };
    let activated = rest.admit(&headers, Version::V1, false)?;
    let engine = &rest.engine;
    let tenant = path_tenant(&path, &inbound)?;
    let one =
        |id: &str| TaskPushNotificationConfigRequest { tenant: None, task_id: task_id.to_owned(), id: id.to_owned() };
    let response = match operation {
        PushOperation::Create => {
            let mut config: TaskPushNotificationConfig = body(&headers, &bytes)?;
            // The path names the task (and the tenant, under `/{tenant}/`).
            config.task_id = Some(task_id.to_owned());
            config.tenant = None;
            json(engine.create_push_config(&tenant, &config).await?)
        }
        PushOperation::List => {
            let query = query(uri.query().map(str::to_owned));
            let request = ListTaskPushNotificationConfigsRequest {
                tenant: None,
                task_id: task_id.to_owned(),
                page_size: int_param(&query, "pageSize")?,
                page_token: query.get("pageToken").cloned(),
            };
            json(engine.push_configs(&tenant, &request).await?)
        }
        PushOperation::Get(id) => json(engine.push_config(&tenant, &one(id)).await?),
        PushOperation::Delete(id) => {
            engine.delete_push_config(&tenant, &one(id)).await?;
            // `google.protobuf.Empty`.
            json(serde_json::json!({}))
        }
    };
    Ok(echoed(&activated, response))
}

async fn push_configs_v03<H: TaskHandler>(
    State(rest): Shared<H>,
    Path(path): Path<HashMap<String, String>>,
    inbound: Inbound,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, Failure> {
    let Some((task_id, operation)) = PushOperation::parse(&path, &method) else {
        return Ok(no_route(&method, uri.path()).into_response());
    };
    let activated = rest.admit(&headers, Version::V03, false)?;
    let engine = &rest.engine;
    let tenant = inbound.tenant(None)?;
    let one =
        |id: &str| TaskPushNotificationConfigRequest { tenant: None, task_id: task_id.to_owned(), id: id.to_owned() };
    let response = match operation {
        PushOperation::Create => {
            let request: v03_rest::CreateTaskPushNotificationConfigRequest = body(&headers, &bytes)?;
            let stored = engine.create_push_config(&tenant, &request.into_v1(task_id)).await?;
            json(v03_rest::TaskPushNotificationConfig::from(stored))
        }
        PushOperation::List => {
            let request = ListTaskPushNotificationConfigsRequest {
                tenant: None,
                task_id: task_id.to_owned(),
                page_size: None,
                page_token: None,
            };
            let listed = engine.push_configs(&tenant, &request).await?;
            let configs: Vec<v03_rest::TaskPushNotificationConfig> =
                listed.configs.into_iter().map(Into::into).collect();
            json(serde_json::json!({ "configs": configs }))
        }
        PushOperation::Get(id) => {
            json(v03_rest::TaskPushNotificationConfig::from(engine.push_config(&tenant, &one(id)).await?))
        }
        PushOperation::Delete(id) => {
            engine.delete_push_config(&tenant, &one(id)).await?;
            json(serde_json::json!({}))
        }
    };
    Ok(echoed(&activated, response))
}

/// `GET /extendedAgentCard` (1.0) and `GET /v1/card` (0.3, as the SDK serves it there): the
/// authenticated extended card, revalidated with its validator like the public one.
fn extended_card<H: TaskHandler>(rest: &Rest<H>, inbound: &Inbound, headers: &HeaderMap, version: Version) -> Response {
    let activated = match rest.admit(headers, version, false) {
        Ok(activated) => activated,
        Err(failure) => return failure.into_response(),
    };
    match rest.surface.extended_card(headers, inbound) {
        Ok(card) => echoed(&activated, card.respond(headers)),
        Err(CardRefusal::Failure(failure)) => failure.into_response(),
        Err(CardRefusal::Unauthenticated(error)) => mesh_server::auth::credential_refusal(&error, None),
    }
}

async fn extended_card_v1<H: TaskHandler>(State(rest): Shared<H>, inbound: Inbound, headers: HeaderMap) -> Response {
    extended_card(&rest, &inbound, &headers, Version::V1)
}

async fn send_v03<H: TaskHandler>(
    State(rest): Shared<H>,
    inbound: Inbound,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, Failure> {
    mesh_server::observe::record_a2a_method(mesh_protocol::jsonrpc::method::v03::MESSAGE_SEND);
    let activated = rest.admit(&headers, Version::V03, false)?;
    let request: v03_rest::SendMessageRequest = body(&headers, &bytes)?;
    let answer = send_blocking(&rest.engine, &inbound.tenant(None)?, request.into(), inbound.scope()).await?;
    Ok(echoed(&activated, json(v03_rest::SendMessageResponse::from(answer))))
}

async fn stream_v03<H: TaskHandler>(
    State(rest): Shared<H>,
    inbound: Inbound,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, Failure> {
    mesh_server::observe::record_a2a_method(mesh_protocol::jsonrpc::method::v03::MESSAGE_STREAM);
    let activated = rest.admit(&headers, Version::V03, true)?;
    let request: v03_rest::SendMessageRequest = body(&headers, &bytes)?;
    let events = rest.engine.start(&inbound.tenant(None)?, request.into(), inbound.scope(), Follow::Events).await?;
    let events = until_final(events, StreamEnd::TurnEnd).map(|event| event.map(v03_rest::StreamResponse::from));
    Ok(echoed(&activated, stream(events)))
}

async fn task_v03<H: TaskHandler>(
    State(rest): Shared<H>,
    Path(target): Path<String>,
    inbound: Inbound,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, Failure> {
    let Some(operation) = TaskOperation::parse(&target, &method) else {
        return Ok(no_route(&method, uri.path()).into_response());
    };
    let activated = rest.admit(&headers, Version::V03, operation.streams())?;
    let tenant = inbound.tenant(None)?;
    let response = match operation {
        TaskOperation::Get(id) => {
            let history_length = int_param(&query(uri.query().map(str::to_owned)), "historyLength")?;
            let request = v03::TaskQueryParams { id: id.to_owned(), history_length, metadata: None };
            json(v03_rest::Task::from(rest.engine.get(&tenant, &request.into()).await?))
        }
        TaskOperation::Cancel(id) => {
            let ActionBody { metadata, .. } = action_body(&headers, &bytes, id)?;
            let request = CancelTaskRequest { tenant: None, id: id.to_owned(), metadata };
            json(v03_rest::Task::from(rest.engine.cancel(&tenant, &request).await?))
        }
        TaskOperation::Subscribe(id) => {
            action_body(&headers, &bytes, id)?;
            let events = rest.engine.subscribe(&tenant, id).await?;
            stream(until_final(events, StreamEnd::TaskEnd).map(|event| event.map(v03_rest::StreamResponse::from)))
        }
    };
    Ok(echoed(&activated, response))
}

async fn extended_card_v03<H: TaskHandler>(State(rest): Shared<H>, inbound: Inbound, headers: HeaderMap) -> Response {
    extended_card(&rest, &inbound, &headers, Version::V03)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_targets_split_at_the_last_colon_and_match_their_method() {
        assert_eq!(TaskOperation::parse("abc", &Method::GET), Some(TaskOperation::Get("abc")));
        assert_eq!(TaskOperation::parse("abc:cancel", &Method::POST), Some(TaskOperation::Cancel("abc")));
        assert_eq!(TaskOperation::parse("a:b:subscribe", &Method::GET), Some(TaskOperation::Subscribe("a:b")));
        assert_eq!(TaskOperation::parse("a:b:subscribe", &Method::POST), Some(TaskOperation::Subscribe("a:b")));
        assert_eq!(TaskOperation::parse("abc", &Method::POST), None);
        assert_eq!(TaskOperation::parse("abc:cancel", &Method::GET), None);
        assert_eq!(TaskOperation::parse("abc:pause", &Method::POST), None);
        assert_eq!(TaskOperation::parse("job:7", &Method::GET), Some(TaskOperation::Get("job:7")));
    }

    mod properties {
        // Named, as axum's `any` router comes in with `super::*` too.
        use proptest::prelude::{any, *};

        use super::*;

        /// Task ids as a path segment carries them, colons included.
        const TASK_ID: &str = "[ -.0-~]{1,40}";

        proptest! {
            /// Every operation on any task id reads back as itself from the target it renders.
            #[test]
            fn a_rendered_task_target_reads_back(id in TASK_ID) {
                let target = format!("{id}:cancel");
                prop_assert_eq!(TaskOperation::parse(&target, &Method::POST), Some(TaskOperation::Cancel(&id)));
                for method in [Method::GET, Method::POST] {
                    let target = format!("{id}:subscribe");
                    prop_assert_eq!(TaskOperation::parse(&target, &method), Some(TaskOperation::Subscribe(&id)));
                }
                let ends_in_action = id.rsplit_once(':').is_some_and(|(_, action)| TASK_ACTIONS.contains(&action));
                if !ends_in_action {
                    prop_assert_eq!(TaskOperation::parse(&id, &Method::GET), Some(TaskOperation::Get(&id)));
                }
            }

            /// Any target under any method is an operation on a prefix of it, or no route.
            #[test]
            fn any_target_is_an_operation_on_a_prefix_or_no_route(target in "\\PC{0,40}", post in any::<bool>()) {
                let method = if post { Method::POST } else { Method::GET };
                match TaskOperation::parse(&target, &method) {
                    Some(TaskOperation::Get(id)) => prop_assert_eq!(id, target.as_str()),
                    Some(TaskOperation::Cancel(id)) => prop_assert_eq!(format!("{id}:cancel"), target),
                    Some(TaskOperation::Subscribe(id)) => prop_assert_eq!(format!("{id}:subscribe"), target),
                    None => {}
                }
            }
        }
    }
}
