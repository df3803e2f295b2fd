//! Steady load on a running suite for the chaos test (`scripts/chaos.sh`): concurrent
//! orchestrated queries, each with a deadline, while watching one search replica and the
//! registry's view of it. Prints how the answers went (SUCCESS / PARTIAL / errors by code),
//! whether any came after its deadline or without a body, and how fast the watched replica came
//! back into rotation after it restarted.
//!
//! ```sh
//! cargo run --release --example chaos_load -- --orchestrator-url http://127.0.0.1:18001 \
//!     --registry-url http://127.0.0.1:18000 --replica search-2 --replica-url http://127.0.0.1:18003
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use load::{Outcome, QUERIES, query};
use mesh_client::HttpClient;
use mesh_protocol::registry::{AgentRecord, HealthStatus};
use search::eval::quantile;

#[path = "../tests/common/load.rs"]
mod load;

/// How often the watcher looks at the replica and the registry.
const WATCH_PERIOD_MS: u64 = 100;
/// Time the watcher allows each of its probes.
const WATCH_TIMEOUT_MS: u64 = 1_000;

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:18001")]
    orchestrator_url: String,
    #[arg(long, default_value = "http://127.0.0.1:18000")]
    registry_url: String,
    /// Name of the search replica the script kills and restarts.
    #[arg(long, default_value = "search-2")]
    replica: String,
    #[arg(long, default_value = "http://127.0.0.1:18003")]
    replica_url: String,
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Deadline each query carries (x-mesh-deadline-ms).
    #[arg(long, default_value_t = 15_000)]
    deadline_ms: u64,
}

/// What the watcher saw of the replica.
#[derive(Debug, Default)]
struct Watch {
    /// When the replica stopped answering its health endpoint (killed).
    down_at: Option<Instant>,
    /// When it answered again after that (restarted).
    up_again_at: Option<Instant>,
    /// When the registry next listed it healthy after it had stopped.
    healthy_again_at: Option<Instant>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let http = HttpClient::with_reqwest()?;
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let watch = Arc::new(Mutex::new(Watch::default()));
    let started = Instant::now();
    let until = started + Duration::from_secs(args.seconds);

    let watcher = tokio::spawn(watch_replica(
        http.clone(),
        args.registry_url.clone(),
        args.replica.clone(),
        args.replica_url.clone(),
        until,
        watch.clone(),
    ));
    let mut workers = Vec::new();
    for worker in 0..args.concurrency {
        let (http, outcomes, url) = (http.clone(), outcomes.clone(), args.orchestrator_url.clone());
        let deadline_ms = args.deadline_ms;
        workers.push(tokio::spawn(async move {
            let mut turn = worker;
            while Instant::now() < until {
                let outcome = query(&http, &url, QUERIES[turn % QUERIES.len()], deadline_ms).await;
                outcomes.lock().unwrap_or_else(|e| e.into_inner()).push(outcome);
                turn += 1;
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    watcher.await?;

    let outcomes = outcomes.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let watch = watch.lock().unwrap_or_else(|e| e.into_inner());
    report(&args, &outcomes, &watch);
    Ok(())
}

async fn watch_replica(
    http: HttpClient,
    registry_url: String,
    replica: String,
    replica_url: String,
    until: Instant,
    watch: Arc<Mutex<Watch>>,
) {
    let timeout = Duration::from_millis(WATCH_TIMEOUT_MS);
    let health_url = format!("{}/health", replica_url.trim_end_matches('/'));
    let record_url = format!("{}/agents/{replica}", registry_url.trim_end_matches('/'));
    while Instant::now() < until {
        let up = http.get_json::<serde_json::Value>(&health_url, timeout).await.is_ok();
        let healthy = http
            .get_json::<AgentRecord>(&record_url, timeout)
            .await
            .is_ok_and(|record| record.health_status == HealthStatus::Healthy);
        let now = Instant::now();
        {
            let mut watch = watch.lock().unwrap_or_else(|e| e.into_inner());
            if !up && watch.down_at.is_none() {
                watch.down_at = Some(now);
            }
            if up && watch.down_at.is_some() && watch.up_again_at.is_none() {
                watch.up_again_at = Some(now);
            }
            if healthy && watch.up_again_at.is_some() && watch.healthy_again_at.is_none() {
                watch.healthy_again_at = Some(now);
            }
        }
        tokio::time::sleep(Duration::from_millis(WATCH_PERIOD_MS)).await;
    }
}

fn report(args: &Args, outcomes: &[Outcome], watch: &Watch) {
    let total = outcomes.len();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for outcome in outcomes {
        *kinds.entry(outcome.kind.as_str()).or_default() += 1;
    }
    let answered = outcomes.iter().filter(|o| o.answered()).count();
    let late = outcomes.iter().filter(|o| o.latency_ms > args.deadline_ms as f64).count();
    let no_body = outcomes.iter().filter(|o| o.kind.starts_with("NO BODY")).count();
    let mut latencies: Vec<f64> = outcomes.iter().map(|o| o.latency_ms).collect();
    let (p50, p99) = (quantile(&mut latencies, 0.50), quantile(&mut latencies, 0.99));
    let max = latencies.last().copied().unwrap_or(0.0);
    println!(
        "chaos load: {} concurrent queries for {} s, deadline {} ms each",
        args.concurrency, args.seconds, args.deadline_ms
    );
    println!("queries: {total}");
    for (kind, count) in &kinds {
        println!("  {kind:<40} {count}");
    }
    let share = if total == 0 { 0.0 } else { 100.0 * answered as f64 / total as f64 };
    println!("SUCCESS or PARTIAL: {answered}/{total} = {share:.3}%  (goal >= 99.9%)");
    println!("later than the deadline: {late}  (goal 0)");
    println!("errors without a body: {no_body}  (goal 0)");
    println!("latency ms: p50 {p50:.1}, p99 {p99:.1}, max {max:.1}");
    match (watch.down_at, watch.up_again_at) {
        (Some(down), Some(up)) => {
            println!("replica {}: down for {:.1} s", args.replica, (up - down).as_secs_f64());
            match watch.healthy_again_at {
                Some(healthy) => {
                    println!("  healthy in the registry {:.2} s after it answered again", (healthy - up).as_secs_f64())
                }
                None => println!("  never listed healthy again"),
            }
            match outcomes
                .iter()
                .filter(|o| o.finished > up && o.searched_by.as_deref() == Some(&args.replica))
                .map(|o| o.finished)
                .min()
            {
                Some(first) => {
                    println!("  first query searched by it {:.2} s after it answered again", (first - up).as_secs_f64())
                }
                None => println!("  no query searched by it after it answered again"),
            }
        }
        (Some(_), None) => println!("replica {}: went down and never answered again", args.replica),
        _ => println!("replica {}: never seen down", args.replica),
    }
}
