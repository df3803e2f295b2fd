//! End to end: `a2a-mesh up` starts the suite, `a2a-mesh ask` gets an answer from it, and `up`
//! stops cleanly on Ctrl-C (SIGINT).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Longest the suite may take to print that it is up, or to stop after SIGINT. A bound on a
/// hang, not a speed check: the search agent embeds its bundled corpus into a fresh index first,
/// which takes tens of seconds in a test build on a busy 2-core machine.
const STARTUP_DEADLINE_MS: u64 = 120_000;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn up_serves_the_suite_answers_ask_and_stops_on_ctrl_c() {
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let orchestrator_port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_a2a-mesh"))
        .arg("up")
        // Free ports, so the test never meets a suite already running on the default ones.
        .env("MESH_REGISTRY_PORT", port.to_string())
        .env("MESH_ORCHESTRATOR_PORT", orchestrator_port.to_string())
        .env("MESH_SEARCH_PORT", free_port().to_string())
        .env("MESH_ENTITY_EXTRACTION_PORT", free_port().to_string())
        .env("MESH_PROFILE_SELECTION_PORT", free_port().to_string())
        .env("MESH_REGISTRY_DATABASE_URL", format!("sqlite://{}", data.path().join("registry.db").display()))
        .env("MESH_SEARCH_DATA_DIR", data.path().join("search"))
        .env("MESH_UI_AGENT_PORT", free_port().to_string())
        .env("MESH_BUS_DATABASE_URL", format!("sqlite://{}", data.path().join("bus.db").display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || stdout.lines().map_while(Result::ok).for_each(|line| drop(lines_tx.send(line))));

    let deadline = Duration::from_millis(STARTUP_DEADLINE_MS);
    let registry_line = std::iter::from_fn(|| lines.recv_timeout(deadline).ok())
        .find(|line| line.trim_start().starts_with("registry"))
        .expect("`up` prints the registry URL");
    assert!(registry_line.contains(&format!("http://127.0.0.1:{port}")), "{registry_line}");

    let orchestrator_url = format!("http://127.0.0.1:{orchestrator_port}");
    let mut answered = None;
    for _ in 0..(STARTUP_DEADLINE_MS / 100) {
        let ask = Command::new(env!("CARGO_BIN_EXE_a2a-mesh"))
            .args(["ask", "show me robots playing soccer", "--orchestrator-url", &orchestrator_url])
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&ask.stdout).into_owned();
        // Until the agents have registered, the answer may be partial or an error: ask again.
        if ask.status.success() && !printed.contains("Partial answer") {
            answered = Some(printed);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let answer = answered.expect("`ask` gets a complete answer from the suite");
    assert!(answer.contains("Query: show me robots playing soccer"), "{answer}");
    assert!(
        answer.lines().any(|l| l.trim_start().starts_with("1. [") && l.to_lowercase().contains("robot")),
        "{answer}"
    );

    let interrupted = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(interrupted.success());
    let stopped = std::iter::from_fn(|| lines.recv_timeout(deadline).ok()).any(|line| line.contains("stopped"));
    assert!(stopped, "`up` reports that it stopped");
    assert!(child.wait().unwrap().success(), "`up` exits 0 after Ctrl-C");
}
