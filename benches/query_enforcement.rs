//! Orchestrated query latency with the link policy enforced against open (issue #14: goal within
//! 2%), in the same run: three whole suites in this process, two in graph mode `open` and one
//! `enforced` with the bundled links (`deploy/links.toml`), the same queries sent to the three
//! orchestrators in rotation (A, B, C, then B, C, A, ...) so machine drift hits all alike. The
//! second open suite is the noise floor: two identical suites differ by this much. Enforcement
//! checks every call twice (the orchestrator's caller before sending, the callee's admission);
//! every call is reported to the registry in all three.
//!
//! `cargo bench --bench query_enforcement -- [--queries 2000] [--concurrency 1]`

mod support;

use std::time::{Duration, Instant};

use a2a_mesh::{RunningSuite, SuiteConfig, start};
use mesh_client::{HttpClient, RegistryClient, send_task};
use mesh_protocol::graph::GraphMode;
use mesh_protocol::seed::{ResponseStatus, TaskRequest};
use mesh_server::HealthReport;
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

/// `total` queries to each orchestrator of `urls`, in rotation, from `concurrency` workers.
async fn run(http: &HttpClient, urls: &[String], total: usize, concurrency: usize) -> Vec<Samples> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (http, urls, next) = (http.clone(), urls.to_vec(), next.clone());
            tokio::spawn(async move {
                let mut samples = vec![Samples::default(); urls.len()];
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let text = QUERIES[i % QUERIES.len()];
                    // Which goes first rotates too, so none always meets warm caches.
                    for turn in 0..urls.len() {
                        let suite = (i + turn) % urls.len();
                        samples[suite].push(query(&http, &urls[suite], text).await);
                    }
                }
                samples
            })
        })
        .collect();
    let mut all = vec![Samples::default(); urls.len()];
    for worker in workers {
        for (into, from) in all.iter_mut().zip(worker.await.expect("worker")) {
            into.extend(from);
        }
    }
    all
}

#[tokio::main]
async fn main() {
    let total = arg("--queries", 2000) as usize;
    let concurrency = arg("--concurrency", 1) as usize;
    // The enforced suite starts between the open ones, so neither start order nor position favours it.
    let modes = [
        ("open (reference)", GraphMode::Open),
        ("enforced", GraphMode::Enforced),
        ("open (noise floor)", GraphMode::Open),
    ];
    let mut suites = Vec::new();
    let mut dirs = Vec::new();
    for (_, mode) in modes {
        let dir = tempfile::tempdir().expect("temp dir");
        suites.push(suite(mode, dir.path()).await);
        dirs.push(dir);
    }
    let http = HttpClient::with_reqwest().expect("client");
    let urls: Vec<String> = suites.iter().map(|s| s.urls.orchestrator.clone()).collect();
    run(&http, &urls, WARM_UP_QUERIES, concurrency).await;
    let samples = run(&http, &urls, total, concurrency).await;
    println!("orchestrated query latency, {total} queries per suite, concurrency {concurrency}, µs");
    println!("{:<22} {:>9} {:>9} {:>16}", "graph mode", "p50", "p99", "p50 / reference");
    let reference = samples[0].p50();
    for ((name, _), suite) in modes.iter().zip(&samples) {
        let ratio = suite.p50() / reference;
        println!("{name:<22} {:>9.0} {:>9.0} {ratio:>10.4} ({:+.2}%)", suite.p50(), suite.p99(), (ratio - 1.0) * 100.0);
    }
    println!("goal: enforced within 2% of open");
    for suite in suites {
        suite.stop().await.expect("suite stops");
    }
}
