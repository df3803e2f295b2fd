//! What the gateway refuses or fails with, answered in the caller's binding. An error the A2A
//! protocol defines (a task not found, an unsupported operation, a body that is not JSON) is
//! answered as an agent would: a JSON-RPC error with `[ErrorInfo]` as its `data` (1.0) or
//! `"data": null` (0.3), HTTP 200; on HTTP+JSON an AIP-193 body with the error's own status. The
//! mesh's own refusals (policy, tenants, links, call chains, unreachable agents) are a JSON-RPC
//! error with the mesh error body as its `data`, or problem JSON (RFC 9457, with the mesh error
//! fields beside) on HTTP+JSON and every other route.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mesh_graph::Denial;
use mesh_protocol::call::CallRejection;
use mesh_protocol::jsonrpc::{A2aErrorCode, ErrorObject, Id, Response as RpcResponse, RestErrorBody};
use mesh_server::ErrorResponse;
use mesh_server::call_safety::call_failure_status;
use serde_json::{Value, json};

/// JSON-RPC code of a call the gateway's policy denies (HTTP 403); beside the mesh's other
/// refusals (-32040 link denied, -32041 no credential, -32042 missing role).
pub const POLICY_DENIED_JSONRPC_CODE: i64 = -32043;
/// JSON-RPC code of a call refused by its call context (cycle, depth, deadline).
pub const CALL_REFUSED_JSONRPC_CODE: i64 = -32044;
/// JSON-RPC code of a call the gateway could not deliver (agent down, circuit open, timeout).
pub const UPSTREAM_FAILED_JSONRPC_CODE: i64 = -32045;
const INVALID_REQUEST_JSONRPC_CODE: i64 = -32600;
const INTERNAL_JSONRPC_CODE: i64 = -32603;

/// The content type of an HTTP+JSON refusal.
const PROBLEM_JSON: &str = "application/problem+json";

