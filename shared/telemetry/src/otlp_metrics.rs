//! The metrics of `/metrics`, also pushed over OTLP/HTTP (protobuf) when configured: every
//! series the `metrics` facade records goes to the service's Prometheus recorder and to an
//! OpenTelemetry instrument of the same name, on a meter provider per service (whose resource
//! names the service, as for traces).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use metrics::{CounterFn, GaugeFn, HistogramFn, Key};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;

use crate::TelemetryError;
use crate::prometheus::{LATENCY_BUCKETS_SECONDS, SERVICE_LABEL};

/// Instrumentation scope of every mesh metric.
const METER_NAME: &str = "a2a-mesh";
/// Histograms whose name ends so are durations in seconds, bucketed as in Prometheus.
const SECONDS_SUFFIX: &str = "_seconds";

/// Where metrics are pushed; [`MetricsSettings::from_env`] reads the standard variables.
#[derive(Debug, Clone, Default)]
pub struct MetricsSettings {
    /// The full OTLP/HTTP metrics URL (`http://host:4318/v1/metrics`); `None` lets the exporter
    /// read `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/metrics`.
    pub metrics_endpoint: Option<String>,
}

impl MetricsSettings {
    /// On when an OTLP endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`), unless `OTEL_SDK_DISABLED=true` or
    /// `OTEL_METRICS_EXPORTER=none`. The push interval is the SDK's (`OTEL_METRIC_EXPORT_INTERVAL`).
    pub fn from_env() -> Option<Self> {
        let set = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || set("OTEL_METRICS_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        let endpoint =
            set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() || set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some();
        (endpoint && !disabled).then(Self::default)
    }
}

/// Meter providers by service, created at a service's first metric.
#[derive(Debug)]
pub(crate) struct OtlpMetrics {
    settings: MetricsSettings,
    services: RwLock<HashMap<String, (SdkMeterProvider, Meter)>>,
}

impl OtlpMetrics {
    /// Checks the settings by building one exporter now, so a bad configuration shows at start.
    pub(crate) fn new(settings: MetricsSettings) -> Result<Self, TelemetryError> {
        exporter(&settings)?;
        Ok(Self { settings, services: RwLock::new(HashMap::new()) })
    }

    fn meter(&self, service: &str) -> Option<Meter> {
        if let Some((_, meter)) = self.services.read().unwrap_or_else(|e| e.into_inner()).get(service) {
            return Some(meter.clone());
        }
        let mut services = self.services.write().unwrap_or_else(|e| e.into_inner());
        if let Some((_, meter)) = services.get(service) {
            return Some(meter.clone());
        }
        let exporter = match exporter(&self.settings) {
            Ok(exporter) => exporter,
            Err(error) => {
                eprintln!("the metrics of {service} are not pushed: {error}");
                return None;
            }
        };
        let resource = Resource::builder().with_service_name(service.to_owned()).build();
        let provider = SdkMeterProvider::builder().with_periodic_exporter(exporter).with_resource(resource).build();
        let meter = provider.meter(METER_NAME);
        services.insert(service.to_owned(), (provider, meter.clone()));
        Some(meter)
    }

    /// Pushes every metric now (tests, and before a process exits).
    pub(crate) fn flush(&self) {
        for (provider, _) in self.services.read().unwrap_or_else(|e| e.into_inner()).values() {
            if let Err(error) = provider.force_flush() {
                eprintln!("cannot push metrics: {error}");
            }
        }
    }

    /// The instrument of `key` and its attributes (its labels but the service, which is the
    /// resource's), or `None` when the service's metrics cannot be pushed.
    fn instrument(&self, key: &Key) -> Option<(Meter, Vec<KeyValue>)> {
        let mut service = "";
        let mut attributes = Vec::new();
        for label in key.labels() {
            if label.key() == SERVICE_LABEL {
                service = label.value();
            } else {
                attributes.push(KeyValue::new(label.key().to_owned(), label.value().to_owned()));
            }
        }
        Some((self.meter(service)?, attributes))
    }

    pub(crate) fn counter(&self, key: &Key) -> Option<Arc<dyn CounterFn + Send + Sync>> {
        let (meter, attributes) = self.instrument(key)?;
        let counter = meter.u64_counter(key.name().to_owned()).build();
        Some(Arc::new(OtlpCounter { counter, attributes, total: AtomicU64::new(0) }))
    }

    pub(crate) fn gauge(&self, key: &Key) -> Option<Arc<dyn GaugeFn + Send + Sync>> {
        let (meter, attributes) = self.instrument(key)?;
        let gauge = meter.f64_gauge(key.name().to_owned()).build();
        Some(Arc::new(OtlpGauge { gauge, attributes, value_bits: AtomicU64::new(0f64.to_bits()) }))
    }

    pub(crate) fn histogram(&self, key: &Key) -> Option<Arc<dyn HistogramFn + Send + Sync>> {
        let (meter, attributes) = self.instrument(key)?;
        let builder = meter.f64_histogram(key.name().to_owned());
        let builder = if key.name().ends_with(SECONDS_SUFFIX) {
            builder.with_boundaries(LATENCY_BUCKETS_SECONDS.to_vec())
        } else {
            builder
        };
        Some(Arc::new(OtlpHistogram { histogram: builder.build(), attributes }))
    }
}

fn exporter(settings: &MetricsSettings) -> Result<opentelemetry_otlp::MetricExporter, TelemetryError> {
    let builder = opentelemetry_otlp::MetricExporter::builder().with_http().with_protocol(Protocol::HttpBinary);
    let builder = match &settings.metrics_endpoint {
        Some(endpoint) => builder.with_endpoint(endpoint.clone()),
        None => builder,
    };
    builder.build().map_err(|e| TelemetryError::Exporter(e.to_string()))
}

struct OtlpCounter {
    counter: opentelemetry::metrics::Counter<u64>,
    attributes: Vec<KeyValue>,
    /// The total so far, so an absolute value turns into the increment OpenTelemetry takes.
    total: AtomicU64,
}

impl CounterFn for OtlpCounter {
    fn increment(&self, value: u64) {
        self.total.fetch_add(value, Ordering::Relaxed);
        self.counter.add(value, &self.attributes);
    }

    fn absolute(&self, value: u64) {
        let before = self.total.fetch_max(value, Ordering::Relaxed);
        if value > before {
            self.counter.add(value - before, &self.attributes);
        }
    }
}

struct OtlpGauge {
    gauge: opentelemetry::metrics::Gauge<f64>,
    attributes: Vec<KeyValue>,
    /// The current value (`f64` bits): increments and decrements apply to it.
    value_bits: AtomicU64,
}

impl OtlpGauge {
    fn update(&self, change: impl Fn(f64) -> f64) {
        let mut current = self.value_bits.load(Ordering::Relaxed);
        loop {
            let next = change(f64::from_bits(current));
            match self.value_bits.compare_exchange_weak(current, next.to_bits(), Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return self.gauge.record(next, &self.attributes),
                Err(actual) => current = actual,
            }
        }
    }
}

impl GaugeFn for OtlpGauge {
    fn increment(&self, value: f64) {
        self.update(|current| current + value);
    }

    fn decrement(&self, value: f64) {
        self.update(|current| current - value);
    }

    fn set(&self, value: f64) {
        self.update(|_| value);
    }
}

struct OtlpHistogram {
    histogram: opentelemetry::metrics::Histogram<f64>,
    attributes: Vec<KeyValue>,
}

impl HistogramFn for OtlpHistogram {
    fn record(&self, value: f64) {
        self.histogram.record(value, &self.attributes);
    }
}
