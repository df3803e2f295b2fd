//! Traces over OTLP/HTTP (protobuf), one tracer provider per service.
//!
//! `a2a-mesh up` runs five services in one process, yet each span must reach the backend under
//! its own `service.name`, which OpenTelemetry keeps on the resource of a tracer provider, not on
//! the span. So the layer's tracer ([`ServiceTracer`]) picks, for every span, the provider of the
//! service the span belongs to: the service is a value of the OpenTelemetry context, set on the
//! root span of every unit of work a service does ([`Root::start`]: a request's server span, a
//! health-check round), and every child span inherits its parent's context, hence its service.
//!
//! Sampling is decided at the head of every unit of work, before its root span is built
//! ([`Root::start`]): an unsampled request builds no span at all, neither its own nor its
//! children's ([`recording`]), which is what makes a low sampling ratio cheap; its trace context
//! still travels to the services it calls ([`inject_current`]), with the sampled flag off, so
//! they do not sample it either.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, OnceLock, RwLock};

use futures::future::Either;
use opentelemetry::context::{FutureExt as _, WithContext};
use opentelemetry::propagation::{Extractor, TextMapCompositePropagator};
use opentelemetry::trace::{
    Link, SpanBuilder, SpanContext, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, SamplingResult, SdkTracer, SdkTracerProvider,
    ShouldSample,
};
use tracing::Instrument;
use tracing::instrument::Instrumented;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::TelemetryError;

/// Instrumentation scope of every mesh span.
const TRACER_NAME: &str = "a2a-mesh";
/// `service.name` of spans that belong to no service (a CLI command, start-up) when
/// `OTEL_SERVICE_NAME` is unset.
const SERVICE_NAME_DEFAULT: &str = "a2a-mesh";

/// How traces are exported; [`TraceSettings::from_env`] reads the standard variables.
#[derive(Debug, Clone, Default)]
pub struct TraceSettings {
    /// The full OTLP/HTTP traces URL (`http://host:4318/v1/traces`); `None` lets the exporter
    /// read `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`.
    pub traces_endpoint: Option<String>,
    /// `None` reads `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` (parent-based always-on
    /// when unset), as the SDK does.
    pub sampler: Option<Sampler>,
    /// The `service.name` of every span of a process that serves one service (`OTEL_SERVICE_NAME`);
    /// `None` names each span after its service.
    pub service_name: Option<String>,
    /// `service.name` of spans outside any service.
    pub process_name: Option<String>,
}

/// Whether the process runs one service or several (`up`), which decides what
/// `OTEL_SERVICE_NAME` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Services {
    /// `OTEL_SERVICE_NAME`, when set, is the `service.name` of every span.
    One,
    /// Every service's spans carry the service's own name; `OTEL_SERVICE_NAME` names the rest.
    Several,
}

impl TraceSettings {
    /// Tracing is on when an OTLP endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), unless `OTEL_SDK_DISABLED=true` or
    /// `OTEL_TRACES_EXPORTER=none`.
    pub fn from_env(services: Services) -> Option<Self> {
        let set = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        if disabled
            || (set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none() && set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none())
        {
            return None;
        }
        let service_name = set("OTEL_SERVICE_NAME");
        Some(match services {
            Services::One => Self { service_name, ..Self::default() },
            Services::Several => Self { process_name: service_name, ..Self::default() },
        })
    }
}

/// The service a span belongs to, carried in the OpenTelemetry context from a root span to its
/// descendants.
#[derive(Debug, Clone)]
struct ServiceName(Arc<str>);

/// Tracer providers by service, created on a service's first span.
#[derive(Debug)]
pub(crate) struct ServiceTracers {
    settings: TraceSettings,
    /// The configured sampler, asked once per unit of work at its head ([`Root::start`]).
    sampler: Box<dyn ShouldSample>,
    /// The provider of spans outside any service, built at start so a bad configuration shows then.
    process: (SdkTracerProvider, SdkTracer),
    services: RwLock<HashMap<Arc<str>, (SdkTracerProvider, SdkTracer)>>,
}

