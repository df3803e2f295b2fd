//! What the gateway costs (issue #36): a blocking JSON-RPC `SendMessage` to a bare echo agent
//! (an axum server answering a completed task of about 1 KB, as fast as a server can), called
//! directly and through the gateway (authentication, rules, tenant records, chain, circuit, call
//! report: everything a call gets), all in this process on port 0 beside a registry.
//!
//! 1. Closed loop at `--concurrency` (16): requests per second direct and through the gateway,
//!    and their ratio (goal ≥ 0.7); the gateway's figure is its rate in front of a bare echo.
//! 2. Open loop at `--rate` (1,000) requests per second for `--seconds`: p50 and p99 latency
//!    direct and through the gateway, and the p99 the gateway adds (goal ≤ 1 ms).
//!
//! ```sh
//! cargo bench -p gateway --bench gateway_relay -- [--concurrency 16] [--seconds 10] [--rate 1000]
//! ```
//!
//! The load generator shares the machine (and this process) with both servers: on a small
//! machine the figures are the three together, not the gateway alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Json;
use axum::routing::{get, post};
use gateway::{Gateway, GatewayConfig};
use mesh_auth::{AuthConfig, Claims, Role};
use serde_json::{Value, json};

#[path = "../../../benches/support/mod.rs"]
mod support;

use support::{Samples, arg};

const SECRET: &str = "gateway-bench-secret-of-32-bytes-at-least";
/// Text of the echoed artifact, so the answer is about 1 KB (agentgateway's published figure is
/// for 1 KB bodies).
const PAYLOAD_CHARS: usize = 700;
/// Warm-up requests before each measurement (connections opened, caches filled).
const WARM_UP_REQUESTS: usize = 500;
const REQUEST_TIMEOUT_MS: u64 = 10_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let concurrency = usize::try_from(arg("--concurrency", 16))?;
    let seconds = arg("--seconds", 10);
    let rate = arg("--rate", 1_000);
    let data = tempfile::tempdir()?;
    let echo = echo_agent().await?;
    let registry = registry(&data).await?;
    register(&registry, &echo).await?;
    let gateway = gateway(&registry).await?;
    let token = mesh_auth::mint_hs256(SECRET.as_bytes(), &Claims::new("bench", "acme", &[Role::User], 3_600))?;
    let client = reqwest::Client::builder().pool_max_idle_per_host(concurrency * 2).build()?;
    let direct = Target { url: format!("{echo}/"), token: None };
    let through = Target { url: format!("{gateway}/agents/echo/"), token: Some(token) };
    for target in [&direct, &through] {
        for _ in 0..WARM_UP_REQUESTS {
            target.send(&client).await?;
        }
    }

    println!("closed loop, concurrency {concurrency}, {seconds} s each:");
    let direct_rate = closed_loop(&client, &direct, concurrency, seconds).await?;
    let gateway_rate = closed_loop(&client, &through, concurrency, seconds).await?;
    println!("  direct   {direct_rate:>9.0} req/s");
    println!("  gateway  {gateway_rate:>9.0} req/s   ({:.2}x direct; goal >= 0.70)", gateway_rate / direct_rate);

    println!("open loop, {rate} req/s, {seconds} s each:");
    let direct_latency = open_loop(&client, &direct, rate, seconds).await?;
    let gateway_latency = open_loop(&client, &through, rate, seconds).await?;
    for (name, samples) in [("direct", &direct_latency), ("gateway", &gateway_latency)] {
        println!(
            "  {name:<8} p50 {:>7.0} us   p99 {:>7.0} us   ({} answers)",
            samples.p50(),
            samples.p99(),
            samples.len()
        );
    }
    let added = gateway_latency.p99() - direct_latency.p99();
    println!("  the gateway adds {added:.0} us at p99 (goal <= 1000 us)");
    Ok(())
}

/// Where the load goes.
struct Target {
    url: String,
    token: Option<String>,
}

impl Target {
    async fn send(&self, client: &reqwest::Client) -> anyhow::Result<()> {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "role": "ROLE_USER", "messageId": uuid::Uuid::new_v4().to_string(), "parts": [{"text": "bench"}]}}});
        let mut call = client
            .post(&self.url)
            .json(&request)
            .header("A2A-Version", "1.0")
            .timeout(Duration::from_millis(REQUEST_TIMEOUT_MS));
        if let Some(token) = &self.token {
            call = call.bearer_auth(token);
        }
        let response = call.send().await?;
        anyhow::ensure!(response.status().is_success(), "{} answered {}", self.url, response.status());
        response.bytes().await?;
        Ok(())
    }
}

