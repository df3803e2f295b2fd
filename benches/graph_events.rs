//! Events per second the registry's event stream (`GET /api/events`, SSE) delivers to 100
//! subscribers, published through the agents' real path (`POST /api/events/calls`, batches of
//! 100), against the floor under it: the same events handed to 100 receivers of an in-process
//! `tokio::sync::broadcast` channel, serialized once each as the hub does. Both are run in turn
//! in each round, so both see the same machine state; the ratio is the HTTP/SSE path's cost.
//!
//! Every event carries its publish time (in `latency_ms`, as microseconds since the start of the
//! run), so each subscriber measures publish-to-delivery latency: p50 and p99.
//!
//! The publisher stays at most half the hub's buffer ahead of the slowest subscriber, so the
//! figures are of lossless delivery; a `gap` event would fail the run.
//!
//! `cargo bench --bench graph_events -- [--events 20000] [--subscribers 100] [--rounds 3]`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mesh_protocol::graph::{CallReport, CallReports, EventBody, MeshEvent, OutcomeStatus};
use registry::{Application, RegistryConfig};

mod support;

use support::{Samples, arg};

const BATCH_EVENTS: usize = 100;
/// How far the publisher may run ahead of the slowest subscriber, in events.
const PUBLISH_AHEAD_EVENTS_MAX: u64 = 2_000;

#[derive(Debug, Clone, Copy)]
struct Outcome {
    delivered_per_s: f64,
    p50_us: f64,
    p99_us: f64,
}

fn call(published_us: u64) -> EventBody {
    EventBody::Call {
        from: "orchestrator".into(),
        to: "search".into(),
        capability: Some("search".into()),
        status: OutcomeStatus::Success,
        latency_ms: published_us,
        tenant: String::new(),
    }
}

