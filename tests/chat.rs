//! `a2a-mesh chat AGENT`: the command a person types lines into. A real UI agent on port 0, a
//! registry holding the agent's name (the UI agent opens sockets only to registered agents) and
//! a participant answering on the embedded log (a SQLite file of the test's own) stand for the
//! suite, so the command is checked as a person uses it: lines in on stdin, answers out on
//! stdout, in order, and an exit once every line has its answer.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use mesh_bus::{Answerer, BusConfig, BusError, BusRecord, ChatMessage, Participant, ParticipantSettings};
use mesh_docmem::Node;
use ui_agent::{UiAgent, UiAgentConfig};

/// The agent type the command talks to; its instance is the UI agent's default (`1`).
const AGENT: &str = "echo";

/// Answers every message with its text, marked, so an answer shows which line it is for.
struct Echo;

impl Answerer for Echo {
    async fn answer(&self, _: &BusRecord, node: &Node, _: Vec<ChatMessage>) -> Result<Option<String>, BusError> {
        Ok(Some(format!("heard: {}", node.content)))
    }
}

/// Runs `a2a-mesh chat ARGS` in a directory of its own (so it finds no generated credential),
/// with `input` as its whole stdin.
fn chat(args: &[&str], input: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_a2a-mesh"))
        .arg("chat")
        .args(args)
        .current_dir(dir.path())
        // An error's backtrace (when RUST_BACKTRACE is set) takes seconds to symbolize in a debug
        // build, and is not what a person reads.
        .env("RUST_LIB_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_prints_each_lines_answer_in_order_and_exits_once_all_are_answered() {
    let data = tempfile::tempdir().unwrap();
    let bus_config = BusConfig {
        database_url: format!("sqlite://{}", data.path().join("bus.db").display()),
        ..BusConfig::default()
    };
    let registry = registry::Application::build(&registry::RegistryConfig {
        port: 0,
        database_url: format!("sqlite://{}", data.path().join("registry.db").display()),
        // The name is served by the bus participant below only: no card to fetch.
        verify_registrations: false,
        ..registry::RegistryConfig::default()
    })
    .await
    .unwrap();
    let registry_url = registry.url();
    let (stop_registry, registry_stopped) = tokio::sync::oneshot::channel::<()>();
    let registry_run = tokio::spawn(registry.run_until_stopped(async {
        let _ = registry_stopped.await;
    }));
    let registered = reqwest::Client::new()
        .post(format!("{registry_url}/register"))
        .json(&serde_json::json!({"name": AGENT, "url": "http://127.0.0.1:9", "capabilities": ["echo"]}))
        .send()
        .await
        .unwrap();
    assert!(registered.status().is_success(), "{}", registered.text().await.unwrap());
    // No draining time at its stop: no load balancer to warn.
    let ui_config = UiAgentConfig {
        port: 0,
        bus: bus_config.clone(),
        shutdown_unready_ms: 0,
        registry_url: Some(registry_url),
        ..UiAgentConfig::default()
    };
    let ui = UiAgent::build(&ui_config).await.unwrap();
    let ui_url = ui.url().to_owned();
    let (stop_ui, ui_stopped) = tokio::sync::oneshot::channel::<()>();
    let ui_run = tokio::spawn(ui.run_until_stopped(async {
        let _ = ui_stopped.await;
    }));
    let (bus, docmem) = mesh_bus::open_bus(&bus_config).await.unwrap();
    let echo_id = mesh_bus::agent_id(AGENT, &bus_config.instance_id);
    let settings = ParticipantSettings {
        topic: mesh_bus::agent_topic(&echo_id),
        agent_id: echo_id,
        service: AGENT.into(),
        cache_conversations_max: bus_config.cache_conversations_max().unwrap(),
    };
    let (stop_echo, echo_stopped) = tokio::sync::oneshot::channel::<()>();
    let echo = tokio::spawn(Participant::new(settings, bus, docmem, Arc::new(Echo)).run_until(async {
        let _ = echo_stopped.await;
    }));

    // A blank line is no message: it is owed no answer, and the command does not wait for one.
    let output =
        tokio::task::spawn_blocking(move || chat(&[AGENT, "--ui-url", &ui_url], "first line\n\n  \nsecond line\n"))
            .await
            .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout, "echo> heard: first line\necho> heard: second line\n", "{stderr}");
    // The conversation's id, to resume it with --conversation, is told on stderr (not mixed with
    // the answers a script may read).
    assert!(stderr.contains("--conversation "), "{stderr}");

    stop_echo.send(()).unwrap();
    echo.await.unwrap();
    stop_ui.send(()).unwrap();
    ui_run.await.unwrap().unwrap();
    stop_registry.send(()).unwrap();
    registry_run.await.unwrap().unwrap();
}

#[test]
fn chat_without_a_ui_agent_fails_saying_which_address_and_what_to_start() {
    // A port nothing listens on: bound, then freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let output = chat(&[AGENT, "--ui-url", &format!("http://127.0.0.1:{port}")], "hello\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(output.stdout.is_empty(), "{}", String::from_utf8_lossy(&output.stdout));
    assert!(stderr.contains(&format!("ws://127.0.0.1:{port}/ws?agent={AGENT}")), "{stderr}");
    assert!(stderr.contains("is `a2a-mesh up` running?"), "{stderr}");
}
