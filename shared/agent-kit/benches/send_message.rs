//! `SendMessage` over JSON-RPC (issue #5): throughput and p50/p99 latency at concurrency 1, 16
//! and 64 against three servers, interleaved in one run (A, B, C, A, B, C, ...) so drifts of
//! the machine hit all three alike:
//!
//! - A: an echo agent on this kit (`AgentApp`), answering "echo: <text>", its tasks durable in a
//!   SQLite file (a temporary one) as with an agent's default store;
//! - Ab: A with `task_durability = "buffered"` (a file of its own): answers do not wait for the
//!   commit, which the writer makes every flush interval (issue #17);
//! - Am: A with `task_durability = "memory"`: no database at all, as the Python SDK's default
//!   `InMemoryTaskStore` (issue #17's goal: Am/C >= 0.5 at concurrency 16);
//! - B: the official Python SDK's echo agent (`a2a-sdk`, uvicorn, one worker);
//! - R: the official Rust SDK's echo agent (`a2a-server-lf` 0.5.3: its default handler, its
//!   in-memory task store and its JSON-RPC router; the crate `benches/a2a-rs-peer`, outside the
//!   workspace, built by this bench unless `--rust-sdk` names its binary). Its store never frees a
//!   task, so it is started afresh for each of its cells (issue #38's peer to beat);
//! - C: a bare axum handler answering A's own response bytes: the floor HTTP and axum cost;
//! - A': A with authentication on (an HS256 secret), every request carrying a bearer JWT that
//!   the server verifies: the cost of auth (issue #12), as A'/A;
//! - T: A exporting every span over OTLP/HTTP to a local receiver (this process), and T10 the
//!   same at a 10% sampling ratio: the cost of tracing (issue #13), as T/A and T10/A;
//! - G: A (its tasks in a SQLite file of its own) called over gRPC instead of JSON-RPC, one
//!   HTTP/2 connection per concurrent request: the cost of the binding (issue #18), as G/A.
//!
//! Every kit server (A, Ab, Am, A', T, T10) installs the kit's telemetry as an agent binary does (one
//! INFO log line per request, written to a discarded stderr); only T and T10 have an endpoint.
//!
//! `cargo bench -p mesh-agent-kit --bench send_message -- [--seconds N] [--rounds R]
//! [--python PATH] [--python-agent SCRIPT] [--rust-sdk BINARY] [--servers A,T,T10] [--concurrency 16]`
//! (`--servers` picks the servers measured besides A: any of Ab, Am, B, R, C, A', T, T10, G; all by
//! default; `--concurrency` some of 1, 16 and 64). Ab and Am are also shown over B and C, beside A,
//! and A, Ab, Am and G over R. Each cell also reads the CPU time the server and this load
//! generator used over its measured window, given per request in the first table.
//! `scripts/profile-task-path.sh` samples A and Am under this load with `perf`, and
//! `scripts/task-path-components.sh` splits each server's CPU per request by component.
//!
//! Each server runs in its own process (A and C are this binary re-executed), so the load
//! generator never shares a runtime with the server it measures. Every response is checked;
//! failures are counted and reported, never counted as throughput.

use std::collections::BTreeMap;
use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{SendRequest, handshake};
use hyper_util::rt::TokioIo;
use mesh_agent_kit::{AgentApp, AgentConfig, AgentError, AgentHandler, AgentReply, TaskDurability, TaskInput};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::seed::Part;
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpStream;

#[path = "support/otlp_sink.rs"]
mod otlp_sink;
#[path = "../../../benches/support/mod.rs"]
mod support;

use otlp_sink::OtlpSink;

type BoxError = Box<dyn Error + Send + Sync>;

/// The allocator the services run with (`a2a-mesh` links the search agent, which sets it), so A
/// allocates as a deployed agent does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Concurrent requests (one keep-alive connection each) measured for every server, unless
/// `--concurrency` picks some.
const CONCURRENCIES: [usize; 3] = [1, 16, 64];
/// Measured time per cell (server × concurrency × round), unless `--seconds` says otherwise.
const MEASURE_SECS_DEFAULT: u64 = 5;
/// Rounds of the whole A, B, C sequence, unless `--rounds` says otherwise.
const ROUNDS_DEFAULT: u32 = 2;
/// Requests before each measured window, not recorded: connections, caches and the Python
/// interpreter's hot paths warm up here.
const WARM_UP_SECS: u64 = 1;
/// Longest a single request may take before it counts as failed (and its connection is replaced).
const REQUEST_TIMEOUT_SECS: u64 = 10;
/// Longest a server may take to answer its first `SendMessage` after being started.
const STARTUP_TIMEOUT_SECS: u64 = 30;
/// Pause between readiness probes while a server starts.
const STARTUP_POLL_MS: u64 = 100;
/// Pause before reconnecting after a failed connection, so a dead server is not spun on.
const RECONNECT_PAUSE_MS: u64 = 10;
/// Speed goals of issue #5: A over B at concurrency 16, and A over C at every concurrency.
const GOAL_A_OVER_B_AT_16: f64 = 50.0;
const GOAL_A_OVER_C: f64 = 0.5;
/// Goal of issue #17: the kit with tasks in memory (Am) at half bare axum's (C) rate at c=16.
const GOAL_MEMORY_OVER_C_AT_16: f64 = 0.5;
/// Goal of issue #12: authentication on costs at most 5% of A's requests per second.
const GOAL_AUTH_OVER_OPEN: f64 = 0.95;
/// Goals of issue #13: every span exported costs at most 10%, a 10% sampling ratio at most 2%.
const GOAL_TRACED_OVER_OPEN: f64 = 0.90;
const GOAL_TRACED_10_OVER_OPEN: f64 = 0.98;
/// Issue #38: the kit, its tasks in memory, against the official Rust SDK's in-memory store.
const GOAL_MEMORY_OVER_R_AT_16: f64 = 1.5;
/// Issue #38: the kit, its tasks durable (committed before the answer), against the same.
const GOAL_DURABLE_OVER_R_AT_16: f64 = 1.0;
/// Issue #38: the durable kit's p99 at concurrency 16, a saturating load, in milliseconds.
const GOAL_DURABLE_P99_AT_16_MS: f64 = 5.0;
/// The sampling ratio of T10.
const TRACE_RATIO_10: &str = "0.1";

