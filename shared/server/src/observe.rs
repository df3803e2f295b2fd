//! What an operator sees of every mesh server: a server span per request (OpenTelemetry
//! semantic conventions, the caller's W3C trace context continued), the request metrics in
//! Prometheus text at `GET /metrics`, one INFO log line per request, and the health endpoints
//! (`/health`, and `/health/live` and `/health/ready` with Kubernetes semantics).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use mesh_protocol::call::{CALL_DEPTH_HEADER, CONTEXT_ID_HEADER, CORRELATION_ID_HEADER, TENANT_HEADER};
use mesh_telemetry::{HandleCache, SERVICE_LABEL};
use metrics::{Gauge, Histogram};
use tracing::field::Empty;

use crate::http::{HttpLimits, REQUEST_ID_HEADER, with_common_layers};
use crate::limits::Rejection;
use crate::metrics::{HEALTH_UNHEALTHY, ServiceMetrics};
use crate::middleware::{Middleware, Refusal, layer};

/// Paths polled by machines (probes, scrapers): their log line is DEBUG, not INFO, so a quiet
/// mesh's log is not a list of polls.
const POLLED_PATHS: [&str; 4] = ["/health", "/health/live", "/health/ready", "/metrics"];
/// The `route` label of requests no route matched, so unknown paths cannot grow the label set.
const UNMATCHED_ROUTE: &str = "unmatched";
/// The Prometheus text exposition format's content type.
const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// [`with_common_layers`] plus observability: `/metrics` beside `router`'s routes, and every
/// request traced, measured and logged as `service`'s. Every mesh server is built with it.
pub fn with_observed_layers(router: Router, limits: HttpLimits, service: &str) -> Router {
    let service: Arc<str> = Arc::from(service);
    let scraped = service.clone();
    let routes = router.route(
        "/metrics",
        get(move || {
            let service = scraped.clone();
            async move { ([(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)], mesh_telemetry::render(&service)) }
        }),
    );
    let instruments =
        Instruments { service, in_flight: OnceLock::new(), durations: HandleCache::new(DURATION_SERIES_CACHED_MAX) };
    with_common_layers(routes, limits).layer(layer(Observe(Arc::new(instruments))))
}