impl ServiceTracers {
    fn new(settings: TraceSettings) -> Result<Self, TelemetryError> {
        let name = settings.process_name.clone().unwrap_or_else(|| SERVICE_NAME_DEFAULT.to_owned());
        let sampler: Box<dyn ShouldSample> = match &settings.sampler {
            Some(sampler) => Box::new(sampler.clone()),
            // The SDK's own reading of OTEL_TRACES_SAMPLER and _ARG (parent-based always-on when unset).
            None => opentelemetry_sdk::trace::Config::default().sampler,
        };
        let process = provider(&settings, sampler.as_ref(), settings.service_name.as_deref().unwrap_or(&name))?;
        Ok(Self { settings, sampler, process, services: RwLock::new(HashMap::new()) })
    }

    fn tracer(&self, service: Option<&ServiceName>) -> SdkTracer {
        let Some(ServiceName(service)) = service else { return self.process.1.clone() };
        if let Some((_, tracer)) = self.services.read().unwrap_or_else(|e| e.into_inner()).get(service) {
            return tracer.clone();
        }
        let mut services = self.services.write().unwrap_or_else(|e| e.into_inner());
        if let Some((_, tracer)) = services.get(service) {
            return tracer.clone();
        }
        let name = self.settings.service_name.as_deref().unwrap_or(service);
        match provider(&self.settings, self.sampler.as_ref(), name) {
            Ok(built) => {
                let tracer = built.1.clone();
                services.insert(service.clone(), built);
                tracer
            }
            Err(error) => {
                // The process provider was built from the same settings, so this is unexpected;
                // the span still goes out, under the process's name.
                eprintln!("cannot build the tracer provider of {service}: {error}");
                self.process.1.clone()
            }
        }
    }

    fn providers(&self) -> Vec<SdkTracerProvider> {
        let services = self.services.read().unwrap_or_else(|e| e.into_inner());
        std::iter::once(self.process.0.clone()).chain(services.values().map(|(p, _)| p.clone())).collect()
    }
}

fn provider(
    settings: &TraceSettings,
    sampler: &dyn ShouldSample,
    service: &str,
) -> Result<(SdkTracerProvider, SdkTracer), TelemetryError> {
    let builder = opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(Protocol::HttpBinary);
    let builder = match &settings.traces_endpoint {
        Some(endpoint) => builder.with_endpoint(endpoint.clone()),
        None => builder,
    };
    let exporter = builder.build().map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    // The default detectors read OTEL_RESOURCE_ATTRIBUTES; the service's name comes last so it wins.
    let resource = Resource::builder().with_service_name(service.to_owned()).build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .with_sampler(HeadSampler(sampler.box_clone()))
        .build();
    let tracer = provider.tracer(TRACER_NAME);
    Ok((provider, tracer))
}

/// The tracer of the `tracing` layer: builds each span with its service's provider.
#[derive(Debug, Clone)]
pub(crate) struct ServiceTracer(Arc<ServiceTracers>);

impl Tracer for ServiceTracer {
    type Span = opentelemetry_sdk::trace::Span;

    fn build_with_context(&self, builder: SpanBuilder, parent_cx: &Context) -> Self::Span {
        self.0.tracer(parent_cx.get::<ServiceName>()).build_with_context(builder, parent_cx)
    }
}

/// Marks the context of a root span whose head was sampled by [`Root::start`].
#[derive(Debug, Clone, Copy)]
struct HeadSampled;

/// The providers' sampler: the configured one, except for a root span sampled at its head,
/// which is recorded without asking again (a second draw would sample a ratio's square, under
/// another trace id). Spans with a parent follow the configured sampler, which for a head
/// decided on a remote parent gives the same answer.
#[derive(Debug, Clone)]
struct HeadSampler(Box<dyn ShouldSample>);

impl ShouldSample for HeadSampler {
    fn should_sample(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let decided = parent.filter(|cx| !cx.span().span_context().is_valid() && cx.get::<HeadSampled>().is_some());
        if decided.is_some() {
            return SamplingResult {
                decision: SamplingDecision::RecordAndSample,
                attributes: Vec::new(),
                trace_state: TraceState::default(),
            };
        }
        self.0.should_sample(parent, trace_id, name, kind, attributes, links)
    }
}