/// Set in a re-executed child to the server it must run (`agent-kit` or `bare-axum`).
const SERVE_ENV: &str = "SEND_MESSAGE_BENCH_SERVE";
/// Set in the agent-kit child to its task store: a SQLite file, durable as an agent's default
/// (unset for Am, which has none).
const TASK_STORE_ENV: &str = "SEND_MESSAGE_BENCH_TASK_STORE";
/// Set in an agent-kit child to its `task_durability` when not the default (Ab, Am).
const TASK_DURABILITY_ENV: &str = "SEND_MESSAGE_BENCH_TASK_DURABILITY";
/// Set in an agent-kit child to the HS256 secret it verifies bearer tokens with (A').
const AUTH_SECRET_ENV: &str = "SEND_MESSAGE_BENCH_AUTH_SECRET";
/// The secret of A', and the subject of the token its requests carry.
const AUTH_SECRET: &str = "send-message-benchmark-secret-32-bytes-long";
const AUTH_SUBJECT: &str = "bench-user";
/// Set in the bare-axum child to the exact response body it answers with.
const BARE_BODY_ENV: &str = "SEND_MESSAGE_BENCH_BODY";
/// Interpreter for B unless `--python` says otherwise.
const PYTHON_ENV: &str = "MESH_A2A_PYTHON";
const PYTHON_DEFAULT: &str = "/work/venv/a2a-interop/bin/python";
/// B's agent script, kept with the interop tests, unless `--python-agent` says otherwise.
const PYTHON_AGENT_DEFAULT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/interop/echo_agent.py");

/// The text every request carries, and what every server must answer with.
const ECHO_TEXT: &str = "hello a2a";
const ECHO_REPLY: &str = "echo: hello a2a";
const COMPLETED: &str = "TASK_STATE_COMPLETED";

fn main() -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match std::env::var(SERVE_ENV) {
        Ok(role) => runtime.block_on(serve_child(&role)),
        Err(_) => runtime.block_on(run(Options::parse(std::env::args().skip(1))?)),
    }
}

#[derive(Debug)]
struct Options {
    measure: Duration,
    rounds: u32,
    python: PathBuf,
    python_agent: PathBuf,
    /// R's binary; built from `benches/a2a-rs-peer` when not given.
    rust_sdk: Option<PathBuf>,
    /// The servers measured; A always is.
    servers: Vec<Kind>,
    /// The concurrencies measured (all of [`CONCURRENCIES`] by default).
    concurrencies: Vec<usize>,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, BoxError> {
        let python = std::env::var_os(PYTHON_ENV).map_or_else(|| PYTHON_DEFAULT.into(), PathBuf::from);
        let mut options = Self {
            measure: Duration::from_secs(MEASURE_SECS_DEFAULT),
            rounds: ROUNDS_DEFAULT,
            python,
            python_agent: PYTHON_AGENT_DEFAULT.into(),
            rust_sdk: None,
            servers: Kind::ALL.to_vec(),
            concurrencies: CONCURRENCIES.to_vec(),
        };
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--seconds" => options.measure = Duration::from_secs(value()?.parse()?),
                "--rounds" => options.rounds = value()?.parse()?,
                "--python" => options.python = value()?.into(),
                "--python-agent" => options.python_agent = value()?.into(),
                "--rust-sdk" => options.rust_sdk = Some(value()?.into()),
                "--servers" => {
                    let mut servers = vec![Kind::AgentKit];
                    for name in value()?.split(',') {
                        let kind = Kind::ALL.into_iter().find(|kind| kind.letter() == name.trim());
                        servers.push(kind.ok_or_else(|| format!("--servers: unknown server {name:?}"))?);
                    }
                    options.servers = servers;
                }
                "--concurrency" => {
                    options.concurrencies = value()?
                        .split(',')
                        .map(|n| n.trim().parse().ok().filter(|n| CONCURRENCIES.contains(n)))
                        .collect::<Option<_>>()
                        .ok_or_else(|| format!("--concurrency: a comma-separated list of {CONCURRENCIES:?}"))?;
                }
                // Cargo passes `--bench` to every bench binary.
                "--bench" => {}
                _ => {
                    return Err(format!(
                        "unknown argument {arg}; expected --seconds N, --rounds R, --python PATH, --python-agent SCRIPT, \
                         --rust-sdk BINARY, --servers Ab,Am,B,R,C,A',T,T10,G, --concurrency 1,16,64"
                    )
                    .into());
                }
            }
        }
        if options.measure.is_zero() || options.rounds == 0 {
            return Err("--seconds and --rounds must be at least 1".into());
        }
        Ok(options)
    }
}