/// `GET /health` (the full report; 503 when unhealthy), `GET /health/live` (200 while the
/// process serves: a failing liveness probe restarts it) and `GET /health/ready` (503 while it
/// cannot serve: no traffic is sent to it meanwhile).
pub fn health_routes(metrics: Arc<ServiceMetrics>) -> Router {
    Router::new()
        .route(
            "/health",
            get(|State(metrics): State<Arc<ServiceMetrics>>| async move {
                let report = metrics.report();
                let status =
                    if report.status == HEALTH_UNHEALTHY { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
                (status, Json(report))
            }),
        )
        .route("/health/live", get(|| async { Json(serde_json::json!({ "status": "alive" })) }))
        .route(
            "/health/ready",
            get(|State(metrics): State<Arc<ServiceMetrics>>| async move {
                // Registration is not waited for: an agent serves its callers while the registry is down.
                let report = metrics.report();
                let ready = report.status != HEALTH_UNHEALTHY;
                let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                let body = serde_json::json!({
                    "status": if ready { "ready" } else { "not_ready" },
                    "health": report.status,
                    "draining": report.draining,
                    "reasons": report.reasons,
                    "registration": report.registration,
                });
                (status, Json(body))
            }),
        )
        .with_state(metrics)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Keeps the in-flight gauge right when a request is cut off (a dropped connection drops the
/// future mid-way).
struct InFlight(metrics::Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Traces, measures and logs every request as its service's (see the module's documentation).
#[derive(Debug, Clone)]
struct Observe(Arc<Instruments>);

/// The label sets of the request duration histogram whose handles a server keeps: far more than
/// its routes, methods and statuses make; past it, series are registered per request.
const DURATION_SERIES_CACHED_MAX: usize = 1024;

/// A server's request metrics, their handles kept rather than registered per request.
#[derive(Debug)]
struct Instruments {
    service: Arc<str>,
    /// `http_server_active_requests{service}`, registered at the first request.
    in_flight: OnceLock<Gauge>,
    /// `http_server_request_duration_seconds{service, method, route, status}`.
    durations: HandleCache<(Method, String, StatusCode), Histogram>,
}

/// What [`Observe`] keeps of a request while it runs.
struct Observed {
    request: RequestFacts,
    root: mesh_telemetry::Root,
    in_flight: InFlight,
}

/// What the request's measure and log line say of it.
struct RequestFacts {
    instruments: Arc<Instruments>,
    started: Instant,
    method: Method,
    route: String,
    tenant: Option<String>,
}

impl Middleware for Observe {
    type Pass = Observed;

    fn before(&self, request: &mut Request) -> Result<Observed, Refusal> {
        let instruments = self.0.clone();
        let service: &str = &instruments.service;
        let started = Instant::now();
        let method = request.method().clone();
        let matched = request.extensions().get::<MatchedPath>();
        let route = matched.map_or(UNMATCHED_ROUTE, MatchedPath::as_str).to_owned();
        let headers = request.headers();
        let tenant = header(headers, TENANT_HEADER).map(str::to_owned);
        // Sampled at the head: an unsampled request builds no span, only carries its trace context on.
        let root = mesh_telemetry::Root::start(service, mesh_telemetry::extract(headers), || {
            let name = [method.as_str(), route.as_str()].join(" ");
            tracing::info_span!(
                "request",
                otel.name = name,
                otel.kind = "server",
                otel.status_code = Empty,
                http.request.method = method.as_str(),
                http.route = matched.map(MatchedPath::as_str),
                url.path = request.uri().path(),
                http.response.status_code = Empty,
                error.type = Empty,
                mesh.service = service,
                gen_ai.agent.name = service,
                mesh.request_id = header(headers, REQUEST_ID_HEADER.as_str()),
                mesh.correlation_id = header(headers, CORRELATION_ID_HEADER),
                mesh.tenant = tenant.as_deref(),
                mesh.call_depth = header(headers, CALL_DEPTH_HEADER).and_then(|d| d.parse::<i64>().ok()),
                a2a.context_id = header(headers, CONTEXT_ID_HEADER),
                a2a.method = Empty,
                a2a.task_id = Empty,
                gen_ai.operation.name = Empty,
            )
        });
        let in_flight = instruments
            .in_flight
            .get_or_init(
                || metrics::gauge!("http_server_active_requests", SERVICE_LABEL => instruments.service.clone()),
            )
            .clone();
        in_flight.increment(1.0);
        let request = RequestFacts { instruments, started, method, route, tenant };
        Ok(Observed { request, root, in_flight: InFlight(in_flight) })
    }

    /// The layers below start their part of the request (their spans, their log lines) in its trace.
    fn call_below<R>(observed: &Observed, call: impl FnOnce() -> R) -> R {
        observed.root.in_scope(call)
    }

    async fn after<F>(observed: Observed, answer: F) -> Response
    where
        F: Future<Output = Response> + Send + 'static,
    {
        let Observed { request, root, in_flight } = observed;
        let span = root.span().clone();
        let response = root.instrument(answer).await;
        drop(in_flight);
        request.finish(&span, response)
    }
}

impl RequestFacts {
    /// Measures and logs the request, answered `response`, and ends its `span`.
    fn finish(self, span: &tracing::Span, response: Response) -> Response {
        let Self { instruments, started, method, route, tenant } = self;
        let service = &instruments.service;
        let status = response.status();
        let elapsed = started.elapsed();
        let durations =
            instruments.durations.get((method.clone(), route.clone(), status), |(method, route, status)| {
                metrics::histogram!(
                    "http_server_request_duration_seconds",
                    SERVICE_LABEL => service.clone(),
                    "method" => method.as_str().to_owned(),
                    "route" => route.clone(),
                    "status" => status.as_str().to_owned(),
                )
            });
        durations.record(elapsed.as_secs_f64());
        if let Some(rejection) = response.extensions().get::<Rejection>() {
            metrics::counter!("mesh_requests_rejected_total", SERVICE_LABEL => service.clone(), "reason" => rejection.reason())
            .increment(1);
        }
        let request_id = header(response.headers(), REQUEST_ID_HEADER.as_str()).unwrap_or_default();
        let trace_id = if span.is_disabled() {
            None
        } else {
            span.record("http.response.status_code", i64::from(status.as_u16()));
            span.record("mesh.request_id", request_id);
            if status.is_server_error() {
                span.record("error.type", status.as_str());
                span.record("otel.status_code", "ERROR");
            }
            mesh_telemetry::trace_id(span)
        };
        let duration_ms = elapsed.as_secs_f64() * 1000.0;
        let tenant = tenant.as_deref().unwrap_or_default();
        let trace_id = trace_id.as_deref().unwrap_or_default();
        if POLLED_PATHS.contains(&route.as_str()) {
            tracing::debug!(target: "mesh::request", %service, %method, %route, status = status.as_u16(), duration_ms, request_id, tenant, trace_id, "request");
        } else {
            tracing::info!(target: "mesh::request", %service, %method, %route, status = status.as_u16(), duration_ms, request_id, tenant, trace_id, "request");
        }
        if span.is_disabled() || !is_event_stream(&response) {
            return response;
        }
        // A stream's server span lasts as long as the stream: its body is polled inside the span,
        // whose end is its last exit.
        response.map(|body| Body::new(InSpan { body, span: span.clone() }))
    }
}

fn is_event_stream(response: &Response) -> bool {
    response.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// A response body polled inside a span, so the span ends when the body does.
struct InSpan {
    body: Body,
    span: tracing::Span,
}

impl http_body::Body for InSpan {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        Pin::new(&mut this.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Names the A2A method (`SendMessage`, `message/send`, ...) a request calls on its server span.
pub fn record_a2a_method(method: &str) {
    let span = tracing::Span::current();
    span.record("a2a.method", method);
    span.record("gen_ai.operation.name", "invoke_agent");
}

/// Names the task (and its conversation) a request works on, on its server span.
pub fn record_task(task_id: &str, context_id: Option<&str>) {
    let span = tracing::Span::current();
    span.record("a2a.task_id", task_id);
    if let Some(context_id) = context_id {
        span.record("a2a.context_id", context_id);
    }
}
