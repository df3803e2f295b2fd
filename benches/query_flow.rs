//! Orchestrated query latency: the whole suite in this process, queries sent to the orchestrator
//! at concurrency 1 and 16, each answer split into planning, search, fusion and orchestration
//! overhead (end-to-end minus the agents' own processing time on the critical path). The
//! reference, interleaved in the same run, is the same query sent straight to the search agent.
//!
//! `cargo bench --bench query_flow -- [--queries 1000]`
//!
//! With `--tracing` it measures the cost of tracing instead (issue #13): three suites, each in a
//! process of its own (tracing is per process), answer the same queries in turns, A, T, T10, A,
//! ...: A with tracing off, T exporting every span over OTLP/HTTP to a receiver in this
//! process, T10 sampling 10% of the traces; queries per second and p50/p99 latency at
//! concurrency 1 and 16, and T/A and T10/A. `--seconds N` (per cell, default 5) and
//! `--rounds R` (default 2).
//!
//! `cargo bench --bench query_flow -- --tracing [--seconds 5] [--rounds 2]`

#[path = "../shared/agent-kit/benches/support/otlp_sink.rs"]
mod otlp_sink;
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

/// Set in a re-executed child to make it serve a suite and print its orchestrator's URL.
const SERVE_ENV: &str = "QUERY_FLOW_BENCH_SERVE";
/// Concurrent queries of the tracing comparison.
const TRACING_CONCURRENCIES: [usize; 2] = [1, 16];
/// Queries before each measured window of the tracing comparison, not recorded.
const TRACING_WARM_UP_QUERIES: usize = 20;
/// Goals of issue #13: every span exported costs at most 10%, a 10% sampling ratio at most 2%.
const GOAL_TRACED_OVER_OFF: f64 = 0.90;
const GOAL_TRACED_10_OVER_OFF: f64 = 0.98;

/// The traced suites' settings, by label: `None` for tracing off, else the sampling ratio.
const TRACING_KINDS: [(&str, Option<&str>); 3] = [("A off", None), ("T all", Some("1.0")), ("T10 10%", Some("0.1"))];

/// A child process serving a whole suite, killed when dropped.
struct SuiteProcess {
    label: &'static str,
    orchestrator: String,
    process: std::process::Child,
}