// ---------------------------------------------------------------------------------------------
// The servers

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    AgentKit,
    AgentKitBuffered,
    AgentKitMemory,
    PythonSdk,
    RustSdk,
    BareAxum,
    AgentKitAuth,
    AgentKitTraced,
    AgentKitTraced10,
    AgentKitGrpc,
}

impl Kind {
    const ALL: [Self; 10] = [
        Self::AgentKit,
        Self::AgentKitBuffered,
        Self::AgentKitMemory,
        Self::PythonSdk,
        Self::RustSdk,
        Self::BareAxum,
        Self::AgentKitAuth,
        Self::AgentKitTraced,
        Self::AgentKitTraced10,
        Self::AgentKitGrpc,
    ];

    /// The name `--servers` knows the server by: the first word of its label.
    fn letter(self) -> &'static str {
        self.label().split(' ').next().unwrap_or_default()
    }

    fn label(self) -> &'static str {
        match self {
            Self::AgentKit => "A agent kit",
            Self::AgentKitBuffered => "Ab kit buffered",
            Self::AgentKitMemory => "Am kit memory",
            Self::PythonSdk => "B Python SDK",
            Self::RustSdk => "R Rust SDK",
            Self::BareAxum => "C bare axum",
            Self::AgentKitAuth => "A' kit + JWT",
            Self::AgentKitTraced => "T kit traced",
            Self::AgentKitTraced10 => "T10 kit 10%",
            Self::AgentKitGrpc => "G kit gRPC",
        }
    }
}

/// A server process, killed when dropped (also when the benchmark fails half-way).
#[derive(Debug)]
struct Server {
    kind: Kind,
    target: Target,
    process: Child,
}

/// Where a server listens, the bearer credential its requests carry (A' only), and whether they
/// go over gRPC (G only) rather than JSON-RPC.
#[derive(Debug, Clone)]
struct Target {
    addr: SocketAddr,
    bearer: Option<std::sync::Arc<str>>,
    grpc: bool,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A, Ab, Am, A' or C: this binary re-executed as a server, given its `settings` (variable, value) in
/// the environment; it prints its address on its first line.
fn start_rust(kind: Kind, settings: &[(&str, &str)], bearer: Option<String>) -> Result<Server, BoxError> {
    let role = if kind == Kind::BareAxum { "bare-axum" } else { "agent-kit" };
    let mut process = Command::new(std::env::current_exe()?)
        .env(SERVE_ENV, role)
        .envs(settings.iter().copied())
        .stdin(Stdio::null())
        // The request log lines of the kit servers: written, as in production, and discarded.
        .stderr(if kind == Kind::BareAxum { Stdio::inherit() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    let stdout = process.stdout.take().ok_or("no stdout from the server process")?;
    BufReader::new(stdout).read_line(&mut line)?;
    let addr = line.trim().parse().map_err(|e| format!("{role}: no address on its first line ({e}): {line:?}"))?;
    let target = Target { addr, bearer: bearer.map(Into::into), grpc: kind == Kind::AgentKitGrpc };
    Ok(Server { kind, target, process })
}

/// B: the SDK's echo agent on a free port, or why it cannot run.
fn start_python(options: &Options) -> Result<Server, String> {
    let sdk = Command::new(&options.python).args(["-c", "import a2a, uvicorn"]).stderr(Stdio::null()).status();
    if !sdk.is_ok_and(|status| status.success()) {
        return Err(format!("{} cannot import a2a and uvicorn", options.python.display()));
    }
    if !options.python_agent.is_file() {
        return Err(format!("no agent script at {}", options.python_agent.display()));
    }
    // The port is picked here and handed over; another process taking it meanwhile is unlikely
    // and would show as a startup failure.
    let addr = StdTcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?;
    let process = Command::new(&options.python)
        .arg(&options.python_agent)
        .args(["--port", &addr.port().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", options.python.display()))?;
    Ok(Server { kind: Kind::PythonSdk, target: Target { addr, bearer: None, grpc: false }, process })
}

/// R's binary: `--rust-sdk`, or `benches/a2a-rs-peer` built now (release, into a target directory
/// of its own beside this bench's), or why it cannot run.
fn rust_sdk_binary(options: &Options) -> Result<PathBuf, String> {
    if let Some(binary) = &options.rust_sdk {
        return Ok(binary.clone());
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/a2a-rs-peer/Cargo.toml");
    // This bench runs from <target>/<profile>/deps/.
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let target = exe.ancestors().nth(3).ok_or("no target directory above the bench")?.join("a2a-rs-peer");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    println!("Building R (the official Rust SDK's echo agent) into {} ...", target.display());
    let built = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cargo: {e}"))?;
    if !built.success() {
        return Err(format!("cargo build --manifest-path {} failed: {built}", manifest.display()));
    }
    Ok(target.join("release/a2a-rs-peer"))
}

/// R: the official Rust SDK's echo agent, a process of its own printing its address first.
fn start_rust_sdk(binary: &std::path::Path) -> Result<Server, BoxError> {
    let mut process = Command::new(binary).stdin(Stdio::null()).stdout(Stdio::piped()).spawn()?;
    let mut line = String::new();
    let stdout = process.stdout.take().ok_or("no stdout from R")?;
    BufReader::new(stdout).read_line(&mut line)?;
    let addr = line.trim().parse().map_err(|e| format!("R: no address on its first line ({e}): {line:?}"))?;
    Ok(Server { kind: Kind::RustSdk, target: Target { addr, bearer: None, grpc: false }, process })
}

/// Runs the server a child was re-executed for, until it is killed.
async fn serve_child(role: &str) -> Result<(), BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let router = match role {
        "agent-kit" => return serve_agent_kit().await,
        "bare-axum" => {
            let body = Bytes::from(std::env::var(BARE_BODY_ENV)?);
            // Takes the body as bytes so the request is read in full, as A reads it, and parses nothing.
            Router::new().route(
                "/",
                post(move |_request: Bytes| {
                    let body = body.clone();
                    async move { ([(CONTENT_TYPE, "application/json")], body) }
                }),
            )
        }
        _ => return Err(format!("unknown {SERVE_ENV}={role}").into()),
    };
    announce(&listener.local_addr()?.to_string())?;
    axum::serve(listener, router).await?;
    Ok(())
}

async fn serve_agent_kit() -> Result<(), BoxError> {
    // As an agent binary does: tracing when the OTEL_* variables name an endpoint.
    mesh_telemetry::init(mesh_telemetry::LogFormat::Text);
    let card: AgentCard = serde_json::from_value(json!({
        "name": "Echo Agent",
        "description": "Echoes text back",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "Echo input", "tags": ["echo"]}]
    }))?;
    let mut config = AgentConfig {
        port: 0,
        registry_url: None,
        task_store_url: std::env::var(TASK_STORE_ENV).ok(),
        // Throughput is measured here, not the per-tenant limiter (one tenant sends everything).
        rate_limit_per_s: 0,
        ..AgentConfig::default()
    };
    config.auth.jwt_hs256_secret = std::env::var(AUTH_SECRET_ENV).ok();
    if let Ok(durability) = std::env::var(TASK_DURABILITY_ENV) {
        config.task_durability = TaskDurability::try_from(durability)?;
    }
    let app = AgentApp::build(&config, card, Echo, HttpClient::with_reqwest()?).await?;
    announce(app.url().trim_start_matches("http://"))?;
    app.run_until_stopped(std::future::pending()).await?;
    Ok(())
}

/// A' clients' token: a user, valid for the whole run.
fn bench_token() -> Result<String, BoxError> {
    let claims = mesh_auth::Claims::new(AUTH_SUBJECT, "", &[mesh_auth::Role::User], 24 * 3600);
    Ok(mesh_auth::mint_hs256(AUTH_SECRET.as_bytes(), &claims)?)
}

/// The first stdout line of a server child: the address the parent connects to.
fn announce(addr: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{addr}")?;
    stdout.flush()
}

/// A's handler: the same answer as the SDK's echo agent.
#[derive(Debug)]
struct Echo;

impl AgentHandler for Echo {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        Ok(AgentReply { parts: vec![Part::Text { text: format!("echo: {}", task.text) }], ..AgentReply::default() })
    }
}

// ---------------------------------------------------------------------------------------------
// The load generator

/// The `SendMessage` request the official Python client sends (captured), with fresh ids: the
/// servers keep tasks, and a repeated message id could be answered differently.
fn send_message_body() -> Bytes {
    let (message_id, request_id) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    Bytes::from(format!(
        r#"{{"method":"SendMessage","params":{{"message":{{"messageId":"{message_id}","role":"ROLE_USER","parts":[{{"text":"{ECHO_TEXT}"}}]}},"configuration":{{}}}},"id":"{request_id}","jsonrpc":"2.0"}}"#
    ))
}

/// The parts of a `SendMessage` answer that are checked; borrowed, so checking costs the load
/// generator (which shares the cores with the server) as little as possible.
#[derive(Debug, Deserialize)]
struct Reply<'a> {
    #[serde(borrow)]
    result: Option<ReplyResult<'a>>,
}

#[derive(Debug, Deserialize)]
struct ReplyResult<'a> {
    #[serde(borrow)]
    task: Option<ReplyTask<'a>>,
}

