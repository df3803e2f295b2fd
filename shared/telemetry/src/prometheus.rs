//! Prometheus metrics through the `metrics` facade, one registry per service.
//!
//! Several services share a process under `up`, and with it the global `metrics` recorder; yet
//! each service's `/metrics` must show its own series only, or a Prometheus scraping every port
//! would count each request once per service. The global recorder ([`ServiceRecorders`]) hands
//! every metric to the recorder of the service its `service` label names.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

use crate::TelemetryError;

/// The label naming the service a metric belongs to; every mesh metric carries it.
pub const SERVICE_LABEL: &str = "service";

/// Histogram buckets in seconds, from 0.5 ms (an in-process hop) to 30 s (the default call
/// timeout), so `histogram_quantile` finds a p99 anywhere in that range.
const LATENCY_BUCKETS_SECONDS: [f64; 16] =
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

/// A shared handle, for the global recorder slot (which takes ownership).
#[derive(Debug, Clone)]
struct Shared(Arc<ServiceRecorders>);

impl Recorder for Shared {
    // Descriptions are not kept: the metrics are documented in the README and the dashboard.
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.0.for_key(key).register_counter(key, metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.0.for_key(key).register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.0.for_key(key).register_histogram(key, metadata)
    }
}

static RECORDERS: OnceLock<Arc<ServiceRecorders>> = OnceLock::new();

/// Installs the global recorder once per process (every later call is a no-op), with a thread
/// folding histogram samples into buckets in the background.
pub fn install_metrics() -> Result<(), TelemetryError> {
    let mut fresh = false;
    let recorders = RECORDERS.get_or_init(|| {
        fresh = true;
        Arc::new(ServiceRecorders::default())
    });
    if !fresh {
        return Ok(());
    }
    metrics::set_global_recorder(Shared(recorders.clone())).map_err(|_| TelemetryError::AlreadyInstalled)?;
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
