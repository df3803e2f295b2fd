//! Push-notification delivery (issue #18): how many notifications per second a kit agent
//! delivers to a local webhook, and how long after a task's completion its completion
//! notification arrives (p50/p99).
//!
//! An agent (tasks in a SQLite file, durable as by default; every notification goes through its
//! outbox there) completes each message at once. `--tasks N` messages are sent over JSON-RPC at
//! concurrency 16, each setting a webhook on a receiver in this process; the run ends when every
//! task's completion notification has arrived. Delivery rate = notifications received / the time
//! from the first send to the last notification.
//!
//! `cargo bench -p mesh-agent-kit --bench push_delivery -- [--tasks N]`

use std::collections::HashMap;
use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use mesh_agent_kit::{AgentApp, AgentConfig, TaskEvents, TaskHandler, Turn};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::{AgentCard, TaskState};
use serde_json::{Value, json};

type BoxError = Box<dyn Error + Send + Sync>;

/// Messages sent, unless `--tasks` says otherwise.
const TASKS_DEFAULT: usize = 2_000;
/// Messages in flight at once.
const CONCURRENCY: usize = 16;
/// Longest the run waits for the last completion notification after the last send.
const DRAIN_TIMEOUT_S: u64 = 120;
/// The token every webhook is set with; the receiver checks it.
const TOKEN: &str = "bench-push-token";

/// Completes every task at once.
#[derive(Debug)]
struct Complete;

impl TaskHandler for Complete {
    async fn run(&self, _turn: Turn, events: TaskEvents) {
        let _ = events.status(TaskState::Completed, None).await;
    }
}

/// What the webhook received: notifications in all, and when each task's completion arrived.
#[derive(Debug, Default)]
struct Received {
    notifications: usize,
    wrong_token: usize,
    completed_at: HashMap<String, Instant>,
    last: Option<Instant>,
}

type Shared = Arc<Mutex<Received>>;

async fn receive(State(received): State<Shared>, headers: axum::http::HeaderMap, body: axum::body::Bytes) {
    let now = Instant::now();
    let document: Value = serde_json::from_slice(&body).unwrap_or_default();
    let mut received = received.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    received.notifications += 1;
    received.last = Some(now);
    if headers.get("x-a2a-notification-token").and_then(|v| v.to_str().ok()) != Some(TOKEN) {
        received.wrong_token += 1;
    }
    let update = &document["statusUpdate"];
    if update["status"]["state"] == "TASK_STATE_COMPLETED"
        && let Some(task_id) = update["taskId"].as_str()
    {
        received.completed_at.insert(task_id.to_owned(), now);
    }
}

fn main() -> Result<(), BoxError> {
    let mut tasks = TASKS_DEFAULT;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--tasks" => tasks = args.next().ok_or("--tasks needs a value")?.parse()?,
            // Cargo passes `--bench` to every bench binary.
            "--bench" => {}
            _ => return Err(format!("unknown argument {arg}; expected --tasks N").into()),
        }
    }
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(tasks))
}

async fn run(tasks: usize) -> Result<(), BoxError> {
    let received = Shared::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let webhook = format!("http://{}/hook", listener.local_addr()?);
    let receiver = Router::new().route("/hook", post(receive)).with_state(received.clone());
    tokio::spawn(async move { axum::serve(listener, receiver).await });

    let dir = tempfile::tempdir()?;
    let config = AgentConfig {
        task_store_url: Some(format!("sqlite://{}", dir.path().join("tasks.db").display())),
        // Throughput is measured here, not the per-tenant limiter (one tenant sends everything).
        rate_limit_per_s: 0,
        // The webhook listens on loopback, which webhooks reach only when opted in.
        push_allowed_networks: vec!["127.0.0.0/8".into()],
        ..AgentConfig::default()
    };
    let card: AgentCard = serde_json::from_value(json!({
        "name": "push-bench", "description": "completes at once", "version": "1", "supportedInterfaces": [],
        "capabilities": {"streaming": true}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "complete", "name": "Complete", "description": "completes", "tags": ["bench"]}]
    }))?;
    let app = AgentApp::build_tasks(&config, card, Complete, HttpClient::with_reqwest()?).await?;
    let url = format!("{}/", app.url());
    tokio::spawn(app.run_until_stopped(std::future::pending()));

    println!(
        "Push delivery: {tasks} tasks at concurrency {CONCURRENCY}, tasks and outbox in SQLite, webhook on loopback."
    );
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let started = Instant::now();
    let answered_at = Arc::new(Mutex::new(HashMap::new()));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let senders: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (http, url, webhook, next, answered_at) =
                (http.clone(), url.clone(), webhook.clone(), next.clone(), answered_at.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < tasks {
                    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                        "message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": "go"}]},
                        "configuration": {"taskPushNotificationConfig": {"url": webhook, "token": TOKEN}}}});
                    let answer: Value =
                        http.post(&url).header("A2A-Version", "1.0").json(&request).send().await?.json().await?;
                    let task = &answer["result"]["task"];
                    let id = task["id"].as_str().ok_or_else(|| format!("no task in {answer}"))?;
                    answered_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id.to_owned(), Instant::now());
                }
                Ok::<_, BoxError>(())
            })
        })
        .collect();
    for sender in senders {
        sender.await??;
    }
    let sent = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    while received.lock().unwrap_or_else(std::sync::PoisonError::into_inner).completed_at.len() < tasks {
        if Instant::now() > deadline {
            return Err(format!("completions still missing {DRAIN_TIMEOUT_S} s after the last send").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let received = received.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let answered_at = answered_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let span = received.last.map_or(sent, |last| last.duration_since(started));
    let mut lags_ms: Vec<f64> = answered_at
        .iter()
        .filter_map(|(id, answered)| received.completed_at.get(id).map(|at| at.saturating_duration_since(*answered)))
        .map(|lag| lag.as_secs_f64() * 1e3)
        .collect();
    lags_ms.sort_by(f64::total_cmp);
    let percentile = |fraction: f64| lags_ms[((fraction * lags_ms.len() as f64).ceil() as usize).max(1) - 1];
    println!();
    println!(
        "| tasks | notifications | sends took s | all delivered after s | deliveries/s | completion lag p50 ms | p99 ms | wrong tokens |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {tasks} | {} | {:.2} | {:.2} | {:.0} | {:.1} | {:.1} | {} |",
        received.notifications,
        sent.as_secs_f64(),
        span.as_secs_f64(),
        received.notifications as f64 / span.as_secs_f64(),
        percentile(0.5),
        percentile(0.99),
        received.wrong_token,
    );
    if received.wrong_token > 0 {
        return Err("notifications arrived without the webhook's token".into());
    }
    Ok(())
}