/// Everything the gateway fails with.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("server failed: {0}")]
    Serve(#[source] std::io::Error),
    #[error("{0}")]
    Auth(#[from] mesh_auth::AuthError),
    #[error("{0}")]
    Server(#[from] mesh_server::ServerError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("the policy file {path}: {reason}")]
    Policy { path: String, reason: String },
    #[error("the gateway's policy denies this call ({0})")]
    PolicyDenied(String),
    #[error("{0}")]
    CallRefused(CallRejection),
    #[error("{0}")]
    LinkDenied(Denial),
    #[error("the caller's deadline ({0} ms) passed before the call could be sent")]
    DeadlinePassed(u64),
    #[error("task {0} not found")]
    TaskNotFound(String),
    #[error("no agent named {0:?} is registered")]
    AgentNotFound(String),
    #[error("no healthy agent offers the skill {0:?}")]
    NoAgentForSkill(String),
    #[error("no healthy agent has a skill that fits the message")]
    NoAgentForRequest,
    #[error("the circuit of agent {0:?} is open: it failed repeatedly, calls wait for its cool-down")]
    CircuitOpen(String),
    #[error("agent {agent:?} did not answer in {timeout_ms} ms")]
    Timeout { agent: String, timeout_ms: u64 },
    #[error("agent {agent:?} cannot be reached: {reason}")]
    Unavailable { agent: String, reason: String },
    #[error("agent {agent:?} is not reachable through the gateway: {reason}")]
    AddressRefused { agent: String, reason: String },
    #[error("the registry cannot be asked: {0}")]
    Registry(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0} is not offered through the gateway")]
    NotOffered(String),
    /// An error of the protocol itself: a body not declared JSON, not JSON, or no request.
    #[error("{message}")]
    Protocol { code: A2aErrorCode, message: String },
}

impl GatewayError {
    /// The A2A error this is, when the protocol defines it: answered in the binding's own shape.
    /// Another tenant's task is answered as one that does not exist.
    fn a2a_code(&self) -> Option<A2aErrorCode> {
        match self {
            Self::TaskNotFound(_) => Some(A2aErrorCode::TaskNotFound),
            Self::NotOffered(_) => Some(A2aErrorCode::UnsupportedOperation),
            Self::Protocol { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The HTTP status, the mesh error code and the JSON-RPC code of this error.
    fn codes(&self) -> (StatusCode, &str, i64) {
        if let Some(code) = self.a2a_code() {
            let status = StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
            return (status, code.reason(), code.code());
        }
        match self {
            Self::PolicyDenied(_) => (StatusCode::FORBIDDEN, "POLICY_DENIED", POLICY_DENIED_JSONRPC_CODE),
            Self::CallRefused(rejection) => {
                let code = rejection.error_code();
                (call_failure_status(code), code, CALL_REFUSED_JSONRPC_CODE)
            }
            Self::LinkDenied(_) => {
                (StatusCode::FORBIDDEN, Denial::ERROR_CODE, mesh_server::links::LINK_DENIED_JSONRPC_CODE)
            }
            Self::DeadlinePassed(_) => {
                (StatusCode::GATEWAY_TIMEOUT, "CALL_DEADLINE_EXCEEDED", CALL_REFUSED_JSONRPC_CODE)
            }
            Self::AgentNotFound(_) => (StatusCode::NOT_FOUND, "AGENT_NOT_FOUND", UPSTREAM_FAILED_JSONRPC_CODE),
            Self::NoAgentForRequest => (StatusCode::NOT_FOUND, "NO_AGENT_FOR_REQUEST", UPSTREAM_FAILED_JSONRPC_CODE),
            Self::NoAgentForSkill(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "AGENT_UNAVAILABLE", UPSTREAM_FAILED_JSONRPC_CODE)
            }
            Self::CircuitOpen(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "AGENT_CIRCUIT_OPEN", UPSTREAM_FAILED_JSONRPC_CODE)
            }
            Self::Timeout { .. } => (StatusCode::GATEWAY_TIMEOUT, "AGENT_TIMEOUT", UPSTREAM_FAILED_JSONRPC_CODE),
            Self::Unavailable { .. } => (StatusCode::BAD_GATEWAY, "AGENT_UNAVAILABLE", UPSTREAM_FAILED_JSONRPC_CODE),
            Self::AddressRefused { .. } => {
                (StatusCode::BAD_GATEWAY, "AGENT_ADDRESS_REFUSED", UPSTREAM_FAILED_JSONRPC_CODE)
            }
            Self::Registry(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "REGISTRY_UNAVAILABLE", UPSTREAM_FAILED_JSONRPC_CODE)
            }
            Self::Invalid(_) => (StatusCode::BAD_REQUEST, "REQUEST_INVALID", INVALID_REQUEST_JSONRPC_CODE),
            Self::Auth(error) => {
                let answer = mesh_server::auth::auth_error_response(error);
                let code = if answer.status == StatusCode::UNAUTHORIZED {
                    mesh_server::auth::AUTH_REQUIRED_JSONRPC_CODE
                } else {
                    mesh_server::auth::AUTH_FORBIDDEN_JSONRPC_CODE
                };
                (answer.status, auth_code(error), code)
            }
            Self::Bind { .. } | Self::Serve(_) | Self::Server(_) | Self::Config(_) | Self::Policy { .. } => {
                (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR", INTERNAL_JSONRPC_CODE)
            }
            Self::TaskNotFound(_) | Self::NotOffered(_) | Self::Protocol { .. } => {
                unreachable!("A2A errors are answered above")
            }
        }
    }

    /// This error as the mesh error body.
    fn body(&self) -> ErrorResponse {
        let (status, code, _) = self.codes();
        ErrorResponse::new(status, code, self.to_string())
    }

    /// This error answering a JSON-RPC request whose id is `id` (null when unread), of A2A 1.0
    /// (`v1`) or 0.3.
    pub fn jsonrpc(&self, id: Value, v1: bool) -> Response {
        if let Some(code) = self.a2a_code() {
            let id = serde_json::from_value(id).unwrap_or(Id::Null);
            let error = ErrorObject::in_version(code, self.to_string(), v1);
            return Json(RpcResponse::<Value>::error(id, error)).into_response();
        }
        let (status, _, code) = self.codes();
        let body = self.body();
        let answer = json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": code, "message": body.body.error_message, "data": body.body},
        });
        (status, Json(answer)).into_response()
    }
}

fn auth_code(error: &mesh_auth::AuthError) -> &'static str {
    match error {
        mesh_auth::AuthError::TenantForbidden(_) => "TENANT_FORBIDDEN",
        mesh_auth::AuthError::Missing => "AUTH_REQUIRED",
        mesh_auth::AuthError::Invalid(_) => "AUTH_INVALID",
        _ => "AUTH_FORBIDDEN",
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        self.rest()
    }
}

