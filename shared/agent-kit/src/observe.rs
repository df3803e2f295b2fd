//! What an operator sees of every mesh server: a server span per request (OpenTelemetry
//! semantic conventions, the caller's W3C trace context continued), the request metrics in
//! Prometheus text at `GET /metrics`, one INFO log line per request, and the health endpoints
//! (`/health`, and `/health/live` and `/health/ready` with Kubernetes semantics).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use mesh_protocol::call::{CALL_DEPTH_HEADER, CONTEXT_ID_HEADER, CORRELATION_ID_HEADER, TENANT_HEADER};
use mesh_telemetry::SERVICE_LABEL;
use tracing::Instrument;
use tracing::field::Empty;

use crate::http::{HttpLimits, REQUEST_ID_HEADER, with_common_layers};
use crate::metrics::{HEALTH_UNHEALTHY, ServiceMetrics};

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
    with_common_layers(routes, limits).layer(middleware::from_fn_with_state(service, observe))
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

async fn observe(State(service): State<Arc<str>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let matched = request.extensions().get::<MatchedPath>().map(|path| path.as_str().to_owned());
    let route = matched.clone().unwrap_or_else(|| UNMATCHED_ROUTE.to_owned());
    let headers = request.headers();
    let tenant = header(headers, TENANT_HEADER).map(str::to_owned);
    let span = if mesh_telemetry::tracing_enabled() {
        let span = tracing::info_span!(
            "request",
            otel.name = %format!("{method} {route}"),
            otel.kind = "server",
            otel.status_code = Empty,
            http.request.method = %method,
            http.route = matched.as_deref(),
            url.path = request.uri().path(),
            http.response.status_code = Empty,
            error.type = Empty,
            mesh.service = &*service,
            gen_ai.agent.name = &*service,
            mesh.request_id = header(headers, REQUEST_ID_HEADER.as_str()),
            mesh.correlation_id = header(headers, CORRELATION_ID_HEADER),
            mesh.tenant = tenant.as_deref(),
            mesh.call_depth = header(headers, CALL_DEPTH_HEADER).and_then(|d| d.parse::<i64>().ok()),
            a2a.context_id = header(headers, CONTEXT_ID_HEADER),
            a2a.method = Empty,
            a2a.task_id = Empty,
            gen_ai.operation.name = Empty,
        );
        mesh_telemetry::enter_service(&span, &service, mesh_telemetry::extract(headers));
        span
    } else {
        tracing::Span::none()
    };
    let in_flight = metrics::gauge!("http_server_active_requests", SERVICE_LABEL => service.to_string());
    in_flight.increment(1.0);
    let in_flight = InFlight(in_flight);

    let response = next.run(request).instrument(span.clone()).await;
    drop(in_flight);

    let status = response.status();
    let elapsed = started.elapsed();
    metrics::histogram!(
        "http_server_request_duration_seconds",
        SERVICE_LABEL => service.to_string(),
        "method" => method.as_str().to_owned(),
        "route" => route.clone(),
        "status" => status.as_str().to_owned(),
    )
    .record(elapsed.as_secs_f64());
    let request_id = header(response.headers(), REQUEST_ID_HEADER.as_str()).unwrap_or_default();
    span.record("http.response.status_code", i64::from(status.as_u16()));
    span.record("mesh.request_id", request_id);
    if status.is_server_error() {
        span.record("error.type", status.as_str());
        span.record("otel.status_code", "ERROR");
    }
    let trace_id = mesh_telemetry::trace_id(&span);
    let duration_ms = elapsed.as_secs_f64() * 1000.0;
    let tenant = tenant.as_deref().unwrap_or_default();
    let trace_id = trace_id.as_deref().unwrap_or_default();
    if POLLED_PATHS.contains(&route.as_str()) {
        tracing::debug!(target: "mesh::request", %service, %method, %route, status = status.as_u16(), duration_ms, request_id, tenant, trace_id, "request");
    } else {
        tracing::info!(target: "mesh::request", %service, %method, %route, status = status.as_u16(), duration_ms, request_id, tenant, trace_id, "request");
    }
    response.into_response()
}

/// Names the A2A method (`SendMessage`, `message/send`, ...) a request calls on its server span.
pub(crate) fn record_a2a_method(method: &str) {
    let span = tracing::Span::current();
    span.record("a2a.method", method);
    span.record("gen_ai.operation.name", "invoke_agent");
}

/// Names the task (and its conversation) a request works on, on its server span.
pub(crate) fn record_task(task_id: &str, context_id: Option<&str>) {
    let span = tracing::Span::current();
    span.record("a2a.task_id", task_id);
    if let Some(context_id) = context_id {
        span.record("a2a.context_id", context_id);
    }
}
