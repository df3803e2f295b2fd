//! End to end: `a2a-mesh up` starts the suite, serves, and stops cleanly on Ctrl-C (SIGINT).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Longest the suite may take to print that it is up, or to stop after SIGINT.
const STARTUP_DEADLINE_MS: u64 = 30_000;

#[test]
fn up_serves_the_registry_and_stops_on_ctrl_c() {
    let data = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_a2a-mesh"))
        .arg("up")
        .env("MESH_REGISTRY_PORT", port.to_string())
        .env("MESH_REGISTRY_DATABASE_URL", format!("sqlite://{}", data.path().join("registry.db").display()))
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

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stats: serde_json::Value = runtime.block_on(async {
        reqwest::get(format!("http://127.0.0.1:{port}/stats")).await.unwrap().json().await.unwrap()
    });
    assert_eq!(stats["total_agents"], 0);

    let interrupted = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(interrupted.success());
    let stopped = std::iter::from_fn(|| lines.recv_timeout(deadline).ok()).any(|line| line.contains("stopped"));
    assert!(stopped, "`up` reports that it stopped");
    assert!(child.wait().unwrap().success(), "`up` exits 0 after Ctrl-C");
}