impl GatewayError {
    /// This error on HTTP+JSON and the gateway's own routes: an A2A error as an AIP-193 body;
    /// the mesh's refusals as problem JSON (RFC 9457) with the mesh error body's fields beside
    /// its own.
    pub fn rest(&self) -> Response {
        if let Some(code) = self.a2a_code() {
            let status = StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
            return (status, Json(RestErrorBody::new(code, self.to_string()))).into_response();
        }
        let answer = self.body();
        let status = answer.status;
        let mut problem = serde_json::to_value(&answer.body).unwrap_or_else(|_| json!({}));
        if let Value::Object(fields) = &mut problem {
            fields.insert("type".into(), json!(format!("urn:a2a-mesh:error:{}", answer.body.error_code)));
            fields.insert("title".into(), json!(answer.body.error_code));
            fields.insert("status".into(), json!(status.as_u16()));
            fields.insert("detail".into(), json!(answer.body.error_message));
        }
        let mut response = (status, Json(problem)).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(response: Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_refusal_is_a_json_rpc_error_or_problem_json_with_the_mesh_code() {
        let error = GatewayError::PolicyDenied("rule no-cancel".into());
        let response = error.jsonrpc(json!("r1"), true);
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let answer = body(response).await;
        assert_eq!(answer["id"], "r1");
        assert_eq!(answer["error"]["code"], POLICY_DENIED_JSONRPC_CODE);
        assert_eq!(answer["error"]["data"]["error_code"], "POLICY_DENIED");

        let response = error.rest();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        let problem = body(response).await;
        assert_eq!(problem["status"], 403);
        assert_eq!(problem["error_code"], "POLICY_DENIED");
        assert_eq!(problem["type"], "urn:a2a-mesh:error:POLICY_DENIED");
    }

    /// The conformance kit's JSONRPC-ERR-003, JSONRPC-SSE-002, HTTP_JSON-ERR-001 and -002: what
    /// the gateway answers itself of the protocol's errors has the protocol's shape.
    #[tokio::test]
    async fn an_a2a_error_has_the_bindings_own_shape_in_each_version() {
        let missing = GatewayError::TaskNotFound("t1".into());
        let response = missing.jsonrpc(json!(7), true);
        assert_eq!(response.status(), StatusCode::OK);
        let answer = body(response).await;
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["code"], -32001);
        assert_eq!(
            answer["error"]["data"],
            json!([{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "TASK_NOT_FOUND",
                "domain": "a2a-protocol.org",
                "metadata": {},
            }])
        );
        let answer = body(missing.jsonrpc(json!(7), false)).await;
        assert_eq!(answer["error"]["code"], -32001);
        assert_eq!(answer["error"]["data"], Value::Null);
        assert!(answer["error"].as_object().unwrap().contains_key("data"), "0.3 writes data: null");

        let response = missing.rest();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let rest = body(response).await;
        assert_eq!(rest["error"]["code"], 404);
        assert_eq!(rest["error"]["status"], "NOT_FOUND");
        assert_eq!(rest["error"]["message"], "task t1 not found");
        assert_eq!(rest["error"]["details"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(rest["error"]["details"][0]["domain"], "a2a-protocol.org");

        let wrong_type = GatewayError::Protocol {
            code: A2aErrorCode::ContentTypeNotSupported,
            message: "content type \"text/plain\" is not JSON: send application/json".into(),
        };
        let answer = body(wrong_type.jsonrpc(Value::Null, true)).await;
        assert_eq!(answer["error"]["code"], -32005);
        assert_eq!(answer["error"]["data"][0]["reason"], "CONTENT_TYPE_NOT_SUPPORTED");
        let not_json = GatewayError::Protocol { code: A2aErrorCode::ParseError, message: "not JSON".into() };
        let answer = body(not_json.jsonrpc(Value::Null, true)).await;
        assert_eq!(answer["error"]["code"], -32700);
        assert!(answer["error"].get("data").is_none(), "protocol-level errors carry no data: {answer}");
        let unsupported = body(GatewayError::NotOffered("ListTasks".into()).rest()).await;
        assert_eq!(unsupported["error"]["details"][0]["reason"], "UNSUPPORTED_OPERATION");
    }

    #[test]
    fn call_refusals_keep_the_call_safety_status() {
        let cycle =
            GatewayError::CallRefused(CallRejection::CycleDetected { agent: "a".into(), chain: vec!["a".into()] });
        assert_eq!(cycle.codes().0, StatusCode::LOOP_DETECTED);
        assert_eq!(cycle.codes().1, "CALL_CYCLE_DETECTED");
    }
}