/// Requests per second `concurrency` callers get, each sending its next request on the answer.
async fn closed_loop(
    client: &reqwest::Client,
    target: &Target,
    concurrency: usize,
    seconds: u64,
) -> anyhow::Result<f64> {
    let done = Arc::new(AtomicU64::new(0));
    let ends = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let callers = (0..concurrency).map(|_| {
        let done = done.clone();
        async move {
            while Instant::now() < ends {
                target.send(client).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }
    });
    for result in futures::future::join_all(callers).await {
        result?;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// The latency of requests sent at a fixed `rate`, whether or not the previous ones answered.
async fn open_loop(client: &reqwest::Client, target: &Target, rate: u64, seconds: u64) -> anyhow::Result<Samples> {
    let mut ticks = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate.max(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (target, client) = (Arc::new(Target { url: target.url.clone(), token: target.token.clone() }), client.clone());
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..rate * seconds {
        ticks.tick().await;
        let (target, client) = (target.clone(), client.clone());
        calls.spawn(async move {
            let sent = Instant::now();
            target.send(&client).await.map(|()| sent.elapsed())
        });
    }
    let mut samples = Samples::default();
    while let Some(result) = calls.join_next().await {
        samples.push(result??.as_secs_f64() * 1e6);
    }
    Ok(samples)
}

/// The bare echo agent: its card and a completed task for every message; its URL.
async fn echo_agent() -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let card = json!({
        "name": "echo",
        "description": "bare echo",
        "version": "1",
        "supportedInterfaces": [{"url": format!("{url}/"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "echo", "tags": ["echo"]}],
    });
    let text = "e".repeat(PAYLOAD_CHARS);
    let answer = move |Json(request): Json<Value>| {
        let text = text.clone();
        async move {
            let id = uuid::Uuid::new_v4().to_string();
            Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": {"task": {
                "id": id, "contextId": id, "status": {"state": "TASK_STATE_COMPLETED"},
                "artifacts": [{"artifactId": "a", "parts": [{"text": text}]}]}}}))
        }
    };
    let app = axum::Router::new()
        .route("/.well-known/agent-card.json", get(move || std::future::ready(Json(card.clone()))))
        .route("/", post(answer));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

fn auth() -> AuthConfig {
    AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() }
}

async fn registry(data: &tempfile::TempDir) -> anyhow::Result<String> {
    let config = registry::RegistryConfig {
        port: 0,
        database_url: format!("sqlite://{}", data.path().join("registry.db").display()),
        auth: auth(),
        ..registry::RegistryConfig::default()
    };
    let app = registry::Application::build(&config).await?;
    let url = app.url();
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    Ok(url)
}

async fn register(registry: &str, echo: &str) -> anyhow::Result<()> {
    let admin = mesh_auth::mint_hs256(SECRET.as_bytes(), &Claims::new("operator", "", &[Role::Admin], 600))?;
    let registration = json!({
        "name": "echo", "url": format!("{echo}/"), "capabilities": ["echo"],
        "health_endpoint": "/.well-known/agent-card.json", "process_endpoint": "/",
        "agent_card_url": format!("{echo}/.well-known/agent-card.json"),
    });
    let response = reqwest::Client::new()
        .post(format!("{registry}/register"))
        .bearer_auth(admin)
        .json(&registration)
        .send()
        .await?;
    anyhow::ensure!(response.status().is_success(), "registration refused: {}", response.text().await?);
    Ok(())
}

async fn gateway(registry: &str) -> anyhow::Result<String> {
    let config = GatewayConfig {
        port: 0,
        registry_url: Some(registry.to_owned()),
        auth: AuthConfig { credential_self_issued_ttl_s: Some(3_600), ..auth() },
        upstream_allowed_networks: vec!["127.0.0.0/8".into()],
        // The bench measures the relay, not the per-tenant limit.
        rate_limit_per_s: 0,
        ..GatewayConfig::default()
    };
    let gateway = Gateway::build(&config).await?;
    let url = gateway.url().to_owned();
    tokio::spawn(gateway.run_until_stopped(std::future::pending()));
    Ok(url)
}
