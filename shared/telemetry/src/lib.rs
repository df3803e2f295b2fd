//! Logs, traces and metrics shared by every mesh binary.
//!
//! Logs: `RUST_LOG` picks what is logged (default `info`); `MESH_LOG_FORMAT=json` switches to one
//! JSON object per line for log collectors, carrying `trace_id` and `span_id` when tracing is on.
//!
//! Traces: OpenTelemetry over OTLP/HTTP (protobuf), configured by the standard variables
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER` and `_ARG`,
//! `OTEL_RESOURCE_ATTRIBUTES`); off, with no OpenTelemetry layer at all, when no endpoint is set.
//! Every service's spans carry its own `service.name`, even when services share a process.
//!
//! Metrics: the `metrics` facade, rendered as Prometheus text per service ([`render`]), and
//! pushed over OTLP/HTTP too when an endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, unless `OTEL_METRICS_EXPORTER=none`).

mod handles;
mod otlp_metrics;
mod prometheus;
mod traces;

use tracing::Subscriber;
use tracing_subscriber::filter::{FilterExt, LevelFilter, filter_fn};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

pub use handles::HandleCache;
pub use otlp_metrics::MetricsSettings;
pub use prometheus::{SERVICE_LABEL, install_metrics, install_metrics_with, render};
pub use traces::{
    Root, Services, TraceSettings, current_fields, extract, extract_fields, in_current_trace, inject, inject_current,
    recording, sampled_out, span_event, span_ids, trace_id, tracing_enabled,
};

/// Log level used when `RUST_LOG` is unset.
const DEFAULT_LOG_FILTER: &str = "info";

/// The least severe spans and events exported as spans and span events, whatever `RUST_LOG`
/// says: the mesh's own spans are at INFO; DEBUG ones (tower-http's) would only repeat them.
const TRACE_LEVEL_MIN: LevelFilter = LevelFilter::INFO;

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
    #[error("telemetry is already installed in this process")]
    AlreadyInstalled,
}

/// Output shape of the log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// Reads `MESH_LOG_FORMAT` (`json` or anything else for text).
    pub fn from_env() -> Self {
        match std::env::var("MESH_LOG_FORMAT") {
            Ok(value) if value.eq_ignore_ascii_case("json") => Self::Json,
            _ => Self::Text,
        }
    }
}

/// Installs logging, tracing and OTLP metrics (from the environment) and Prometheus metrics for
/// a process serving one service. Later calls (tests) keep the first installation, which is
/// why nothing is returned: a failure is printed and the process goes on without what failed.
pub fn init(format: LogFormat) {
    init_with(format, TraceSettings::from_env(Services::One), MetricsSettings::from_env());
}

/// [`init`] for a process serving several services (`up`).
pub fn init_suite(format: LogFormat) {
    init_with(format, TraceSettings::from_env(Services::Several), MetricsSettings::from_env());
}

/// [`init`] with explicit settings (`None`: no tracing, no OTLP metrics), for tests and benchmarks.
pub fn init_with(format: LogFormat, traces: Option<TraceSettings>, otlp_metrics: Option<MetricsSettings>) {
    if let Err(error) = install_metrics_with(otlp_metrics) {
        eprintln!("metrics are off: {error}");
    }
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    // With tracing on, spans go to the trace backend and log lines name their trace: the log
    // layer keeps events only, rather than format every field of every span into text that
    // only a line logged inside the span would print.
    let traced = traces.is_some();
    let filter = filter.and(filter_fn(move |metadata| !traced || metadata.is_event()));
    // Logs on stderr: stdout is for what a command prints (`up`'s URLs, `ask`'s answer).
    let logs: Box<dyn Layer<Registry> + Send + Sync> = match format {
        // Colours only for a person at a terminal: in a file or a pipe the escape codes are noise
        // to whoever reads or greps the log, and writing them was a tenth of a request's log line.
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_target(true)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(std::io::stderr)
            .map_event_format(WithTraceIds)
            .with_filter(filter)
            .boxed(),
    };
    let spans = match traces.map(traces::install).transpose() {
        Ok(tracer) => tracer,
        Err(TelemetryError::AlreadyInstalled) => return,
        Err(error) => {
            eprintln!("tracing is off: {error}");
            None
        }
    };
    let spans = spans.map(|tracer| {
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_tracked_inactivity(false)
            // The context is not made current on every poll of a span's future: the mesh reads a
            // span's context from the span itself ([`traces::current_context`]).
            .with_context_activation(false)
            .with_target(false)
            .with_filter(TRACE_LEVEL_MIN)
    });
    let _already_installed = tracing_subscriber::registry().with(logs).with(spans).try_init();
}

/// Exports every span ended so far and pushes every OTLP metric (tests, and before a process
/// exits).
pub fn flush() {
    traces::flush_traces();
    prometheus::flush_metrics();
}

/// A JSON event format that puts the current span's `trace_id` and `span_id` first, when the
/// span is exported, so a log line leads to its trace.
struct WithTraceIds<F>(F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let Some((trace_id, span_id)) = span_ids(&tracing::Span::current()) else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => write!(writer, "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"),
            None => writer.write_str(&line),
        }
    }
}
