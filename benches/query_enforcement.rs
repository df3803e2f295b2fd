//! Orchestrated query latency with the link policy enforced against open (issue #14: goal within
//! 2%), in the same run: two whole suites in this process, one in graph mode `open` and one
//! `enforced` with the bundled links (`deploy/links.toml`), the same queries sent to both
//! orchestrators in alternation (A, B, A, B, ...) so machine drift hits both alike. Enforcement
//! checks every call twice (the orchestrator's caller before sending, the callee's admission),
//! and every call is reported to the registry in both suites.
//!
//! `cargo bench --bench query_enforcement -- [--queries 2000] [--concurrency 1]`

mod support;

use std::time::{Duration, Instant};

use a2a_mesh::{RunningSuite, SuiteConfig, start};
use mesh_agent_kit::HealthReport;
use mesh_client::{HttpClient, RegistryClient, send_task};
use mesh_protocol::graph::GraphMode;
use mesh_protocol::seed::{ResponseStatus, TaskRequest};
use support::{Samples, arg};

const QUERIES: &[&str] = &[
    "show me robots playing soccer",
    "how do volcanoes erupt",
    "jazz piano",
    "Apollo 11 moon landing 1969",
    "Dr. Jane Smith from MIT lecture on robotics",
    "street food in São Paulo",
];
const CALL_TIMEOUT_MS: u64 = 30_000;
const WARM_UP_QUERIES: usize = 100;

async fn suite(mode: GraphMode, data: &std::path::Path) -> RunningSuite {
    let mut config = SuiteConfig::ephemeral(data);
    config.registry.graph_mode = mode;
    let suite = start(config).await.expect("suite starts");
    let http = HttpClient::with_reqwest().expect("client");
    let registry = RegistryClient::new(&suite.urls.registry, http.clone()).expect("registry");
    while registry.stats().await.map(|s| s.healthy_agents).unwrap_or(0) < 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every agent holds the registry's policy before anything is measured.
    for url in
        [&suite.urls.orchestrator, &suite.urls.search, &suite.urls.entity_extraction, &suite.urls.profile_selection]
    {
        loop {
            let health: HealthReport =
                http.get_json(&format!("{url}/health"), Duration::from_secs(5)).await.expect("health");
            let links = &health.components["graph"]["links"];
            if links["loaded"] == true && links["mode"] == serde_json::to_value(mode).expect("mode") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    suite
}

async fn query(http: &HttpClient, url: &str, query: &str) -> f64 {
    let task = TaskRequest::from_text(None, query, None);
    let sent = Instant::now();
    let response = send_task(http, url, &task, Duration::from_millis(CALL_TIMEOUT_MS)).await.expect("answer");
    let micros = sent.elapsed().as_secs_f64() * 1e6;
    assert_eq!(response.status, ResponseStatus::Success, "{query}: {:?}", response.warnings);
    micros
}

/// `total` queries to each orchestrator, alternating, from `concurrency` workers.
async fn run(http: &HttpClient, open: &str, enforced: &str, total: usize, concurrency: usize) -> (Samples, Samples) {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (http, open, enforced, next) = (http.clone(), open.to_owned(), enforced.to_owned(), next.clone());
            tokio::spawn(async move {
                let (mut a, mut b) = (Samples::default(), Samples::default());
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let text = QUERIES[i % QUERIES.len()];
                    // Which goes first alternates too, so neither always meets warm caches.
                    if i % 2 == 0 {
                        a.push(query(&http, &open, text).await);
                        b.push(query(&http, &enforced, text).await);
                    } else {
                        b.push(query(&http, &enforced, text).await);
                        a.push(query(&http, &open, text).await);
                    }
                }
                (a, b)
            })
        })
        .collect();
    let (mut open_samples, mut enforced_samples) = (Samples::default(), Samples::default());
    for worker in workers {
        let (a, b) = worker.await.expect("worker");
        open_samples.extend(a);
        enforced_samples.extend(b);
    }
    (open_samples, enforced_samples)
}

#[tokio::main]
async fn main() {
    let total = arg("--queries", 2000) as usize;
    let concurrency = arg("--concurrency", 1) as usize;
    let (open_dir, enforced_dir) = (tempfile::tempdir().expect("temp dir"), tempfile::tempdir().expect("temp dir"));
    let open = suite(GraphMode::Open, open_dir.path()).await;
    let enforced = suite(GraphMode::Enforced, enforced_dir.path()).await;
    let http = HttpClient::with_reqwest().expect("client");
    let (a, b) = (open.urls.orchestrator.clone(), enforced.urls.orchestrator.clone());
    run(&http, &a, &b, WARM_UP_QUERIES, concurrency).await;
    let (open_samples, enforced_samples) = run(&http, &a, &b, total, concurrency).await;
    println!("orchestrated query latency, {total} queries per mode, concurrency {concurrency}, µs");
    println!("{:<22} {:>9} {:>9}", "graph mode", "p50", "p99");
    for (name, samples) in [("open (reference)", &open_samples), ("enforced", &enforced_samples)] {
        println!("{name:<22} {:>9.0} {:>9.0}", samples.p50(), samples.p99());
    }
    let ratio = enforced_samples.p50() / open_samples.p50();
    println!("enforced / open p50: {ratio:.4} ({:+.2}%, goal within 2%)", (ratio - 1.0) * 100.0);
    open.stop().await.expect("suite stops");
    enforced.stop().await.expect("suite stops");
}
