//! Overload generator for `scripts/overload.sh` (issue #12): measures the rate one agent
//! sustains, then offers ten times that over 2,000 connections for 60 s, and checks that every
//! answer is a 2xx, or a 503 or 429 with `Retry-After` and the mesh JSON error body, that
//! accepted requests finish within their deadline, and that the agent serves normally 1 s after
//! the load stops. Prints a JSON summary; exits non-zero when a check fails.
//!
//! ```sh
//! cargo run --release -p mesh-agent-kit --example overload -- --url http://127.0.0.1:19001
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use mesh_protocol::error::ErrorBody;
use serde_json::json;

/// Tenants the load is spread over, so the per-tenant rate limit and the concurrency limit
/// both come into play; a quarter of the connections use one hot tenant.
const TENANTS: usize = 100;
/// Requests checked one after the other once the load has stopped.
const AFTER_REQUESTS: usize = 50;

#[derive(Debug, Parser)]
struct Cli {
    /// The agent's base URL (it must serve seed `POST /tasks/send`).
    #[arg(long)]
    url: String,
    /// Connections kept busy during the overload.
    #[arg(long, default_value_t = 2_000)]
    connections: usize,
    /// Seconds of overload.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Offered rate as a multiple of the measured sustainable rate.
    #[arg(long, default_value_t = 10.0)]
    factor: f64,
    /// Seconds spent measuring the sustainable rate (closed loop, `calibration_connections`).
    #[arg(long, default_value_t = 10)]
    calibration_seconds: u64,
    #[arg(long, default_value_t = 32)]
    calibration_connections: usize,
    /// The deadline every request carries (`x-mesh-deadline-ms`): an accepted request must be
    /// answered within it.
    #[arg(long, default_value_t = 5_000)]
    deadline_ms: u64,
}

/// What the answers were, by kind.
#[derive(Debug, Default)]
struct Tally {
    ok: AtomicU64,
    shed: AtomicU64,
    limited: AtomicU64,
    /// Answers that break the contract: another status, no JSON error body, no Retry-After,
    /// no answer at all, or an accepted answer after its deadline.
    violations: AtomicU64,
    slowest_ok_ms: AtomicU64,
    first_violations: std::sync::Mutex<Vec<String>>,
}

impl Tally {
    fn violation(&self, what: String) {
        self.violations.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_violations.lock().unwrap_or_else(|e| e.into_inner());
        if first.len() < 10 {
            first.push(what);
        }
    }
}

fn task_body() -> serde_json::Value {
    json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": "load"}]}]})
}

/// Sends one task as `tenant` and files the answer.
async fn one(client: &reqwest::Client, url: &str, tenant: &str, deadline_ms: u64, tally: &Tally) {
    let started = Instant::now();
    let sent = client
        .post(format!("{url}/tasks/send"))
        .header("x-mesh-tenant", tenant)
        .header("x-mesh-deadline-ms", deadline_ms.to_string())
        .json(&task_body())
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(error) => return tally.violation(format!("no answer: {error}")),
    };
    let status = response.status().as_u16();
    let retry_after = response.headers().contains_key("retry-after");
    let body = response.bytes().await.unwrap_or_default();
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match status {
        200..=299 if elapsed_ms <= deadline_ms => {
            tally.ok.fetch_add(1, Ordering::Relaxed);
            tally.slowest_ok_ms.fetch_max(elapsed_ms, Ordering::Relaxed);
        }
        200..=299 => tally.violation(format!("accepted but answered after {elapsed_ms} ms")),
        429 | 503 => {
            let error_body = serde_json::from_slice::<ErrorBody>(&body);
            match (error_body, retry_after) {
                (Ok(_), true) if status == 429 => _ = tally.limited.fetch_add(1, Ordering::Relaxed),
                (Ok(_), true) => _ = tally.shed.fetch_add(1, Ordering::Relaxed),
                (Ok(_), false) => tally.violation(format!("{status} without Retry-After")),
                (Err(e), _) => tally.violation(format!("{status} without a JSON error body ({e})")),
            }
        }
        other => tally.violation(format!("status {other}: {}", String::from_utf8_lossy(&body))),
    }
}

