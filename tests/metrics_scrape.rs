//! End to end: a real Prometheus (Debian `prometheus`) scrapes every service of the running
//! suite, and a PromQL query returns, per service, the requests this test made.
//!
//! Prometheus is the binary `MESH_PROMETHEUS` names (default `prometheus` on the PATH); where
//! it is missing the test says why it skips, and under `CI=true` it fails.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mesh_client::{HttpClient, reply_data, send_task};
use mesh_protocol::agents::QueryAnswer;
use mesh_protocol::seed::TaskRequest;
use serde_json::Value;

mod common;

/// Queries this test sends to the orchestrator.
const QUERIES: usize = 3;
/// How often Prometheus scrapes in the test.
const SCRAPE_INTERVAL_MS: u64 = 500;
/// Prometheus takes a few seconds to start and to scrape everything twice.
const PROMETHEUS_WAIT_MS: u64 = 30_000;

struct Prometheus {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn prometheus_binary() -> Option<String> {
    let binary = std::env::var("MESH_PROMETHEUS").unwrap_or_else(|_| "prometheus".to_owned());
    let runs = Command::new(&binary).arg("--version").output().is_ok_and(|o| o.status.success());
    let found = if runs {
        Ok(binary)
    } else {
        Err(format!("{binary} does not run: install Debian's prometheus (.ci/run does) or set MESH_PROMETHEUS"))
    };
    mesh_test_support::require("Prometheus", found)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start_prometheus(binary: &str, targets: &[String]) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let targets: Vec<String> = targets.iter().map(|url| format!("'{}'", url.trim_start_matches("http://"))).collect();
    let config = format!(
        "global:\n  scrape_interval: {SCRAPE_INTERVAL_MS}ms\nscrape_configs:\n  - job_name: a2a-mesh\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    let config_path = dir.path().join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    let port = free_port();
    let child = Command::new(binary)
        .arg(format!("--config.file={}", config_path.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
    Prometheus { child, url: format!("http://127.0.0.1:{port}"), _dir: dir }
}

/// `sum by (service)` of an instant query, or `None` while Prometheus is not answering.
async fn query(prometheus: &Prometheus, promql: &str) -> Option<Vec<(String, f64)>> {
    let encoded: String = promql
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let response = reqwest::get(format!("{}/api/v1/query?query={encoded}", prometheus.url)).await.ok()?;
    let body: Value = response.json().await.ok()?;
    let results = body["data"]["result"].as_array()?;
    let mut by_service: Vec<(String, f64)> = results
        .iter()
        .map(|r| {
            let service = r["metric"]["service"].as_str().unwrap_or_default().to_owned();
            let value = r["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
            (service, value)
        })
        .collect();
    by_service.sort_by(|a, b| a.0.cmp(&b.0));
    Some(by_service)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_scrapes_the_request_counts_of_every_service() {
    let Some(binary) = prometheus_binary() else { return };
    mesh_telemetry::install_metrics().unwrap();
    let data = tempfile::tempdir().unwrap();
    let suite = common::start_healthy(a2a_mesh::SuiteConfig::ephemeral(data.path()), None).await;
    let urls = &suite.urls;
    let targets = [
        urls.registry.clone(),
        urls.orchestrator.clone(),
        urls.search.clone(),
        urls.entity_extraction.clone(),
        urls.profile_selection.clone(),
        urls.ui_agent.clone(),
    ];
    let prometheus = start_prometheus(&binary, &targets);

    let http = HttpClient::with_reqwest().unwrap();
    for query in ["show me robots playing soccer", "jazz piano", "cooking pasta"].iter().take(QUERIES) {
        let task = TaskRequest::from_text(None, *query, None);
        let response =
            send_task(&http, &urls.orchestrator, &task, Duration::from_millis(common::WAIT_DEADLINE_MS)).await.unwrap();
        let answer: QueryAnswer = reply_data(&urls.orchestrator, &response).unwrap();
        assert!(!answer.results.is_empty(), "{query}");
    }

    // Every agent served exactly one `/tasks/send` per query: the orchestrator the query, the
    // others the orchestrator's calls.
    let promql = r#"sum by (service) (http_server_request_duration_seconds_count{route="/tasks/send", status="200"})"#;
    let expected: Vec<(String, f64)> = ["entity_extraction", "orchestrator", "profile_selection", "search"]
        .iter()
        .map(|s| ((*s).to_owned(), QUERIES as f64))
        .collect();
    let deadline = Instant::now() + Duration::from_millis(PROMETHEUS_WAIT_MS);
    let mut last = None;
    while Instant::now() < deadline {
        last = query(&prometheus, promql).await;
        if last.as_ref() == Some(&expected) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(SCRAPE_INTERVAL_MS)).await;
    }
    assert_eq!(last, Some(expected), "Prometheus's request counts per service");

    // Every service answered its scrapes, the registry and the UI agent included.
    let up = query(&prometheus, r#"count(up{job="a2a-mesh"} == 1)"#).await.unwrap();
    assert_eq!(up.first().map(|(_, v)| *v), Some(targets.len() as f64), "every target is up");
    suite.stop().await.unwrap();
}