/// The root span of a unit of work a service does (a request, a bus turn, a health round),
/// sampled at its head: with tracing off or the work unsampled, no span is built, and an
/// unsampled trace's context is kept (for [`inject_current`]) in place of a span.
#[derive(Debug)]
pub struct Root {
    span: tracing::Span,
    /// The context of an unsampled trace, attached while the work runs.
    unsampled: Option<Context>,
}

impl Root {
    /// Decides whether the work `service` starts now is sampled, continuing `remote` (the
    /// caller's context from [`extract`]) when it holds a trace, and builds its span with `make`
    /// only when it is. The decision is the configured sampler's, so a parent-based one follows
    /// the caller's sampled flag, and a ratio one draws on the trace id.
    pub fn start(service: &str, remote: Option<Context>, make: impl FnOnce() -> tracing::Span) -> Self {
        let Some(tracers) = TRACERS.get() else { return Self { span: tracing::Span::none(), unsampled: None } };
        let parent = remote.unwrap_or_default();
        let parent_ids = parent.span().span_context().clone();
        let trace_id =
            if parent_ids.is_valid() { parent_ids.trace_id() } else { RandomIdGenerator::default().new_trace_id() };
        // No name, kind or attributes: the samplers OTEL_TRACES_SAMPLER configures read none of them.
        let decision =
            tracers.sampler.should_sample(Some(&parent), trace_id, "", &SpanKind::Internal, &[], &[]).decision;
        if decision == SamplingDecision::Drop {
            let ids = SpanContext::new(
                trace_id,
                RandomIdGenerator::default().new_span_id(),
                TraceFlags::default(),
                false,
                parent_ids.trace_state().clone(),
            );
            // The caller's baggage stays in the context and travels on with the trace.
            return Self { span: tracing::Span::none(), unsampled: Some(parent.with_remote_span_context(ids)) };
        }
        let span = make();
        let context = parent.with_value(ServiceName(Arc::from(service)));
        let context = if parent_ids.is_valid() { context } else { context.with_value(HeadSampled) };
        // Only fails when the span is disabled (filtered out), when there is nothing to parent.
        let _ = span.set_parent(context);
        Self { span, unsampled: None }
    }

    /// The root span; disabled when the work is not recorded.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Runs `work`, a synchronous step of this unit of work, inside its span, or in its
    /// unsampled trace's context.
    pub fn in_scope<R>(&self, work: impl FnOnce() -> R) -> R {
        match &self.unsampled {
            None => self.span.in_scope(work),
            Some(context) => {
                let _attached = context.clone().attach();
                work()
            }
        }
    }

    /// Runs `work` as this unit of work: inside its span, or in its unsampled trace's context.
    pub fn instrument<F: Future>(self, work: F) -> Either<Instrumented<F>, WithContext<F>> {
        match self.unsampled {
            None => Either::Left(work.instrument(self.span)),
            Some(context) => Either::Right(work.with_context(context)),
        }
    }
}

/// `work` for a task spawned now: inside the current span, and, in an unsampled trace, its
/// context, which a spawned task does not inherit otherwise.
pub fn in_current_trace<F: Future>(work: F) -> Either<Instrumented<F>, WithContext<Instrumented<F>>> {
    let work = work.instrument(tracing::Span::current());
    if sampled_out() { Either::Right(work.with_context(Context::current())) } else { Either::Left(work) }
}

/// True when a child span made now would be exported: tracing is on and the span entered is
/// recorded. Internal spans are made only then: under an unsampled request (no span entered)
/// they would start traces of their own.
pub fn recording() -> bool {
    tracing_enabled() && !tracing::Span::current().is_disabled()
}

/// True when the work under way belongs to a trace sampled out at its head: it makes no span,
/// and passes its trace context on with [`inject_current`].
pub fn sampled_out() -> bool {
    tracing_enabled() && {
        // An unsampled trace has no span: its context is the one attached ([`Root::instrument`]).
        let current = Context::current();
        let span = current.span();
        let ids = span.span_context();
        ids.is_valid() && !ids.is_sampled()
    }
}

