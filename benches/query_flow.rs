//! Orchestrated query latency: the whole suite in this process, queries sent to the orchestrator
//! at concurrency 1 and 16, each answer split into planning, search, fusion and orchestration
//! overhead (end-to-end minus the agents' own processing time on the critical path). The
//! reference, interleaved in the same run, is the same query sent straight to the search agent.
//!
//! `cargo bench --bench query_flow -- [--queries 1000]`

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2a_mesh::{SuiteConfig, start};
use mesh_client::{HttpClient, RegistryClient, reply_data, send_task};
use mesh_protocol::agents::{QueryAnswer, SearchRequest};
use mesh_protocol::seed::{ResponseStatus, TaskRequest};
use support::{Samples, arg};

const QUERIES: &[&str] = &[
    "show me robots playing soccer",
    "how do volcanoes erupt",
    "jazz piano",
    "Apollo 11 moon landing 1969",
    "cooking pasta",
    "marathon in Tokyo",
    "neural networks tutorial",
    "thunderstorm time-lapse",
    "sunset over the ocean",
    "Dr. Jane Smith from MIT lecture on robotics",
    "photos of humanoid robots",
    "podcast about space launches",
    "what is a black hole?",
    "wildlife in Nairobi national park",
    "street food in São Paulo",
];
const CALL_TIMEOUT_MS: u64 = 30_000;

/// Per-phase samples of one run, in microseconds.
#[derive(Debug, Default)]
struct Phases {
    end_to_end: Samples,
    planning: Samples,
    search: Samples,
    fusion: Samples,
    overhead: Samples,
}

async fn orchestrated(http: &HttpClient, url: &str, query: &str) -> (f64, QueryAnswer) {
    let task = TaskRequest::from_text(None, query, None);
    let sent = Instant::now();
    let response = send_task(http, url, &task, Duration::from_millis(CALL_TIMEOUT_MS)).await.expect("answer");
    let micros = sent.elapsed().as_secs_f64() * 1e6;
    assert_eq!(response.status, ResponseStatus::Success, "{query}: {:?}", response.warnings);
    (micros, reply_data(url, &response).expect("query answer"))
}

async fn direct(http: &HttpClient, url: &str, query: &str) -> f64 {
    let request = serde_json::to_value(SearchRequest { top_k: Some(10), ..SearchRequest::default() }).expect("json");
    let task = TaskRequest::from_text(None, query, Some(request));
    let sent = Instant::now();
    send_task(http, url, &task, Duration::from_millis(CALL_TIMEOUT_MS)).await.expect("search answer");
    sent.elapsed().as_secs_f64() * 1e6
}

/// Sends `total` queries with `concurrency` workers; returns the phases and the direct-search
/// reference latencies, sent by the same workers right after each orchestrated query.
async fn run(
    http: &HttpClient,
    orchestrator: &str,
    search: &str,
    total: usize,
    concurrency: usize,
) -> (Phases, Samples) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (http, orchestrator, search, next) =
                (http.clone(), orchestrator.to_owned(), search.to_owned(), next.clone());
            tokio::spawn(async move {
                let mut phases = Phases::default();
                let mut reference = Samples::default();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let query = QUERIES[i % QUERIES.len()];
                    let (micros, answer) = orchestrated(&http, &orchestrator, query).await;
                    let meta = &answer.metadata;
                    let own = |capability: &str| {
                        meta.agents
                            .iter()
                            .find(|c| c.capability == capability)
                            .and_then(|c| c.agent_time_ms)
                            .unwrap_or(0.0)
                    };
                    let critical_path_ms = own("entity_extraction").max(own("profile_selection")) + own("search");
                    phases.end_to_end.push(micros);
                    phases.planning.push(meta.planning_time_ms * 1e3);
                    phases.search.push(meta.search_time_ms * 1e3);
                    phases.fusion.push(meta.fusion_time_ms * 1e3);
                    phases.overhead.push(micros - critical_path_ms * 1e3);
                    reference.push(direct(&http, &search, query).await);
                }
                (phases, reference)
            })
        })
        .collect();
    let mut all = Phases::default();
    let mut reference = Samples::default();
    for worker in workers {
        let (phases, direct) = worker.await.expect("worker");
        for (into, from) in [
            (&mut all.end_to_end, phases.end_to_end),
            (&mut all.planning, phases.planning),
            (&mut all.search, phases.search),
            (&mut all.fusion, phases.fusion),
            (&mut all.overhead, phases.overhead),
            (&mut reference, direct),
        ] {
            into.extend(from);
        }
    }
    (all, reference)
}

#[tokio::main]
async fn main() {
    let total = arg("--queries", 1000) as usize;
    let data = tempfile::tempdir().expect("temp dir");
    let suite = start(SuiteConfig::ephemeral(data.path())).await.expect("suite starts");
    let http = HttpClient::with_reqwest().expect("client");
    let registry = RegistryClient::new(&suite.urls.registry, http.clone()).expect("registry");
    while registry.stats().await.map(|s| s.healthy_agents).unwrap_or(0) < 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (orchestrator, search) = (suite.urls.orchestrator.clone(), suite.urls.search.clone());
    run(&http, &orchestrator, &search, 100, 4).await; // warm-up

    println!("orchestrated query latency, {total} queries per run, µs");
    println!("{:<12} {:<26} {:>9} {:>9}", "concurrency", "phase", "p50", "p99");
    for concurrency in [1, 16] {
        let (phases, reference) = run(&http, &orchestrator, &search, total, concurrency).await;
        for (name, samples) in [
            ("end-to-end", &phases.end_to_end),
            ("planning (parallel)", &phases.planning),
            ("search (call)", &phases.search),
            ("fusion (in search)", &phases.fusion),
            ("orchestration overhead", &phases.overhead),
            ("reference: direct search", &reference),
        ] {
            println!("{concurrency:<12} {name:<26} {:>9.0} {:>9.0}", samples.p50(), samples.p99());
        }
        println!(
            "{concurrency:<12} end-to-end / direct search p50 ratio: {:.2}",
            phases.end_to_end.p50() / reference.p50()
        );
    }
    suite.stop().await.expect("suite stops");
}
