//! The LLM agent's own time, with a model that answers at once (issue #35's measures): per
//! round (p50, p99; goal p99 <= 5 ms), turns per second on one agent (goal >= 500, embedded
//! log), and the time from a tool's output to the next model request (goal p99 <= 10 ms).
//!
//! The loop runs as in production (its topic and docmem on the embedded log in a SQLite file,
//! turns submitted as A2A turns are), without the HTTP server in front: the model and the tool
//! are in-process and instant, so what is measured is the mesh's part.
//!
//! `cargo bench -p llm-agent --bench llm_rounds` (`LLM_ROUNDS_TURNS=2000` for more turns).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llm_agent::definition::Limits;
use llm_agent::prompt::Prompts;
use llm_agent::tools::{Tool, Toolbox};
use llm_agent::{AgentRuntime, AgentSetup, ChatModel, ModelError, ModelReply, ModelRequest, ToolCall, ToolSpec};
use mesh_agent_kit::TaskInput;
use mesh_bus::BusConfig;
use mesh_client::CallScope;
use mesh_protocol::call::CallContext;
use serde_json::{Value, json};
use tokio::sync::watch;

/// Turns submitted at once in the throughput run.
const CONCURRENT_TURNS: usize = 64;

/// Answers at once: a tool call first when `with_tool` and the conversation has no tool output
/// yet, text otherwise; records how long after the tool's output each request came.
#[derive(Debug)]
struct InstantModel {
    with_tool: bool,
    tool_done: Arc<Mutex<Option<Instant>>>,
    after_tool: Mutex<Vec<Duration>>,
}

#[async_trait::async_trait]
impl ChatModel for InstantModel {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ModelError> {
        let last = request.messages.last().map(|m| m.content.as_str()).unwrap_or_default();
        if last.starts_with("Result of clock") {
            let done = self.tool_done.lock().unwrap().take();
            if let Some(done) = done {
                self.after_tool.lock().unwrap().push(done.elapsed());
            }
            return Ok(ModelReply { text: "done".into(), tool_calls: Vec::new() });
        }
        if self.with_tool {
            let call = ToolCall { id: "c1".into(), name: "clock".into(), arguments: "{}".into() };
            return Ok(ModelReply { text: String::new(), tool_calls: vec![call] });
        }
        Ok(ModelReply { text: "ok".into(), tool_calls: Vec::new() })
    }
}

/// A tool that notes when it returned.
#[derive(Debug)]
struct Clock(Arc<Mutex<Option<Instant>>>);

#[async_trait::async_trait]
impl Tool for Clock {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "clock".into(), description: "now".into(), parameters: json!({"type": "object"}) }
    }

    async fn run(&self, _scope: &CallScope, _arguments: Value) -> Result<String, String> {
        *self.0.lock().unwrap() = Some(Instant::now());
        Ok("tick".into())
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn turn(i: usize) -> TaskInput {
    TaskInput {
        task_id: format!("t{i}"),
        request_id: None,
        text: format!("question {i}"),
        data: serde_json::Map::new(),
        messages: Vec::new(),
        call: CallScope::received("bench-client", CallContext::default()),
        link: None,
    }
}

async fn runtime(dir: &std::path::Path, name: &str, with_tool: bool) -> (Arc<AgentRuntime>, Arc<InstantModel>) {
    let bus = BusConfig {
        database_url: format!("sqlite://{}", dir.join(format!("{name}.db")).display()),
        ..BusConfig::default()
    };
    let (bus, docmem) = mesh_bus::open_bus(&bus).await.unwrap();
    let tool_done = Arc::new(Mutex::new(None));
    let model = Arc::new(InstantModel { with_tool, tool_done: tool_done.clone(), after_tool: Mutex::new(Vec::new()) });
    let toolbox = Toolbox::default().with(Arc::new(Clock(tool_done))).unwrap();
    let setup = AgentSetup {
        name: name.into(),
        bus_id: mesh_bus::agent_id(name, "1"),
        role: "You answer benchmarks.".into(),
        model_name: "instant".into(),
        limits: Limits::default(),
        bus,
        docmem,
        model: model.clone(),
        prompts: Arc::new(Prompts::load(None).unwrap()),
        toolbox,
        links: None,
        conversations_max: 10_000,
    };
    let agent = Arc::new(AgentRuntime::new(setup));
    agent.ensure_topic().await.unwrap();
    (agent, model)
}

#[tokio::main]
async fn main() {
    let turns: usize = std::env::var("LLM_ROUNDS_TURNS").ok().and_then(|n| n.parse().ok()).unwrap_or(1_000);
    let dir = tempfile::tempdir().unwrap();
    let (stop, stopped) = watch::channel(false);

    // One round per turn, one turn at a time: the mesh's time per round.
    let (agent, _) = runtime(dir.path(), "rounds", false).await;
    tokio::spawn(agent.clone().run_until(stopped.clone()));
    let mut rounds = Vec::with_capacity(turns);
    for i in 0..turns {
        let started = Instant::now();
        agent.submit(&turn(i)).await.unwrap();
        rounds.push(started.elapsed());
    }
    rounds.sort();
    println!(
        "round (turn of one round, model instant): p50 {:.2} ms, p99 {:.2} ms over {turns} turns (goal p99 <= 5 ms)",
        percentile(&rounds, 0.5).as_secs_f64() * 1e3,
        percentile(&rounds, 0.99).as_secs_f64() * 1e3
    );

    // Many turns at once: turns per second on one agent.
    let (agent, _) = runtime(dir.path(), "throughput", false).await;
    tokio::spawn(agent.clone().run_until(stopped.clone()));
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..CONCURRENT_TURNS)
        .map(|_| {
            let (agent, next) = (agent.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= turns {
                        return;
                    }
                    agent.submit(&turn(i)).await.unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let elapsed = started.elapsed();
    println!(
        "throughput: {:.0} turns/s ({turns} turns, {CONCURRENT_TURNS} at once, embedded log) (goal >= 500)",
        turns as f64 / elapsed.as_secs_f64()
    );

    // A tool round per turn: from the tool's output to the next model request.
    let (agent, model) = runtime(dir.path(), "tools", true).await;
    tokio::spawn(agent.clone().run_until(stopped.clone()));
    for i in 0..turns {
        agent.submit(&turn(i)).await.unwrap();
    }
    let mut after_tool = model.after_tool.lock().unwrap().clone();
    after_tool.sort();
    println!(
        "tool output -> next model request: p50 {:.2} ms, p99 {:.2} ms over {} rounds (goal p99 <= 10 ms)",
        percentile(&after_tool, 0.5).as_secs_f64() * 1e3,
        percentile(&after_tool, 0.99).as_secs_f64() * 1e3,
        after_tool.len()
    );
    let _ = stop.send(true);
}