fn client(connections: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("build the HTTP client")
}

/// Closed loop: `connections` workers sending back to back; the 2xx answers per second.
async fn sustainable_rate(cli: &Cli) -> f64 {
    let client = client(cli.calibration_connections);
    let tally = Arc::new(Tally::default());
    let end = Instant::now() + Duration::from_secs(cli.calibration_seconds);
    let workers: Vec<_> = (0..cli.calibration_connections)
        .map(|worker| {
            let (client, url, tally, deadline_ms) = (client.clone(), cli.url.clone(), tally.clone(), cli.deadline_ms);
            tokio::spawn(async move {
                let tenant = format!("t{}", worker % TENANTS);
                while Instant::now() < end {
                    one(&client, &url, &tenant, deadline_ms, &tally).await;
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.await;
    }
    tally.ok.load(Ordering::Relaxed) as f64 / cli.calibration_seconds as f64
}

/// Open loop: every connection paced at its share of `rate`, for `seconds`.
async fn overload(cli: &Cli, rate: f64) -> Arc<Tally> {
    let client = client(cli.connections);
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let period = Duration::from_secs_f64(cli.connections as f64 / rate.max(1.0));
    let workers: Vec<_> = (0..cli.connections)
        .map(|worker| {
            let (client, url, tally, stop) = (client.clone(), cli.url.clone(), tally.clone(), stop.clone());
            let (deadline_ms, connections) = (cli.deadline_ms, cli.connections);
            tokio::spawn(async move {
                let tenant = if worker % 4 == 0 { "hot".to_owned() } else { format!("t{}", worker % TENANTS) };
                // Spread the connections' first requests over one period.
                tokio::time::sleep(period.mul_f64(worker as f64 / connections as f64)).await;
                let mut ticks = tokio::time::interval(period);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                while !stop.load(Ordering::Relaxed) {
                    ticks.tick().await;
                    one(&client, &url, &tenant, deadline_ms, &tally).await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(cli.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = worker.await;
    }
    tally
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let sustainable = sustainable_rate(&cli).await;
    let offered = sustainable * cli.factor;
    eprintln!("sustainable {sustainable:.0}/s; offering {offered:.0}/s over {} connections", cli.connections);
    let started = Instant::now();
    let tally = overload(&cli, offered).await;
    let load_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_client = client(1);
    let after = Tally::default();
    for _ in 0..AFTER_REQUESTS {
        one(&after_client, &cli.url, "after", cli.deadline_ms, &after).await;
    }
    let after_ok = after.ok.load(Ordering::Relaxed);
    let answered = ["ok", "shed", "limited"]
        .into_iter()
        .zip([&tally.ok, &tally.shed, &tally.limited])
        .map(|(kind, count)| (kind, count.load(Ordering::Relaxed)))
        .collect::<BTreeMap<_, _>>();
    let total: u64 = answered.values().sum::<u64>() + tally.violations.load(Ordering::Relaxed);
    let summary = json!({
        "sustainable_per_s": sustainable.round(),
        "offered_per_s": offered.round(),
        "connections": cli.connections,
        "load_s": load_s,
        "answers": total,
        "answered_per_s": (total as f64 / load_s).round(),
        "by_kind": answered,
        "violations": tally.violations.load(Ordering::Relaxed),
        "first_violations": *tally.first_violations.lock().unwrap_or_else(|e| e.into_inner()),
        "slowest_accepted_ms": tally.slowest_ok_ms.load(Ordering::Relaxed),
        "after_1s_ok": format!("{after_ok}/{AFTER_REQUESTS}"),
    });
    println!("{}", serde_json::to_string_pretty(&summary).unwrap_or_default());
    let passed = tally.violations.load(Ordering::Relaxed) == 0 && after_ok == AFTER_REQUESTS as u64;
    std::process::exit(if passed { 0 } else { 1 });
}
