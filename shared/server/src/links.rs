//! The link check where calls are admitted (issue #14): who called, by the trust layer or the
//! call chain, and the answer to a call no link of the communication graph allows.
//!
//! The caller is the agent the trust layer authenticated ([`AuthenticatedAgent`]) when there is
//! one, else the last hop of the call chain; a call with no chain comes from a user, not an
//! agent, and links do not govern it. A denied call answers `403` `LINK_DENIED` naming the
//! missing link; on JSON-RPC, a JSON-RPC error carrying that body.

use axum::extract::Request;
use axum::http::StatusCode;
use mesh_client::CallScope;
use mesh_graph::{Decision, Denial, LinkCache};

use crate::error::ErrorResponse;
use crate::middleware::Refusal;

/// JSON-RPC code of a call no link allows: in JSON-RPC's server-error range, outside the A2A
/// catalogue (-32001..-32009); `data` carries the mesh error body (`error_code` `LINK_DENIED`).
pub const LINK_DENIED_JSONRPC_CODE: i64 = -32040;

/// The agent a request comes from, as the trust layer authenticated it. When present (as a
/// request extension) the link check trusts it over the call chain, which the caller writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticatedAgent(pub String);

/// The link check of a call admitted with `scope`, sent by `authenticated` when the trust layer
/// knows who sent it.
pub fn admit(links: &LinkCache, scope: &CallScope, authenticated: Option<&AuthenticatedAgent>) -> Result<(), Denial> {
    let context = scope.context();
    let caller = authenticated.map(|agent| agent.0.as_str()).or(context.chain.last().map(String::as_str));
    match links.admit(caller, scope.agent(), context.context_id.as_deref()) {
        Decision::Allowed(_) => Ok(()),
        Decision::Denied(denial) => Err(denial),
    }
}

/// The answer to a denied call: a JSON-RPC error on the JSON-RPC route (its request id echoed),
/// the mesh error body elsewhere; `403` either way.
pub fn denied(request: Request, denial: &Denial) -> Refusal {
    let error = ErrorResponse::new(StatusCode::FORBIDDEN, Denial::ERROR_CODE, denial.to_string());
    Box::pin(crate::auth::refusal(request, error, LINK_DENIED_JSONRPC_CODE))
}

#[cfg(test)]
mod tests {
    use axum::http::Method;
    use axum::response::Response;
    use mesh_graph::DenialReason;
    use serde_json::Value;

    use super::*;

    fn request(method: Method, path: &str, body: &str) -> Request {
        Request::builder().method(method).uri(path).body(axum::body::Body::from(body.to_owned())).unwrap()
    }

    fn denial() -> Denial {
        Denial { caller: "a".into(), target: "b".into(), reason: DenialReason::NoLink }
    }

    async fn body(response: Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_denial_is_a_403_mesh_body_or_a_json_rpc_error_with_the_request_id() {
        let response = denied(request(Method::POST, "/tasks/send", "{}"), &denial()).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let error = body(response).await;
        assert_eq!(error["error_code"], "LINK_DENIED");
        assert!(error["error_message"].as_str().unwrap().starts_with("no enabled link lets a call b"));

        let rpc = r#"{"jsonrpc":"2.0","id":"req-7","method":"SendMessage","params":{}}"#;
        let response = denied(request(Method::POST, "/", rpc), &denial()).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let answer = body(response).await;
        assert_eq!(answer["id"], "req-7");
        assert_eq!(answer["error"]["code"], LINK_DENIED_JSONRPC_CODE);
        assert_eq!(answer["error"]["data"]["error_code"], "LINK_DENIED");
        let answer = body(denied(request(Method::POST, "/", "not json"), &denial()).await).await;
        assert_eq!(answer["id"], Value::Null);
    }
}
