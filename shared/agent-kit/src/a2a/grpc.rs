//! The gRPC binding (A2A 1.0, service `lf.a2a.v1.A2AService`) on the agent's own HTTP port:
//! gRPC clients speak HTTP/2 without TLS to the same listener, and their calls are routed here
//! by path (`/lf.a2a.v1.A2AService/{method}`), behind the same layers as the other bindings
//! (access control, limits, call admission, metrics). Each method's protobuf request is read as
//! its ProtoJSON params and runs through the same 1.0 methods as JSON-RPC ([`super::methods`]);
//! errors are the spec's gRPC statuses with an `ErrorInfo`. The client's version travels as
//! `a2a-version` metadata and its extensions as `a2a-extensions`, checked as the other bindings
//! check their headers ([`Surface`]).

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{Extensions, HeaderMap, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use mesh_a2a_grpc::{BytesCodec, MessageDescriptor, MethodDescriptor, SERVICE};
use mesh_protocol::a2a::v1::StreamResponse;
use mesh_protocol::jsonrpc::method;
use serde::Serialize;
use serde_json::Value;
use tonic::Status;
use tonic::server::{Grpc, ServerStreamingService, UnaryService};

use super::engine::{TaskEngine, TaskHandler};
use super::methods::{Answering, call_v1};
use super::surface::{CardRefusal, Surface};
use super::{Failure, Inbound, Version};
use crate::middleware::{Middleware, Refusal};

/// What every call of the binding is served by.
struct Binding<H> {
    engine: TaskEngine<H>,
    surface: Arc<Surface>,
}

pub(super) fn router<H: TaskHandler>(engine: TaskEngine<H>, surface: Arc<Surface>) -> Router {
    Router::new()
        .route(&format!("/{SERVICE}/{{method}}"), post(serve::<H>))
        .with_state(Arc::new(Binding { engine, surface }))
}

/// One call. The body is read whole (a unary or server-streaming call sends one message), so
/// the agent's body limit bounds it as it bounds the other bindings' requests.
async fn serve<H: TaskHandler>(
    State(binding): State<Arc<Binding<H>>>,
    Path(name): Path<String>,
    inbound: Inbound,
    headers: HeaderMap,
    extensions: Extensions,
    body: Bytes,
) -> Response {
    let Some(method) = mesh_a2a_grpc::method(&name) else {
        return answer_status(Status::unimplemented(format!("{SERVICE} has no method {name:?}")));
    };
    // Admitted as the other bindings admit a call: its version, then the surface's checks.
    let admitted = Version::require(&headers, Version::V1)
        .and_then(|()| binding.surface.check_call(&headers, method.is_server_streaming()));
    let activated = match admitted {
        Ok(activated) => activated,
        Err(failure) => return answer_status(into_status(failure)),
    };
    let call = Call {
        engine: binding.engine.clone(),
        surface: binding.surface.clone(),
        method,
        inbound,
        headers: headers.clone(),
    };
    let mut request = Request::new(Body::from(body));
    *request.headers_mut() = headers;
    *request.extensions_mut() = extensions;
    let mut grpc = Grpc::new(BytesCodec).max_decoding_message_size(usize::MAX);
    let mut response = match call.method.is_server_streaming() {
        true => grpc.server_streaming(call, request).await,
        false => grpc.unary(call, request).await,
    };
    activated.echo(response.headers_mut());
    response.into_response()
}

/// The longest error body of a layer read to put its message in a status.
const REFUSAL_BODY_BYTES_MAX: usize = 64 * 1024;

/// Answers a gRPC call that a layer in front of the binding refused (the trust layer's 401, the
/// rate limit's 429, load shedding's 503, the body limit's 413, the timeout's 504, a route that
/// does not exist) with the gRPC status of its meaning in place of the JSON body: a gRPC client
/// reads an HTTP error with a body as a broken stream (`INTERNAL`), not as the refusal it is.
/// The refusal's headers that tell the client what to do (`www-authenticate`, `retry-after`) and
/// its request id stay. Other requests pass untouched.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GrpcRefusals;

impl Middleware for GrpcRefusals {
    /// Whether the request is a gRPC call.
    type Pass = bool;

    fn before(&self, request: &mut axum::extract::Request) -> Result<bool, Refusal> {
        Ok(is_grpc(request.headers()))
    }

    async fn after<F>(grpc: bool, answer: F) -> Response
    where
        F: Future<Output = Response> + Send + 'static,
    {
        let response = answer.await;
        if !grpc || is_grpc(response.headers()) {
            return response;
        }
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, REFUSAL_BODY_BYTES_MAX).await.unwrap_or_default();
        let error: Value = serde_json::from_slice(&body).unwrap_or_default();
        let message = match (error["error_code"].as_str(), error["error_message"].as_str()) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            _ => parts.status.canonical_reason().unwrap_or("refused").to_owned(),
        };
        let mut refusal = Status::new(code_of(parts.status), message).into_http::<Body>();
        for name in [header::WWW_AUTHENTICATE, header::RETRY_AFTER, crate::http::REQUEST_ID_HEADER] {
            if let Some(value) = parts.headers.get(&name) {
                refusal.headers_mut().insert(name, value.clone());
            }
        }
        refusal.into_response()
    }
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/grpc"))
}

