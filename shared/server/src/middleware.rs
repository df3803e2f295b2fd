//! The kit's own form of middleware, for the layers every request passes through.
//!
//! A [`Middleware`] decides on a request synchronously ([`Middleware::before`]: let it in,
//! annotate it, or answer it without going further), and may wrap the answer of the service
//! below ([`Middleware::after`]). Its service calls the service below in place, as tower-http's
//! layers do. axum's `middleware::from_fn` cannot: its `Next` owns the service below, so every
//! request clones and boxes the whole stack under each such layer. With the eleven a task call
//! passed through, that cloning, boxing and dropping was the largest share of a `SendMessage`'s
//! CPU time in the agent kit (about a fifth; see the README's `send_message` benchmark).

use std::convert::Infallible;
use std::future::Future;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use futures::future::BoxFuture;
use tower::{Layer, Service};

/// The answer to a request a middleware does not let through; a future, since some refusals
/// read the request's body first (a JSON-RPC refusal echoes the request's id).
pub type Refusal = BoxFuture<'static, Response>;

/// A refusal known at once.
pub fn refuse_now(answer: impl IntoResponse) -> Refusal {
    Box::pin(std::future::ready(answer.into_response()))
}

/// A layer of the request path: see the module's documentation.
pub trait Middleware: Clone + Send + Sync + 'static {
    /// What [`Middleware::before`] keeps for [`Middleware::after`] while the request runs (a
    /// permit, a guard, the request's start).
    type Pass: Send + 'static;

    /// Lets `request` through (possibly changed) or answers it.
    fn before(&self, request: &mut Request) -> Result<Self::Pass, Refusal>;

    /// Calls the service below (`call`) for a request let through. In place unless the
    /// middleware sets a context for the request's work (its trace span), inside which the
    /// layers below start their own part of it.
    fn call_below<R>(pass: &Self::Pass, call: impl FnOnce() -> R) -> R {
        let _ = pass;
        call()
    }

    /// The request's answer, from the service below's `answer`: by default that answer, with
    /// the pass kept until it is ready (a permit is held while the request runs).
    fn after<F>(pass: Self::Pass, answer: F) -> impl Future<Output = Response> + Send + 'static
    where
        F: Future<Output = Response> + Send + 'static,
    {
        async move {
            let response = answer.await;
            drop(pass);
            response
        }
    }
}

/// Wraps services in `middleware`.
pub fn layer<M: Middleware>(middleware: M) -> MiddlewareLayer<M> {
    MiddlewareLayer(middleware)
}

/// The [`Layer`] of a [`Middleware`].
#[derive(Debug, Clone)]
pub struct MiddlewareLayer<M>(M);

impl<M: Clone, S> Layer<S> for MiddlewareLayer<M> {
    type Service = Wrapped<M, S>;

    fn layer(&self, below: S) -> Self::Service {
        Wrapped { middleware: self.0.clone(), below }
    }
}

/// A service wrapped in a [`Middleware`].
#[derive(Debug, Clone)]
pub struct Wrapped<M, S> {
    middleware: M,
    below: S,
}

impl<M, S> Service<Request> for Wrapped<M, S>
where
    M: Middleware,
    S: Service<Request, Error = Infallible>,
    S::Response: IntoResponse,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.below.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        match self.middleware.before(&mut request) {
            Ok(pass) => {
                let below = &mut self.below;
                let answer = M::call_below(&pass, || below.call(request));
                let answer = answer.map(|answer| match answer {
                    Ok(response) => response.into_response(),
                    Err(never) => match never {},
                });
                Box::pin(M::after(pass, answer).map(Ok))
            }
            Err(refusal) => Box::pin(refusal.map(Ok)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    /// Refuses requests to `/closed`, tags the others with a header, and notes in `log` what it
    /// saw, in order.
    #[derive(Clone)]
    struct Tagging {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Middleware for Tagging {
        type Pass = (&'static str, Arc<Mutex<Vec<String>>>);

        fn before(&self, request: &mut Request) -> Result<Self::Pass, Refusal> {
            self.log.lock().unwrap().push(format!("{} before", self.name));
            if request.uri().path() == "/closed" {
                return Err(refuse_now((StatusCode::FORBIDDEN, self.name)));
            }
            Ok((self.name, self.log.clone()))
        }

        async fn after<F>((name, log): Self::Pass, answer: F) -> Response
        where
            F: Future<Output = Response> + Send + 'static,
        {
            let mut response = answer.await;
            log.lock().unwrap().push(format!("{name} after"));
            response.headers_mut().append("x-passed", name.parse().unwrap());
            response
        }
    }

    fn app(log: &Arc<Mutex<Vec<String>>>) -> Router {
        let handler_log = log.clone();
        Router::new()
            .route(
                "/open",
                get(move || async move {
                    handler_log.lock().unwrap().push("handler".into());
                    "answered"
                }),
            )
            .route("/closed", get(|| async { "never" }))
            .layer(layer(Tagging { name: "inner", log: log.clone() }))
            .layer(layer(Tagging { name: "outer", log: log.clone() }))
    }

    async fn get_path(app: Router, path: &str) -> Response {
        app.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap()
    }

    #[tokio::test]
    async fn a_request_let_through_passes_every_layer_in_order_and_back() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let response = get_path(app(&log), "/open").await;
        assert_eq!(response.status(), StatusCode::OK);
        let passed: Vec<_> = response.headers().get_all("x-passed").iter().map(|v| v.to_str().unwrap()).collect();
        assert_eq!(passed, ["inner", "outer"]);
        let body = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], b"answered");
        assert_eq!(*log.lock().unwrap(), ["outer before", "inner before", "handler", "inner after", "outer after"]);
    }

    #[tokio::test]
    async fn a_refusal_answers_without_the_layers_below_or_the_after_step() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let response = get_path(app(&log), "/closed").await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        // The outer layer, seeing /closed, refuses first: nothing below runs.
        assert_eq!(*log.lock().unwrap(), ["outer before"]);
        let body = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], b"outer");
    }
}