#[derive(Debug, Deserialize)]
struct ReplyTask<'a> {
    #[serde(borrow)]
    status: ReplyStatus<'a>,
    #[serde(borrow, default)]
    artifacts: Vec<ReplyArtifact<'a>>,
}

#[derive(Debug, Deserialize)]
struct ReplyStatus<'a> {
    state: &'a str,
}

#[derive(Debug, Deserialize)]
struct ReplyArtifact<'a> {
    #[serde(borrow)]
    parts: Vec<ReplyPart<'a>>,
}

#[derive(Debug, Deserialize)]
struct ReplyPart<'a> {
    text: Option<&'a str>,
}

/// Why an answer does not count: not 200 (not OK in gRPC), not a JSON-RPC result (a
/// `SendMessageResponse`) holding a completed task, or not the echo.
fn check(answer: &Answer) -> Result<(), String> {
    let (status, body, grpc_task) = match answer {
        Answer::JsonRpc(status, body) => (*status, body.as_ref(), None),
        Answer::Grpc(Ok(response)) => (StatusCode::OK, &[][..], Some(response)),
        Answer::Grpc(Err(status)) => return Err(format!("gRPC {:?}: {}", status.code(), status.message())),
    };
    let excerpt = || match grpc_task {
        Some(response) => response.to_string(),
        None => String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
    };
    if status != StatusCode::OK {
        return Err(format!("HTTP {status}: {}", excerpt()));
    }
    let task = match grpc_task {
        Some(response) => {
            ReplyTask::deserialize(&response["task"]).map_err(|e| format!("no task ({e}): {}", excerpt()))?
        }
        None => {
            let reply: Reply =
                serde_json::from_slice(body).map_err(|e| format!("unparsed answer ({e}): {}", excerpt()))?;
            reply.result.and_then(|r| r.task).ok_or_else(|| format!("no result.task: {}", excerpt()))?
        }
    };
    if task.status.state != COMPLETED {
        return Err(format!("task in state {}: {}", task.status.state, excerpt()));
    }
    let texts = task.artifacts.iter().flat_map(|a| &a.parts).filter_map(|p| p.text);
    if !texts.into_iter().any(|text| text == ECHO_REPLY) {
        return Err(format!("no artifact text {ECHO_REPLY:?}: {}", excerpt()));
    }
    Ok(())
}

