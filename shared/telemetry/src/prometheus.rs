//! Prometheus metrics through the `metrics` facade, one registry per service.
//!
//! Several services share a process under `up`, and with it the global `metrics` recorder; yet
//! each service's `/metrics` must show its own series only, or a Prometheus scraping every port
//! would count each request once per service. The global recorder ([`ServiceRecorders`]) hands
//! every metric to the recorder of the service its `service` label names, and, when OTLP metrics
//! are configured, to an OpenTelemetry instrument too ([`crate::otlp_metrics`]).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

use crate::TelemetryError;
use crate::otlp_metrics::{MetricsSettings, OtlpMetrics};

/// The label naming the service a metric belongs to; every mesh metric carries it.
pub const SERVICE_LABEL: &str = "service";

/// Histogram buckets in seconds, from 0.5 ms (an in-process hop) to 30 s (the default call
/// timeout), so `histogram_quantile` finds a p99 anywhere in that range.
pub(crate) const LATENCY_BUCKETS_SECONDS: [f64; 16] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Between folds of the recorded histogram samples into their buckets, so samples do not pile up
/// in memory where nobody scrapes.
const UPKEEP_INTERVAL_MS: u64 = 5_000;

/// A recorder per service, created at the service's first metric.
#[derive(Debug, Default)]
struct ServiceRecorders {
    services: RwLock<HashMap<String, Arc<PrometheusRecorder>>>,
}

impl ServiceRecorders {
    fn recorder(&self, service: &str) -> Arc<PrometheusRecorder> {
        if let Some(recorder) = self.services.read().unwrap_or_else(|e| e.into_inner()).get(service) {
            return recorder.clone();
        }
        let mut services = self.services.write().unwrap_or_else(|e| e.into_inner());
        services.entry(service.to_owned()).or_insert_with(|| Arc::new(build_recorder())).clone()
    }

    fn for_key(&self, key: &Key) -> Arc<PrometheusRecorder> {
        let service = key.labels().find(|label| label.key() == SERVICE_LABEL).map(|label| label.value()).unwrap_or("");
        self.recorder(service)
    }

    fn upkeep(&self) {
        for recorder in self.services.read().unwrap_or_else(|e| e.into_inner()).values() {
            recorder.handle().run_upkeep();
        }
    }
}

fn build_recorder() -> PrometheusRecorder {
    match PrometheusBuilder::new().set_buckets(&LATENCY_BUCKETS_SECONDS) {
        Ok(builder) => builder.build_recorder(),
        // Only an empty bucket list is refused, and the list is a non-empty constant.
        Err(_) => PrometheusBuilder::new().build_recorder(),
    }
}

/// A shared handle, for the global recorder slot (which takes ownership), with the OTLP
/// instruments every series also goes to when configured.
#[derive(Debug, Clone)]
struct Shared(Arc<ServiceRecorders>, Option<Arc<OtlpMetrics>>);

/// One series recorded twice: in Prometheus, and in its OTLP instrument.
struct Fanned<T, O: ?Sized>(T, Arc<O>);

impl CounterFn for Fanned<Counter, dyn CounterFn + Send + Sync> {
    fn increment(&self, value: u64) {
        self.0.increment(value);
        self.1.increment(value);
    }

    fn absolute(&self, value: u64) {
        self.0.absolute(value);
        self.1.absolute(value);
    }
}

impl GaugeFn for Fanned<Gauge, dyn GaugeFn + Send + Sync> {
    fn increment(&self, value: f64) {
        self.0.increment(value);
        self.1.increment(value);
    }

    fn decrement(&self, value: f64) {
        self.0.decrement(value);
        self.1.decrement(value);
    }

    fn set(&self, value: f64) {
        self.0.set(value);
        self.1.set(value);
    }
}

impl HistogramFn for Fanned<Histogram, dyn HistogramFn + Send + Sync> {
    fn record(&self, value: f64) {
        self.0.record(value);
        self.1.record(value);
    }
}

impl Recorder for Shared {
    // Descriptions are not kept: the metrics are documented in the README and the dashboard.
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        let counter = self.0.for_key(key).register_counter(key, metadata);
        match self.1.as_ref().and_then(|otlp| otlp.counter(key)) {
            Some(otlp) => Counter::from_arc(Arc::new(Fanned(counter, otlp))),
            None => counter,
        }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        let gauge = self.0.for_key(key).register_gauge(key, metadata);
        match self.1.as_ref().and_then(|otlp| otlp.gauge(key)) {
            Some(otlp) => Gauge::from_arc(Arc::new(Fanned(gauge, otlp))),
            None => gauge,
        }
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        let histogram = self.0.for_key(key).register_histogram(key, metadata);
        match self.1.as_ref().and_then(|otlp| otlp.histogram(key)) {
            Some(otlp) => Histogram::from_arc(Arc::new(Fanned(histogram, otlp))),
            None => histogram,
        }
    }
}

static RECORDERS: OnceLock<Arc<ServiceRecorders>> = OnceLock::new();
static OTLP: OnceLock<Arc<OtlpMetrics>> = OnceLock::new();

/// Installs the global recorder once per process (every later call is a no-op), with a thread
/// folding histogram samples into buckets in the background; Prometheus only.
pub fn install_metrics() -> Result<(), TelemetryError> {
    install_metrics_with(None)
}

/// [`install_metrics`], every series also pushed over OTLP per `otlp` (`None`: not pushed).
pub fn install_metrics_with(otlp: Option<MetricsSettings>) -> Result<(), TelemetryError> {
    let mut fresh = false;
    let recorders = RECORDERS.get_or_init(|| {
        fresh = true;
        Arc::new(ServiceRecorders::default())
    });
    if !fresh {
        return Ok(());
    }
    let otlp = match otlp.map(OtlpMetrics::new).transpose() {
        Ok(otlp) => otlp.map(|otlp| OTLP.get_or_init(|| Arc::new(otlp)).clone()),
        Err(error) => {
            // Prometheus still serves the metrics.
            eprintln!("OTLP metrics are off: {error}");
            None
        }
    };
    metrics::set_global_recorder(Shared(recorders.clone(), otlp)).map_err(|_| TelemetryError::AlreadyInstalled)?;
    let upkept = recorders.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(UPKEEP_INTERVAL_MS));
                upkept.upkeep();
            }
        })
        .map_err(|e| TelemetryError::Exporter(format!("cannot start the metrics upkeep thread: {e}")))?;
    Ok(())
}

/// Pushes every OTLP metric now, when they are pushed.
pub(crate) fn flush_metrics() {
    if let Some(otlp) = OTLP.get() {
        otlp.flush();
    }
}

/// The Prometheus text of `service`'s metrics; empty before [`install_metrics`].
pub fn render(service: &str) -> String {
    match RECORDERS.get() {
        Some(recorders) => recorders.recorder(service).handle().render(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_service_renders_its_own_series_only() {
        install_metrics().unwrap();
        metrics::counter!("mesh_test_total", SERVICE_LABEL => "alpha").increment(2);
        metrics::counter!("mesh_test_total", SERVICE_LABEL => "beta").increment(5);
        metrics::histogram!("mesh_test_seconds", SERVICE_LABEL => "alpha").record(0.003);
        let alpha = render("alpha");
        assert!(alpha.contains("mesh_test_total{service=\"alpha\"} 2"), "{alpha}");
        assert!(!alpha.contains("beta"), "{alpha}");
        assert!(alpha.contains("mesh_test_seconds_bucket{service=\"alpha\",le=\"0.005\"} 1"), "{alpha}");
        assert!(render("beta").contains("mesh_test_total{service=\"beta\"} 5"));
    }
}