/// Waits until every subscriber has seen at least `published - PUBLISH_AHEAD_EVENTS_MAX` events.
async fn keep_pace(counts: &[Arc<AtomicU64>], published: u64) {
    while counts.iter().map(|c| c.load(Ordering::Relaxed)).min().unwrap_or(0) + PUBLISH_AHEAD_EVENTS_MAX < published {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

async fn over_sse(url: &str, events: u64, subscribers: usize, origin: Instant) -> Outcome {
    let client = reqwest::Client::new();
    let counts: Vec<Arc<AtomicU64>> = (0..subscribers).map(|_| Arc::default()).collect();
    let mut readers = Vec::new();
    for count in &counts {
        let response = client.get(format!("{url}/api/events")).send().await.expect("stream opens");
        assert_eq!(response.status(), 200);
        let count = count.clone();
        readers.push(tokio::spawn(read_stream(response, events, count, origin)));
    }
    let started = Instant::now();
    let mut published = 0u64;
    while published < events {
        keep_pace(&counts, published).await;
        let batch = BATCH_EVENTS.min((events - published) as usize);
        let now_us = origin.elapsed().as_micros() as u64;
        let calls = (0..batch)
            .map(|_| CallReport {
                from: "orchestrator".into(),
                to: "search".into(),
                capability: Some("search".into()),
                status: OutcomeStatus::Success,
                latency_ms: now_us,
                at: None,
                tenant: None,
            })
            .collect();
        let response =
            client.post(format!("{url}/api/events/calls")).json(&CallReports { calls }).send().await.expect("report");
        assert_eq!(response.status(), 202);
        published += batch as u64;
    }
    let mut samples = Samples::default();
    for reader in readers {
        samples.extend(reader.await.expect("reader"));
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    Outcome { delivered_per_s: samples.len() as f64 / elapsed_s, p50_us: samples.p50(), p99_us: samples.p99() }
}

/// Reads `events` call events off one SSE response, timing each.
async fn read_stream(mut response: reqwest::Response, events: u64, count: Arc<AtomicU64>, origin: Instant) -> Samples {
    let mut samples = Samples::default();
    let mut buffer = String::new();
    while count.load(Ordering::Relaxed) < events {
        let chunk = response.chunk().await.expect("chunk").expect("stream open");
        buffer.push_str(std::str::from_utf8(&chunk).expect("utf-8"));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data:")) else { continue };
            let event: MeshEvent = serde_json::from_str(data.trim_start()).expect("event JSON");
            match event.body {
                EventBody::Call { latency_ms: published_us, .. } => {
                    samples.push(origin.elapsed().as_micros() as f64 - published_us as f64);
                    count.fetch_add(1, Ordering::Relaxed);
                }
                EventBody::Gap { missed } => panic!("a subscriber fell behind and missed {missed:?} events"),
                _ => {}
            }
        }
    }
    samples
}

async fn over_broadcast(events: u64, subscribers: usize, origin: Instant) -> Outcome {
    let (sender, _) = tokio::sync::broadcast::channel::<Arc<(u64, String)>>(4_096);
    let counts: Vec<Arc<AtomicU64>> = (0..subscribers).map(|_| Arc::default()).collect();
    let readers: Vec<_> = counts
        .iter()
        .map(|count| {
            let mut receiver = sender.subscribe();
            let count = count.clone();
            tokio::spawn(async move {
                let mut samples = Samples::default();
                while count.load(Ordering::Relaxed) < events {
                    let event = receiver.recv().await.expect("no lag at this pace");
                    samples.push(origin.elapsed().as_micros() as f64 - event.0 as f64);
                    std::hint::black_box(&event.1);
                    count.fetch_add(1, Ordering::Relaxed);
                }
                samples
            })
        })
        .collect();
    let started = Instant::now();
    for published in 0..events {
        if published % BATCH_EVENTS as u64 == 0 {
            keep_pace(&counts, published).await;
        }
        let now_us = origin.elapsed().as_micros() as u64;
        let event = MeshEvent { id: published, at: String::new(), body: call(now_us) };
        let _ = sender.send(Arc::new((now_us, serde_json::to_string(&event).expect("json"))));
    }
    let mut samples = Samples::default();
    for reader in readers {
        samples.extend(reader.await.expect("reader"));
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    Outcome { delivered_per_s: samples.len() as f64 / elapsed_s, p50_us: samples.p50(), p99_us: samples.p99() }
}

fn print(label: &str, outcome: Outcome) {
    println!(
        "  {label:<28} {:>12.0} events/s delivered   p50 {:>9.0} µs   p99 {:>9.0} µs",
        outcome.delivered_per_s, outcome.p50_us, outcome.p99_us
    );
}

#[tokio::main]
async fn main() {
    let events = arg("--events", 20_000);
    let subscribers = arg("--subscribers", 100) as usize;
    let rounds = arg("--rounds", 3);
    let data = tempfile::tempdir().expect("temp dir");
    let config = RegistryConfig {
        port: 0,
        database_url: format!("sqlite://{}", data.path().join("registry.db").display()),
        // Each round opens its own streams; the previous round's close as the hub next writes to them.
        event_subscribers_max: subscribers * (rounds as usize + 1),
        // Every stream is the default tenant's (the registry runs open).
        event_subscribers_per_tenant_max: subscribers * (rounds as usize + 1),
        // One publisher posts every batch: throughput is measured, not the per-tenant limiter.
        rate_limit_per_s: 0,
        ..RegistryConfig::default()
    };
    let app = Application::build(&config).await.expect("registry");
    let url = app.url();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    println!("{events} events to {subscribers} subscribers, {rounds} rounds");
    let origin = Instant::now();
    let (mut sse, mut floor) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        println!("round {round}");
        let a = over_sse(&url, events, subscribers, origin).await;
        print("registry SSE (HTTP)", a);
        let b = over_broadcast(events, subscribers, origin).await;
        print("in-process broadcast", b);
        println!("  ratio SSE / broadcast: {:.3}", a.delivered_per_s / b.delivered_per_s);
        sse.push(a.delivered_per_s);
        floor.push(b.delivered_per_s);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b) = (median(&mut sse), median(&mut floor));
    println!("median: SSE {a:.0} events/s, broadcast {b:.0} events/s, ratio {:.3}", a / b);
    let _ = stop.send(());
    server.await.expect("server task").expect("registry stops");
}