/// An answer as the load generator reads it: JSON-RPC's status and body, or gRPC's
/// `SendMessageResponse` in ProtoJSON (or its error status).
#[derive(Debug)]
enum Answer {
    JsonRpc(StatusCode, Bytes),
    Grpc(Result<serde_json::Value, tonic::Status>),
}

/// One keep-alive connection to a server, as one concurrent worker uses it: HTTP/1.1 for
/// JSON-RPC, a gRPC channel (one HTTP/2 connection) for G.
#[derive(Debug)]
enum Connection {
    JsonRpc(JsonRpcConnection),
    Grpc(mesh_a2a_grpc::GrpcClient),
}

impl Connection {
    async fn open(target: &Target) -> Result<Self, BoxError> {
        Ok(match target.grpc {
            true => Self::Grpc(mesh_a2a_grpc::GrpcClient::connect(&target.addr.to_string()).await?),
            false => Self::JsonRpc(JsonRpcConnection::open(target).await?),
        })
    }

    /// Sends one `SendMessage` and returns the answer.
    async fn send(&mut self) -> Result<Answer, BoxError> {
        match self {
            Self::JsonRpc(connection) => {
                let (status, body) = connection.send().await?;
                Ok(Answer::JsonRpc(status, body))
            }
            Self::Grpc(client) => {
                let request = json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
                    "parts": [{"text": ECHO_TEXT}]}, "configuration": {}});
                Ok(Answer::Grpc(client.unary("SendMessage", request, &[("a2a-version", "1.0")]).await))
            }
        }
    }
}

/// One keep-alive HTTP/1.1 connection to a server.
#[derive(Debug)]
struct JsonRpcConnection {
    sender: SendRequest<Full<Bytes>>,
    host: String,
    authorization: Option<String>,
}

impl JsonRpcConnection {
    async fn open(target: &Target) -> Result<Self, BoxError> {
        let addr = target.addr;
        let stream = TcpStream::connect(addr).await?;
        // Requests are small and answered one at a time: Nagle would only add delay.
        stream.set_nodelay(true)?;
        let (sender, connection) = handshake(TokioIo::new(stream)).await?;
        // Drives the connection; it ends when the sender is dropped.
        tokio::spawn(connection);
        let authorization = target.bearer.as_ref().map(|token| format!("Bearer {token}"));
        Ok(Self { sender, host: addr.to_string(), authorization })
    }

    /// Sends one `SendMessage` and returns the answer's status and body.
    async fn send(&mut self) -> Result<(StatusCode, Bytes), BoxError> {
        let mut request = Request::post("/")
            .header(HOST, &self.host)
            .header(CONTENT_TYPE, "application/json")
            .header("a2a-version", "1.0");
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        let request = request.body(Full::new(send_message_body()))?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        Ok((status, response.into_body().collect().await?.to_bytes()))
    }
}

/// Sends one `SendMessage` on a new connection and returns the checked answer's body.
async fn probe(target: &Target) -> Result<Bytes, String> {
    let mut connection = Connection::open(target).await.map_err(|e| e.to_string())?;
    let answer = connection.send().await.map_err(|e| e.to_string())?;
    check(&answer)?;
    Ok(match answer {
        Answer::JsonRpc(_, body) => body,
        Answer::Grpc(response) => Bytes::from(response.map_err(|e| e.to_string())?.to_string()),
    })
}

/// Waits until `server` accepts connections (B needs seconds to start), then probes it once.
async fn ready(server: &mut Server) -> Result<Bytes, BoxError> {
    let label = server.kind.label();
    let deadline = Instant::now() + Duration::from_secs(STARTUP_TIMEOUT_SECS);
    while TcpStream::connect(server.target.addr).await.is_err() {
        if let Some(exit) = server.process.try_wait()? {
            return Err(format!("{label} exited at startup: {exit}").into());
        }
        if Instant::now() >= deadline {
            return Err(format!("{label} did not listen within {STARTUP_TIMEOUT_SECS} s").into());
        }
        tokio::time::sleep(Duration::from_millis(STARTUP_POLL_MS)).await;
    }
    Ok(probe(&server.target).await.map_err(|e| format!("{label} answered SendMessage wrongly: {e}"))?)
}

/// What one worker, or one cell, or all rounds of a server at one concurrency measured.
#[derive(Debug, Default)]
struct Sample {
    /// Latencies of the good answers inside the measured window, in nanoseconds.
    latencies_ns: Vec<u64>,
    errors: usize,
    first_error: Option<String>,
    /// Length of the measured window(s).
    window: Duration,
    /// Requests per second of each round, to show the spread.
    round_rates: Vec<f64>,
    /// CPU time over the measured window(s), in seconds: the server's and this load generator's.
    cpu_s: CpuTime,
}

/// CPU time of the server under test and of the load generator (this process).
#[derive(Debug, Default, Clone, Copy)]
struct CpuTime {
    server_s: f64,
    client_s: f64,
}

impl CpuTime {
    fn read(server_pid: u32) -> std::io::Result<Self> {
        Ok(Self {
            server_s: support::process_cpu_s(server_pid)?,
            client_s: support::process_cpu_s(std::process::id())?,
        })
    }
}