impl Drop for SuiteProcess {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Starts this binary again as a suite, with `settings` in its environment; it prints its
/// orchestrator's URL once every agent is registered and healthy.
fn start_suite(label: &'static str, settings: &[(&str, &str)]) -> SuiteProcess {
    use std::io::BufRead;
    let mut process = std::process::Command::new(std::env::current_exe().expect("own path"))
        .env(SERVE_ENV, "1")
        .envs(settings.iter().copied())
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("suite process starts");
    let mut line = String::new();
    std::io::BufReader::new(process.stdout.take().expect("stdout")).read_line(&mut line).expect("suite URL");
    SuiteProcess { label, orchestrator: line.trim().to_owned(), process }
}

/// A child's whole life: the suite, as `a2a-mesh up` runs it (its telemetry from the OTEL_*
/// variables), until killed.
async fn serve_suite() {
    mesh_telemetry::init_suite(mesh_telemetry::LogFormat::Text);
    let data = tempfile::tempdir().expect("temp dir");
    let suite = start(SuiteConfig::ephemeral(data.path())).await.expect("suite starts");
    let http = HttpClient::with_reqwest().expect("client");
    let registry = RegistryClient::new(&suite.urls.registry, http).expect("registry");
    while registry.stats().await.map(|s| s.healthy_agents).unwrap_or(0) < 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("{}", suite.urls.orchestrator);
    std::future::pending::<()>().await;
}

/// Orchestrated queries at `concurrency` for `window` after a warm-up: latencies of the answers
/// inside the window.
async fn measure_queries(http: &HttpClient, orchestrator: &str, concurrency: usize, window: Duration) -> Samples {
    let workers: Vec<_> = (0..concurrency)
        .map(|worker| {
            let (http, orchestrator) = (http.clone(), orchestrator.to_owned());
            tokio::spawn(async move {
                for i in 0..TRACING_WARM_UP_QUERIES {
                    orchestrated(&http, &orchestrator, QUERIES[(worker + i) % QUERIES.len()]).await;
                }
                let (mut samples, end) = (Samples::default(), Instant::now() + window);
                let mut i = worker;
                while Instant::now() < end {
                    let (micros, _) = orchestrated(&http, &orchestrator, QUERIES[i % QUERIES.len()]).await;
                    samples.push(micros);
                    i += 1;
                }
                samples
            })
        })
        .collect();
    let mut all = Samples::default();
    for worker in workers {
        all.extend(worker.await.expect("worker"));
    }
    all
}

/// The tracing comparison (`--tracing`).
async fn compare_tracing() {
    let window = Duration::from_secs(arg("--seconds", 5));
    let rounds = arg("--rounds", 2);
    let sink = otlp_sink::OtlpSink::start().await.expect("OTLP sink");
    let suites: Vec<SuiteProcess> = TRACING_KINDS
        .iter()
        .map(|(label, ratio)| match ratio {
            None => start_suite(label, &[]),
            Some(ratio) => start_suite(
                label,
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.url.as_str()),
                    ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", ratio),
                    // Tracing alone is measured: the OTLP metrics the same endpoint would turn on stay off.
                    ("OTEL_METRICS_EXPORTER", "none"),
                ],
            ),
        })
        .collect();
    let http = HttpClient::with_reqwest().expect("client");
    println!(
        "orchestrated queries (seed /tasks/send to the orchestrator), {} s per cell, {rounds} round(s), \
         tracing off (A), every span exported (T), 10% of traces (T10); each suite in its own process",
        window.as_secs()
    );
    // (suite, concurrency) -> latencies of every round, and the queries per second of each round.
    let mut results: Vec<((usize, usize), Samples, Vec<f64>)> = Vec::new();
    for _ in 0..rounds {
        for concurrency in TRACING_CONCURRENCIES {
            for (index, suite) in suites.iter().enumerate() {
                let samples = measure_queries(&http, &suite.orchestrator, concurrency, window).await;
                let rate = samples.len() as f64 / window.as_secs_f64();
                eprintln!("c={concurrency:>2} {:<8}: {rate:>7.1} queries/s", suite.label);
                match results.iter_mut().find(|(key, ..)| *key == (index, concurrency)) {
                    Some((_, all, rates)) => {
                        all.extend(samples);
                        rates.push(rate);
                    }
                    None => results.push(((index, concurrency), samples, vec![rate])),
                }
            }
        }
    }
    println!("| suite | concurrency | queries/s | p50 ms | p99 ms | queries/s per round |");
    println!("|---|---:|---:|---:|---:|---|");
    let rate = |index: usize, concurrency: usize| {
        let (_, samples, rates) = results.iter().find(|(key, ..)| *key == (index, concurrency)).expect("measured");
        (samples.len() as f64 / (window.as_secs_f64() * rates.len() as f64), samples, rates)
    };
    for concurrency in TRACING_CONCURRENCIES {
        for (index, suite) in suites.iter().enumerate() {
            let (per_s, samples, rates) = rate(index, concurrency);
            let rounds: Vec<String> = rates.iter().map(|r| format!("{r:.1}")).collect();
            println!(
                "| {} | {concurrency} | {per_s:.1} | {:.2} | {:.2} | {} |",
                suite.label,
                samples.p50() / 1e3,
                samples.p99() / 1e3,
                rounds.join(", ")
            );
        }
    }
    for concurrency in TRACING_CONCURRENCIES {
        let off = rate(0, concurrency).0;
        for (index, goal) in [(1, GOAL_TRACED_OVER_OFF), (2, GOAL_TRACED_10_OVER_OFF)] {
            let ratio = rate(index, concurrency).0 / off;
            let verdict = if ratio >= goal { "met" } else { "NOT met" };
            println!("{}/A at c={concurrency}: {ratio:.2} (goal >= {goal}: {verdict})", suites[index].label);
        }
    }
    let (exports, bytes) = sink.received();
    println!("The OTLP receiver got {exports} export request(s), {bytes} bytes of spans.");
    assert!(exports > 0, "the traced suites exported nothing: their tracing is not on");
}

#[tokio::main]
async fn main() {
    if std::env::var_os(SERVE_ENV).is_some() {
        return serve_suite().await;
    }
    if std::env::args().any(|a| a == "--tracing") {
        return compare_tracing().await;
    }
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
