//! The official A2A Python SDK (`a2a-sdk`) as the client of a kit agent: it sends, streams, gets,
//! lists and cancels over JSON-RPC and HTTP+JSON, in 1.0 and in 0.3 mode
//! (`tests/interop/client_checks.py`). Runs where `MESH_A2A_PYTHON` names a Python with the SDK
//! (`.ci/run` makes one); skips with a message elsewhere.

use std::path::PathBuf;
use std::time::Duration;

use mesh_agent_kit::conformance::{TckAgent, card};
use mesh_agent_kit::{AgentApp, AgentConfig};
use mesh_client::HttpClient;

/// Longest one run of the checks may take (the SDK client starts in about a second).
const CHECKS_TIMEOUT_S: u64 = 120;
/// Message-id prefix that keeps a task working until canceled (see `conformance`).
const LONG_RUNNING_PREFIX: &str = "interop-long-running";

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_client_works_against_a_kit_agent() {
    let Some(python) = std::env::var_os("MESH_A2A_PYTHON") else {
        eprintln!("skipping: MESH_A2A_PYTHON is not set (.ci/run sets it to a virtualenv with a2a-sdk)");
        return;
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/client_checks.py");
    let config = AgentConfig { task_store_url: Some(mesh_storage::SQLITE_MEMORY_URL.into()), ..AgentConfig::default() };
    let app =
        AgentApp::build_tasks(&config, card().unwrap(), TckAgent, HttpClient::with_reqwest().unwrap()).await.unwrap();
    let url = app.url().to_owned();
    let server = tokio::spawn(app.run_until_stopped(std::future::pending()));
    let mut failures = Vec::new();
    for transport in ["jsonrpc", "http_json"] {
        for protocol in ["1.0", "0.3"] {
            let run = tokio::process::Command::new(&python)
                .arg(&script)
                .args(["--url", &url, "--transport", transport, "--protocol", protocol])
                .args(["--long-running-prefix", LONG_RUNNING_PREFIX])
                .kill_on_drop(true)
                .output();
            let output = tokio::time::timeout(Duration::from_secs(CHECKS_TIMEOUT_S), run)
                .await
                .unwrap_or_else(|_| panic!("{transport} {protocol}: the checks took over {CHECKS_TIMEOUT_S} s"))
                .expect("the Python checks start");
            let stdout = String::from_utf8_lossy(&output.stdout);
            eprintln!("== {transport} {protocol}\n{stdout}{}", String::from_utf8_lossy(&output.stderr));
            // Every check must have run and passed; only the list check may be skipped, in 0.3,
            // which has no ListTasks.
            let ran_all = !stdout.lines().any(|l| l.starts_with("SKIP") && !(protocol == "0.3" && l.contains("list")));
            if !output.status.success() || !ran_all || !stdout.contains("PASS") {
                failures.push(format!("{transport} {protocol}"));
            }
        }
    }
    server.abort();
    assert!(failures.is_empty(), "the SDK's checks failed for: {failures:?}");
}