impl Sample {
    fn fail(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }

    fn absorb(&mut self, other: Self) {
        self.latencies_ns.extend(other.latencies_ns);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    fn rate(&self) -> f64 {
        self.latencies_ns.len() as f64 / self.window.as_secs_f64()
    }

    /// CPU time per answered request in microseconds: the server's and the load generator's.
    fn cpu_per_request_us(&self) -> (f64, f64) {
        let requests = self.latencies_ns.len().max(1) as f64;
        (self.cpu_s.server_s * 1e6 / requests, self.cpu_s.client_s * 1e6 / requests)
    }

    /// Nearest-rank percentile in milliseconds; `latencies_ns` must be sorted.
    fn percentile_ms(&self, fraction: f64) -> f64 {
        let rank = ((fraction * self.latencies_ns.len() as f64).ceil() as usize).max(1);
        self.latencies_ns.get(rank - 1).map_or(f64::NAN, |&ns| ns as f64 / 1e6)
    }
}

/// Runs `concurrency` workers against `server`: a warm-up, then `measure` recorded, with the CPU
/// time the server and the load generator used in that window.
async fn measure_cell(server: &Server, concurrency: usize, measure: Duration) -> Result<Sample, BoxError> {
    let window_start = Instant::now() + Duration::from_secs(WARM_UP_SECS);
    let window_end = window_start + measure;
    let workers: Vec<_> =
        (0..concurrency).map(|_| tokio::spawn(worker(server.target.clone(), window_start, window_end))).collect();
    let pid = server.process.id();
    tokio::time::sleep_until(window_start.into()).await;
    let before = CpuTime::read(pid)?;
    tokio::time::sleep_until(window_end.into()).await;
    let after = CpuTime::read(pid)?;
    let cpu_s = CpuTime { server_s: after.server_s - before.server_s, client_s: after.client_s - before.client_s };
    let mut cell = Sample { window: measure, cpu_s, ..Sample::default() };
    for worker in workers {
        match worker.await {
            Ok(sample) => cell.absorb(sample),
            Err(panic) => cell.fail(format!("worker failed: {panic}")),
        }
    }
    Ok(cell)
}

/// One concurrent client: requests back to back on one connection, replaced when it fails.
/// Records the requests sent and answered inside [window_start, window_end].
async fn worker(target: Target, window_start: Instant, window_end: Instant) -> Sample {
    let mut sample = Sample::default();
    let mut connection: Option<Connection> = None;
    let timeout = Duration::from_secs(REQUEST_TIMEOUT_SECS);
    while Instant::now() < window_end {
        let open = match connection.as_mut() {
            Some(open) => open,
            None => match Connection::open(&target).await {
                Ok(opened) => connection.insert(opened),
                Err(error) => {
                    sample.fail(format!("connect: {error}"));
                    tokio::time::sleep(Duration::from_millis(RECONNECT_PAUSE_MS)).await;
                    continue;
                }
            },
        };
        let sent = Instant::now();
        let answer = tokio::time::timeout(timeout, open.send()).await;
        let answered = Instant::now();
        let recorded = sent >= window_start && answered <= window_end;
        let outcome = match answer {
            Ok(Ok(answer)) => check(&answer),
            Ok(Err(error)) => {
                connection = None;
                Err(format!("request: {error}"))
            }
            Err(_) => {
                connection = None;
                Err(format!("no answer within {REQUEST_TIMEOUT_SECS} s"))
            }
        };
        match outcome {
            Ok(()) if recorded => sample.latencies_ns.push(answered.duration_since(sent).as_nanos() as u64),
            Ok(()) => {}
            // Failures count wherever they happen: a server failing only in the warm-up is still failing.
            Err(error) => sample.fail(error),
        }
    }
    sample
}

// ---------------------------------------------------------------------------------------------
// The run

async fn run(options: Options) -> Result<(), BoxError> {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "SendMessage (JSON-RPC, A2A 1.0; G over gRPC) benchmark: {} s measured per cell after {WARM_UP_SECS} s of warm-up, {} round(s), \
         concurrency {:?}, one keep-alive HTTP/1.1 connection per concurrent request.",
        options.measure.as_secs(),
        options.rounds,
        options.concurrencies,
    );
    println!(
        "This machine has {cores} logical core(s), shared by the load generator and the server under test \
         (each server in its own process, A and C on multi-thread tokio runtimes, B on one uvicorn worker): \
         absolute figures are what is left after the client's share; compare ratios."
    );
    println!(
        "A keeps its tasks in a SQLite file (WAL), as an agent's default store does: each answer waits for its commit. \
         Ab keeps them in a file of its own, answering before the commit (flushed every {} ms); Am in memory alone.",
        mesh_tasks::TASK_FLUSH_INTERVAL_MS_DEFAULT
    );