/// The gRPC code of an HTTP refusal, by what the layers mean by it.
fn code_of(status: StatusCode) -> tonic::Code {
    use tonic::Code;
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNSUPPORTED_MEDIA_TYPE => Code::InvalidArgument,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => Code::Unimplemented,
        StatusCode::REQUEST_TIMEOUT | StatusCode::GATEWAY_TIMEOUT => Code::DeadlineExceeded,
        StatusCode::CONFLICT => Code::Aborted,
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::TOO_MANY_REQUESTS => Code::ResourceExhausted,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY => Code::Unavailable,
        StatusCode::INTERNAL_SERVER_ERROR => Code::Internal,
        _ => Code::Unknown,
    }
}

/// A status answered before any call ran.
fn answer_status(status: Status) -> Response {
    status.into_http::<Body>().into_response()
}

/// A call to one method by one caller.
struct Call<H> {
    engine: TaskEngine<H>,
    surface: Arc<Surface>,
    method: MethodDescriptor,
    inbound: Inbound,
    /// The request's headers: its metadata, read as the other bindings read their headers.
    headers: HeaderMap,
}

impl<H> Clone for Call<H> {
    fn clone(&self) -> Self {
        let Self { engine, surface, method, inbound, headers } = self;
        Self {
            engine: engine.clone(),
            surface: surface.clone(),
            method: method.clone(),
            inbound: inbound.clone(),
            headers: headers.clone(),
        }
    }
}

impl<H: TaskHandler> Call<H> {
    /// Runs the method on its decoded request.
    async fn run(self, request: Bytes) -> Result<Answer, Status> {
        let name = self.method.name();
        crate::observe::record_a2a_method(name);
        let params = mesh_a2a_grpc::decode_json(&self.method.input(), request)
            .map_err(|e| into_status(Failure::invalid_params(e.to_string())))?;
        let answering = GrpcAnswer { output: self.method.output() };
        if name == method::v1::GET_EXTENDED_AGENT_CARD {
            return match self.surface.extended_card(&self.headers, &self.inbound) {
                Ok(document) => Ok(answering.unary(document.card())),
                Err(CardRefusal::Failure(failure)) => Err(into_status(failure)),
                // As gRPC says a call lacks credentials, where the trust layer answers 401.
                Err(CardRefusal::Unauthenticated(error)) => Err(Status::unauthenticated(error.to_string())),
            };
        }
        call_v1(&self.engine, name, Some(params), &self.inbound, answering).await.map_err(into_status)
    }
}

impl<H: TaskHandler> UnaryService<Bytes> for Call<H> {
    type Response = Bytes;
    type Future = BoxFuture<'static, Result<tonic::Response<Bytes>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let call = self.clone();
        Box::pin(async move {
            match call.run(request.into_inner()).await? {
                Answer::Unary(message) => Ok(tonic::Response::new(message?)),
                Answer::Stream(_) => Err(Status::internal("a unary method answered with a stream")),
            }
        })
    }
}

impl<H: TaskHandler> ServerStreamingService<Bytes> for Call<H> {
    type Response = Bytes;
    type ResponseStream = BoxStream<'static, Result<Bytes, Status>>;
    type Future = BoxFuture<'static, Result<tonic::Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let call = self.clone();
        Box::pin(async move {
            match call.run(request.into_inner()).await? {
                Answer::Stream(events) => Ok(tonic::Response::new(events)),
                Answer::Unary(_) => Err(Status::internal("a streaming method answered with one message")),
            }
        })
    }
}

fn into_status(failure: Failure) -> Status {
    mesh_a2a_grpc::status(failure.code, failure.message)
}

/// A method's answer as protobuf: one message, or a stream of them.
enum Answer {
    Unary(Result<Bytes, Status>),
    Stream(BoxStream<'static, Result<Bytes, Status>>),
}

/// gRPC's framing of a 1.0 method's answer: its ProtoJSON written as the method's response message.
struct GrpcAnswer {
    output: MessageDescriptor,
}

impl Answering for GrpcAnswer {
    type Output = Answer;

    fn unary<T: Serialize>(self, result: T) -> Answer {
        Answer::Unary(encode(&self.output, &result))
    }

    fn stream(self, events: impl Stream<Item = Result<StreamResponse, Failure>> + Send + 'static) -> Answer {
        // An error ends the stream with its status.
        Answer::Stream(events.map(move |event| encode(&self.output, &event.map_err(into_status)?)).boxed())
    }
}

/// An answer as the response message; an answer that does not fit it is the agent's fault.
fn encode<T: Serialize>(output: &MessageDescriptor, answer: &T) -> Result<Bytes, Status> {
    let failed = |detail: String| {
        tracing::error!(message = output.full_name(), %detail, "an answer could not be written as protobuf");
        mesh_a2a_grpc::status(
            mesh_protocol::jsonrpc::A2aErrorCode::InternalError,
            "the agent's answer could not be encoded",
        )
    };
    let json = match serde_json::to_value(answer).map_err(|e| failed(e.to_string()))? {
        // `google.protobuf.Empty`, which the JSON bindings answer as `null`.
        Value::Null => Value::Object(serde_json::Map::new()),
        json => json,
    };
    mesh_a2a_grpc::encode_json(output, json).map_err(|e| failed(e.to_string()))
}
