//! Capability lookups per second: the registry's `GET /capabilities/{capability}` with 100
//! registered agents, against a bare axum handler returning the same JSON, interleaved in one run
//! (registry, bare, registry, bare, ...) so both see the same machine state.
//!
//! `cargo bench --bench registry_lookup -- [--seconds 5] [--rounds 3] [--concurrency 16]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::{Json, Router};
use mesh_client::{HttpClient, RegistryClient};
use mesh_protocol::registry::{CapabilityAgents, Registration};
use registry::{Application, RegistryConfig};
use tokio::net::TcpListener;

const REGISTERED_AGENTS: usize = 100;
const CAPABILITY: &str = "search";

mod support;

use support::{Samples, arg};

#[derive(Debug, Clone, Copy)]
struct Settings {
    seconds: u64,
    rounds: u64,
    concurrency: usize,
}

/// Requests per second and latency percentiles of one measured window.
#[derive(Debug, Clone, Copy)]
struct Window {
    requests_per_s: f64,
    p50_us: f64,
    p99_us: f64,
}

async fn measure(client: &reqwest::Client, url: &str, settings: Settings) -> Window {
    let deadline = Instant::now() + Duration::from_secs(settings.seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..settings.concurrency)
        .map(|_| {
            let client = client.clone();
            let url = url.to_owned();
            tokio::spawn(async move {
                let mut latencies_us = Vec::new();
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    let response = client.get(&url).send().await.expect("request");
                    assert!(response.status().is_success(), "{url}: {}", response.status());
                    response.bytes().await.expect("body");
                    latencies_us.push(sent.elapsed().as_secs_f64() * 1e6);
                }
                latencies_us
            })
        })
        .collect();
    let mut samples = Samples::default();
    for worker in workers {
        worker.await.expect("worker").into_iter().for_each(|us| samples.push(us));
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    Window { requests_per_s: samples.len() as f64 / elapsed_s, p50_us: samples.p50(), p99_us: samples.p99() }
}

#[tokio::main]
async fn main() {
    let settings = Settings {
        seconds: arg("--seconds", 5),
        rounds: arg("--rounds", 3),
        concurrency: arg("--concurrency", 16) as usize,
    };
    let data = tempfile::tempdir().expect("temp dir");
    let config = RegistryConfig {
        port: 0,
        database_url: format!("sqlite://{}", data.path().join("registry.db").display()),
        verify_registrations: false,
        health_check_interval_ms: 3_600_000,
        // Throughput is measured here, not the per-tenant limiter (one tenant sends everything).
        rate_limit_per_s: 0,
        ..RegistryConfig::default()
    };
    let app = Application::build(&config).await.expect("registry starts");
    let registry_url = app.url();
    tokio::spawn(app.run_until_stopped(std::future::pending()));

    let registry =
        RegistryClient::new(&registry_url, HttpClient::with_reqwest().expect("client")).expect("registry url");
    for i in 0..REGISTERED_AGENTS {
        let registration = Registration {
            name: format!("search-agent-{i:03}"),
            url: format!("http://10.0.{}.{}:8002", i / 250, i % 250 + 1),
            capabilities: vec![CAPABILITY.into(), "ranking".into()],
            health_endpoint: "/health".into(),
            process_endpoint: "/tasks/send".into(),
            agent_card_url: None,
        };
        registry.register(&registration).await.expect("registration");
    }
    let expected: CapabilityAgents = registry.discover(CAPABILITY).await.expect("lookup");
    assert_eq!(expected.agents.len(), REGISTERED_AGENTS);

    // The reference: the same JSON serialized by a handler with no registry logic and no middleware.
    let body = Arc::new(expected);
    let bare = Router::new().route(
        "/capabilities/search",
        get(move || {
            let body = body.clone();
            async move { Json((*body).clone()) }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let bare_url = format!("http://{}/capabilities/search", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, bare).await });

    let lookup_url = format!("{registry_url}/capabilities/{CAPABILITY}");
    let client = reqwest::Client::builder().pool_max_idle_per_host(settings.concurrency).build().expect("client");
    let warmup = Settings { seconds: 1, ..settings };
    measure(&client, &lookup_url, warmup).await;
    measure(&client, &bare_url, warmup).await;

    println!(
        "capability lookup, {REGISTERED_AGENTS} agents, concurrency {}, {} s windows",
        settings.concurrency, settings.seconds
    );
    println!("{:<6} {:<10} {:>10} {:>9} {:>9}", "round", "target", "req/s", "p50 µs", "p99 µs");
    let (mut registry_total, mut bare_total) = (0.0, 0.0);
    for round in 1..=settings.rounds {
        for (name, url) in [("registry", &lookup_url), ("bare", &bare_url)] {
            let window = measure(&client, url, settings).await;
            println!(
                "{round:<6} {name:<10} {:>10.0} {:>9.0} {:>9.0}",
                window.requests_per_s, window.p50_us, window.p99_us
            );
            if name == "registry" {
                registry_total += window.requests_per_s;
            } else {
                bare_total += window.requests_per_s;
            }
        }
    }
    println!("registry / bare throughput ratio: {:.2} (goal >= 0.50)", registry_total / bare_total);
}
