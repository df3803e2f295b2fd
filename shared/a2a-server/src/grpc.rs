//! The gRPC binding (A2A 1.0, service `lf.a2a.v1.A2AService`) on the agent's own HTTP port:
//! gRPC clients speak HTTP/2 without TLS to the same listener, and their calls are routed here
//! by path (`/lf.a2a.v1.A2AService/{method}`), behind the same layers as the other bindings
//! (access control, limits, call admission, metrics). Each method's protobuf request is read as
//! its ProtoJSON params and runs through the same 1.0 methods as JSON-RPC ([`super::methods`]);
//! errors are the spec's gRPC statuses with an `ErrorInfo`. The client's version travels as
//! `a2a-version` metadata and its extensions as `a2a-extensions`, checked as the other bindings
//! check their headers ([`Surface`]).

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{Extensions, HeaderMap, Request};
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

use crate::engine::{TaskEngine, TaskHandler};
use crate::methods::{Answering, call_v1};
use crate::surface::{CardRefusal, Surface};
use crate::{Failure, Inbound, Version};

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
        mesh_server::observe::record_a2a_method(name);
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
