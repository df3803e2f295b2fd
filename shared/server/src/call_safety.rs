//! The receiving side of call safety (seed 000): every task call is admitted or refused from its
//! call context before any work — a cycle (this agent already in the chain), a call at the depth
//! limit, or a malformed context each get their own JSON error naming the chain, and a call no
//! link allows (when the agent has a link cache, see [`crate::links`]) its `403 LINK_DENIED` —
//! and an admitted call runs no longer than its caller waits.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mesh_auth::{Caller, Role};
use mesh_client::CallScope;
use mesh_graph::LinkCache;
use mesh_protocol::call::{CallContext, CallRejection};

use crate::error::ErrorResponse;
use crate::links::{self, AuthenticatedAgent};
use crate::middleware::{Middleware, Refusal, refuse_now};

/// The HTTP status of a call refused or failed for a call-safety reason, by error code.
pub fn call_failure_status(error_code: &str) -> StatusCode {
    match error_code {
        "CALL_CYCLE_DETECTED" => StatusCode::LOOP_DETECTED,
        "CALL_DEPTH_EXCEEDED" | "CALL_CONTEXT_INVALID" => StatusCode::BAD_REQUEST,
        "CALL_BUSY" | "AGENT_CIRCUIT_OPEN" | "AGENT_UNAVAILABLE" | "REGISTRY_UNAVAILABLE" => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        "CALL_DEADLINE_EXCEEDED" | "AGENT_TIMEOUT" => StatusCode::GATEWAY_TIMEOUT,
        "LINK_DENIED" => StatusCode::FORBIDDEN,
        "AGENT_NOT_FOUND" => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_GATEWAY,
    }
}

fn refused(rejection: &CallRejection) -> ErrorResponse {
    ErrorResponse::new(call_failure_status(rejection.error_code()), rejection.error_code(), rejection.to_string())
}

/// Middleware for the task routes of the agent it names: reads the call context from the
/// headers, refuses what must be refused (the link check too, when the agent's link cache is a
/// request extension), and otherwise hands the handler a [`CallScope`] (as a request extension)
/// and cuts the call off when its caller's deadline passes.
#[derive(Debug, Clone)]
pub struct AdmitCalls(pub Arc<str>);

impl Middleware for AdmitCalls {
    /// The time the caller's deadline leaves, if it set one.
    type Pass = Option<Duration>;

    fn before(&self, request: &mut Request) -> Result<Self::Pass, Refusal> {
        let agent = &self.0;
        let headers = request.headers();
        // The call's headers are looked up by comparing the request's few names: a lookup by a
        // `&str` name parses and hashes the name first, for each of the eight.
        let header = |name: &str| headers.iter().find(|(header, _)| header.as_str() == name);
        // Only an agent's chain counts: a user (or an admin) is where a chain starts, so a chain
        // it writes itself would let it pose as the agents named there in the link check and in
        // a message's link context. On an open service every caller is trusted, chains included.
        let caller_is_person = matches!(
            request.extensions().get::<Caller>(),
            Some(Caller::Authenticated(principal)) if !principal.has(Role::Agent)
        );
        let context = CallContext::from_headers(|name| header(name).and_then(|(_, value)| value.to_str().ok()))
            .map(|mut context| {
                if caller_is_person {
                    context.chain.clear();
                    context.depth = 0;
                }
                context
            })
            .and_then(|context| context.admit(agent).map(|()| context));
        let mut context = match context {
            Ok(context) => context,
            Err(rejection) => {
                tracing::warn!(agent = %agent, %rejection, "call refused");
                return Err(refuse_now(refused(&rejection)));
            }
        };
        // A user's tenant is its credential's, whatever its headers say; the calls made for it
        // carry that tenant on to the agents they reach (which trust it from an agent only).
        if let Some(Caller::Authenticated(principal)) = request.extensions().get::<Caller>()
            && !principal.has(Role::Agent)
            && !principal.has(Role::Admin)
        {
            context.tenant = Some(principal.tenant.clone()).filter(|tenant| !tenant.is_empty());
        }
        let scope = CallScope::received(agent.as_ref(), context);
        if let Some(links) = request.extensions().get::<Arc<LinkCache>>()
            && let Err(denial) = links::admit(links, &scope, request.extensions().get::<AuthenticatedAgent>())
        {
            tracing::warn!(agent = %agent, %denial, "call refused");
            return Err(links::denied(std::mem::take(request), &denial));
        }
        let left = scope.time_left();
        request.extensions_mut().insert(scope);
        match left {
            Some(left) if left.is_zero() => Err(refuse_now(deadline_passed(left))),
            left => Ok(left),
        }
    }

    async fn after<F>(left: Self::Pass, answer: F) -> Response
    where
        F: Future<Output = Response> + Send + 'static,
    {
        let Some(left) = left else { return answer.await };
        match tokio::time::timeout(left, answer).await {
            Ok(response) => response,
            Err(_) => deadline_passed(left),
        }
    }
}

/// The answer to a call whose caller's deadline, `left` away when it arrived, passed.
fn deadline_passed(left: Duration) -> Response {
    ErrorResponse::new(
        StatusCode::GATEWAY_TIMEOUT,
        "CALL_DEADLINE_EXCEEDED",
        format!("the caller's deadline ({} ms) passed before the answer was ready", left.as_millis()),
    )
    .into_response()
}