    // Declared before the servers so it is removed after A has been stopped.
    let tasks_dir = tempfile::tempdir()?;
    let tasks_url = format!("sqlite://{}", tasks_dir.path().join("tasks.db").display());
    let mut servers = Vec::new();
    let mut a = start_rust(Kind::AgentKit, &[(TASK_STORE_ENV, &tasks_url)], None)?;
    let a_reply = ready(&mut a).await?;
    servers.push(a);
    let measured = |kind| options.servers.contains(&kind);
    if measured(Kind::AgentKitBuffered) {
        let buffered_tasks_url = format!("sqlite://{}", tasks_dir.path().join("tasks-buffered.db").display());
        let settings = [(TASK_STORE_ENV, buffered_tasks_url.as_str()), (TASK_DURABILITY_ENV, "buffered")];
        let mut buffered = start_rust(Kind::AgentKitBuffered, &settings, None)?;
        ready(&mut buffered).await?;
        servers.push(buffered);
    }
    if measured(Kind::AgentKitMemory) {
        let mut memory = start_rust(Kind::AgentKitMemory, &[(TASK_DURABILITY_ENV, "memory")], None)?;
        ready(&mut memory).await?;
        servers.push(memory);
    }
    if measured(Kind::AgentKitAuth) {
        // A' keeps its tasks in a file of its own, so the two never contend for one database.
        let auth_tasks_url = format!("sqlite://{}", tasks_dir.path().join("tasks-auth.db").display());
        let token = bench_token()?;
        let settings = [(TASK_STORE_ENV, auth_tasks_url.as_str()), (AUTH_SECRET_ENV, AUTH_SECRET)];
        let mut a_auth = start_rust(Kind::AgentKitAuth, &settings, Some(token))?;
        ready(&mut a_auth).await?;
        servers.push(a_auth);
    }
    // T and T10 export to a receiver in this process, which counts what it is sent.
    let receiver = OtlpSink::start().await?;
    let traced = [
        (Kind::AgentKitTraced, "1.0", "tasks-traced.db"),
        (Kind::AgentKitTraced10, TRACE_RATIO_10, "tasks-traced-10.db"),
    ];
    for (kind, ratio, file) in traced.into_iter().filter(|(kind, ..)| measured(*kind)) {
        let store = format!("sqlite://{}", tasks_dir.path().join(file).display());
        let settings = [
            (TASK_STORE_ENV, store.as_str()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
            ("OTEL_SERVICE_NAME", "send-message-bench"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", ratio),
            // Tracing alone is measured: the OTLP metrics the same endpoint would turn on stay off.
            ("OTEL_METRICS_EXPORTER", "none"),
        ];
        let mut traced = start_rust(kind, &settings, None)?;
        ready(&mut traced).await?;
        servers.push(traced);
    }
    if measured(Kind::AgentKitGrpc) {
        // G keeps its tasks in a file of its own, as A' does.
        let grpc_tasks_url = format!("sqlite://{}", tasks_dir.path().join("tasks-grpc.db").display());
        let mut g = start_rust(Kind::AgentKitGrpc, &[(TASK_STORE_ENV, grpc_tasks_url.as_str())], None)?;
        ready(&mut g).await?;
        servers.push(g);
    }
    if measured(Kind::BareAxum) {
        let mut c = start_rust(Kind::BareAxum, &[(BARE_BODY_ENV, std::str::from_utf8(&a_reply)?)], None)?;
        let c_reply = ready(&mut c).await?;
        assert_eq!(c_reply, a_reply, "C must answer A's bytes");
        servers.push(c);
    }
    if measured(Kind::PythonSdk) {
        match start_python(&options) {
            Ok(mut b) => {
                ready(&mut b).await?;
                servers.push(b);
            }
            Err(reason) => println!("B (the Python SDK) is not measured: {reason}."),
        }
    }
    let rust_sdk = if measured(Kind::RustSdk) {
        match rust_sdk_binary(&options) {
            Ok(binary) => {
                let mut r = start_rust_sdk(&binary)?;
                ready(&mut r).await?;
                servers.push(r);
                Some(binary)
            }
            Err(reason) => {
                println!("R (the Rust SDK) is not measured: {reason}.");
                None
            }
        }
    } else {
        None
    };
    servers.sort_by_key(|server| server.kind);
    println!("C answers A's response, {} bytes: {}", a_reply.len(), String::from_utf8_lossy(&a_reply));

    let mut results: BTreeMap<(Kind, usize), Sample> = BTreeMap::new();
    for round in 1..=options.rounds {
        for &concurrency in &options.concurrencies {
            for server in &mut servers {
                if let (Kind::RustSdk, Some(binary)) = (server.kind, &rust_sdk) {
                    // Its store keeps every task it ever made: each cell starts from an empty one.
                    *server = start_rust_sdk(binary)?;
                    ready(server).await?;
                }
                let cell = measure_cell(server, concurrency, options.measure).await?;
                let rate = cell.rate();
                eprintln!(
                    "round {round}, c={concurrency:>2}, {:<12}: {rate:>9.0} req/s, {} error(s) (process {})",
                    server.kind.label(),
                    cell.errors,
                    server.process.id()
                );
                let total = results.entry((server.kind, concurrency)).or_default();
                total.window += cell.window;
                total.round_rates.push(rate);
                total.cpu_s.server_s += cell.cpu_s.server_s;
                total.cpu_s.client_s += cell.cpu_s.client_s;
                total.absorb(cell);
            }
        }
    }
    report(&mut results);
    let (exports, bytes) = receiver.received();
    println!("The OTLP receiver got {exports} export request(s), {bytes} bytes of spans, from T and T10.");
    if exports == 0 && traced.iter().any(|(kind, ..)| measured(*kind)) {
        return Err("T and T10 exported no spans: their tracing is not on, so T/A measured nothing".into());
    }
    Ok(())
}

fn report(results: &mut BTreeMap<(Kind, usize), Sample>) {
    println!();
    println!(
        "| server | concurrency | req/s | p50 ms | p99 ms | server CPU us/req | load generator CPU us/req | errors | req/s per round |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for concurrency in CONCURRENCIES {
        for ((kind, _), sample) in results.iter_mut().filter(|((_, c), _)| *c == concurrency) {
            sample.latencies_ns.sort_unstable();
            let rounds: Vec<String> = sample.round_rates.iter().map(|rate| format!("{rate:.0}")).collect();
            let (server_us, client_us) = sample.cpu_per_request_us();
            println!(
                "| {} | {concurrency} | {:.0} | {:.3} | {:.3} | {server_us:.1} | {client_us:.1} | {} | {} |",
                kind.label(),
                sample.rate(),
                sample.percentile_ms(0.50),
                sample.percentile_ms(0.99),
                sample.errors,
                rounds.join(", "),
            );
        }
    }
    println!();
    println!("| concurrency | A/B req/s | A/C req/s | A'/A req/s | T/A req/s | T10/A req/s | G/A req/s |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let rate = |kind, concurrency| results.get(&(kind, concurrency)).map(Sample::rate);
    let ratio = |over, concurrency| Some(rate(Kind::AgentKit, concurrency)? / rate(over, concurrency)?);
    let over_a = |kind, concurrency| Some(rate(kind, concurrency)? / rate(Kind::AgentKit, concurrency)?);
    let auth_ratio = |concurrency| over_a(Kind::AgentKitAuth, concurrency);
    let shown = |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    for concurrency in CONCURRENCIES {
        let (a_over_b, a_over_c) = (ratio(Kind::PythonSdk, concurrency), ratio(Kind::BareAxum, concurrency));
        let (auth, traced) = (auth_ratio(concurrency), over_a(Kind::AgentKitTraced, concurrency));
        let traced_10 = over_a(Kind::AgentKitTraced10, concurrency);
        println!(
            "| {concurrency} | {} | {} | {} | {} | {} | {} |",
            shown(a_over_b),
            shown(a_over_c),
            shown(auth),
            shown(traced),
            shown(traced_10),
            shown(over_a(Kind::AgentKitGrpc, concurrency)),
        );
    }
    println!();
    println!("| concurrency | Ab/A req/s | Am/A req/s | Ab/B req/s | Am/B req/s | Ab/C req/s | Am/C req/s |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let over = |kind, base, concurrency| Some(rate(kind, concurrency)? / rate(base, concurrency)?);
    for concurrency in CONCURRENCIES {
        let cells: Vec<String> = [Kind::AgentKit, Kind::PythonSdk, Kind::BareAxum]
            .into_iter()
            .flat_map(|base| [Kind::AgentKitBuffered, Kind::AgentKitMemory].map(|kind| over(kind, base, concurrency)))
            .map(shown)
            .collect();
        println!("| {concurrency} | {} |", cells.join(" | "));
    }
    println!();
    println!("| concurrency | A/R req/s | Ab/R req/s | Am/R req/s | G/R req/s |");
    println!("|---:|---:|---:|---:|---:|");
    for concurrency in CONCURRENCIES {
        let cells: Vec<String> = [Kind::AgentKit, Kind::AgentKitBuffered, Kind::AgentKitMemory, Kind::AgentKitGrpc]
            .map(|kind| shown(over(kind, Kind::RustSdk, concurrency)))
            .into();
        println!("| {concurrency} | {} |", cells.join(" | "));
    }
    println!();
    let goal = |name: String, value: Option<f64>, floor: f64| match value {
        Some(v) => println!("Goal {name} >= {floor}: {} ({v:.2}).", if v >= floor { "met" } else { "NOT met" }),
        None => println!("Goal {name} >= {floor}: not measured."),
    };
    goal("A/B at c=16".to_owned(), ratio(Kind::PythonSdk, 16), GOAL_A_OVER_B_AT_16);
    goal("Am/R at c=16".to_owned(), over(Kind::AgentKitMemory, Kind::RustSdk, 16), GOAL_MEMORY_OVER_R_AT_16);
    goal("A/R at c=16 (A durable)".to_owned(), ratio(Kind::RustSdk, 16), GOAL_DURABLE_OVER_R_AT_16);
    match results.get(&(Kind::AgentKit, 16)).map(|sample| sample.percentile_ms(0.99)) {
        Some(p99) => println!(
            "Goal A's p99 at c=16 <= {GOAL_DURABLE_P99_AT_16_MS} ms: {} ({p99:.2} ms).",
            if p99 <= GOAL_DURABLE_P99_AT_16_MS { "met" } else { "NOT met" }
        ),
        None => println!("Goal A's p99 at c=16 <= {GOAL_DURABLE_P99_AT_16_MS} ms: not measured."),
    }
    let memory_over_c = over(Kind::AgentKitMemory, Kind::BareAxum, 16);
    goal("Am/C at c=16".to_owned(), memory_over_c, GOAL_MEMORY_OVER_C_AT_16);
    for concurrency in CONCURRENCIES {
        goal(format!("A/C at c={concurrency}"), ratio(Kind::BareAxum, concurrency), GOAL_A_OVER_C);
    }
    for concurrency in CONCURRENCIES {
        goal(format!("A'/A at c={concurrency}"), auth_ratio(concurrency), GOAL_AUTH_OVER_OPEN);
        goal(format!("T/A at c={concurrency}"), over_a(Kind::AgentKitTraced, concurrency), GOAL_TRACED_OVER_OPEN);
        let traced_10 = over_a(Kind::AgentKitTraced10, concurrency);
        goal(format!("T10/A at c={concurrency}"), traced_10, GOAL_TRACED_10_OVER_OPEN);
    }
    for ((kind, concurrency), sample) in results.iter() {
        if let Some(error) = &sample.first_error {
            println!("{} at c={concurrency}: {} failed request(s), first: {error}", kind.label(), sample.errors);
        }
    }
}
