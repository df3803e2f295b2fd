//! gRPC clients' view of the layers' refusals: a gRPC status in place of the mesh's JSON body.

use std::future::Future;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tonic::Status;

use crate::middleware::{Middleware, Refusal};

/// The longest error body of a layer read to put its message in a status.
const REFUSAL_BODY_BYTES_MAX: usize = 64 * 1024;

/// Answers a gRPC call that a layer in front of the binding refused (the trust layer's 401, the
/// rate limit's 429, load shedding's 503, the body limit's 413, the timeout's 504, a route that
/// does not exist) with the gRPC status of its meaning in place of the JSON body: a gRPC client
/// reads an HTTP error with a body as a broken stream (`INTERNAL`), not as the refusal it is.
/// The refusal's headers that tell the client what to do (`www-authenticate`, `retry-after`) and
/// its request id stay. Other requests pass untouched.
#[derive(Debug, Clone, Copy)]
pub struct GrpcRefusals;

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