/// The context of the work under way: the entered span's, or, with no span recorded, the
/// attached one (an unsampled trace's).
pub(crate) fn current_context() -> Context {
    let span = tracing::Span::current();
    if span.is_disabled() { Context::current() } else { span.context() }
}

static TRACERS: OnceLock<Arc<ServiceTracers>> = OnceLock::new();

/// Builds the providers and the propagator (W3C trace context and baggage); the first call wins.
pub(crate) fn install(settings: TraceSettings) -> Result<ServiceTracer, TelemetryError> {
    let tracers = Arc::new(ServiceTracers::new(settings)?);
    TRACERS.set(tracers.clone()).map_err(|_| TelemetryError::AlreadyInstalled)?;
    opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ]));
    Ok(ServiceTracer(tracers))
}

/// True when spans are exported.
pub fn tracing_enabled() -> bool {
    TRACERS.get().is_some()
}

/// Exports every span ended so far.
pub(crate) fn flush_traces() {
    if let Some(tracers) = TRACERS.get() {
        for provider in tracers.providers() {
            if let Err(error) = provider.force_flush() {
                eprintln!("cannot flush spans: {error}");
            }
        }
    }
}

/// The caller's context (W3C `traceparent`, `tracestate`, `baggage`) from request headers.
pub fn extract(headers: &http::HeaderMap) -> Option<Context> {
    extract_from(&HeaderExtractor(headers))
}

/// The sender's context from the W3C trace context fields of a message (a bus record's headers).
pub fn extract_fields(fields: &HashMap<String, String>) -> Option<Context> {
    extract_from(fields)
}

fn extract_from(carrier: &dyn Extractor) -> Option<Context> {
    if !tracing_enabled() {
        return None;
    }
    Some(opentelemetry::global::get_text_map_propagator(|p| p.extract(carrier)))
}

/// Writes `span`'s context (W3C `traceparent`, `tracestate`, `baggage`) into outbound headers.
pub fn inject(span: &tracing::Span, headers: &mut http::HeaderMap) {
    if !tracing_enabled() {
        return;
    }
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&context, &mut HeaderInjector(headers)));
}

/// Writes the current trace context into outbound headers: that of the span entered, or of the
/// unsampled trace the work belongs to (its sampled flag off), so the callee decides alike.
pub fn inject_current(headers: &mut http::HeaderMap) {
    inject_current_into(&mut HeaderInjector(headers));
}

/// The current trace context as W3C trace context fields, for a message (a bus record's headers);
/// empty when tracing is off or no trace is under way.
pub fn current_fields() -> HashMap<String, String> {
    let mut fields = HashMap::new();
    inject_current_into(&mut fields);
    fields
}

fn inject_current_into(carrier: &mut dyn opentelemetry::propagation::Injector) {
    if !tracing_enabled() {
        return;
    }
    let context = current_context();
    if context.span().span_context().is_valid() {
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&context, carrier));
    }
}

/// The trace and span ids of `span`, in W3C hex, when it is exported (sampled).
pub fn span_ids(span: &tracing::Span) -> Option<(String, String)> {
    if !tracing_enabled() {
        return None;
    }
    let context = span.context();
    let otel = context.span();
    let ids = otel.span_context();
    (ids.is_valid() && ids.is_sampled()).then(|| (ids.trace_id().to_string(), ids.span_id().to_string()))
}

/// The trace id of `span`, in W3C hex, when it is exported.
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    span_ids(span).map(|(trace, _)| trace)
}

/// Adds an event (a retry, a circuit opening, a partial answer) to `span`, whatever the log level.
pub fn span_event(span: &tracing::Span, name: &'static str, attributes: &[(&'static str, String)]) {
    if !tracing_enabled() {
        return;
    }
    span.add_event(name, attributes.iter().map(|(key, value)| KeyValue::new(*key, value.clone())).collect());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_travels_in_the_context_to_children() {
        let root = Context::new().with_value(ServiceName(Arc::from("search")));
        let child = root.with_value(42_u8);
        assert_eq!(child.get::<ServiceName>().map(|s| &*s.0), Some("search"));
    }
}
