//! The conformance agent's binary as `scripts/tck.sh` (and CI's conformance step) starts it:
//! `tck-agent --port P --variant V`. Each variant must serve the card that shows the kit the
//! capability it is for, since the kit runs its tests of a capability only when the card
//! declares it; an unknown variant is refused by name. It serves until Ctrl-C or SIGTERM, and
//! then stops cleanly.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mesh_tck_agent::TCK_REQUIRED_EXTENSION_URI;
use mesh_test_support::{eventually, free_port};
use serde_json::Value;

/// Bounds a start-up (a debug build on a loaded machine), not a passing run.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The binary serving `variant` on a port of its own, its files in a temporary directory;
/// killed when dropped.
struct Agent {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Agent {
    fn start(variant: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_tck-agent"))
            .args(["--port", &port.to_string(), "--variant", variant])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the tck-agent binary starts");
        Self { child, url: format!("http://127.0.0.1:{port}"), _dir: dir }
    }

    async fn card(&mut self) -> Value {
        let url = format!("{}/.well-known/agent-card.json", self.url);
        let mut card = Value::Null;
        eventually("the agent's card", START_TIMEOUT, async || {
            assert!(self.child.try_wait().unwrap().is_none(), "the agent exited before serving its card");
            match reqwest::get(&url).await {
                Ok(response) if response.status().is_success() => {
                    card = response.json().await.unwrap();
                    true
                }
                _ => false,
            }
        })
        .await;
        card
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a variant's card must show.
type CardCheck = fn(&Value) -> bool;

#[tokio::test]
async fn each_variant_serves_the_card_that_shows_its_capability() {
    let cases: [(&str, CardCheck); 4] = [
        ("standard", |c| c["capabilities"]["streaming"] == true && c["capabilities"]["pushNotifications"] == true),
        ("no-streaming", |c| c["capabilities"]["streaming"] == false),
        ("no-push-notifications", |c| {
            c["capabilities"]["streaming"] == true && c["capabilities"]["pushNotifications"] == false
        }),
        ("required-extension", |c| {
            c["capabilities"]["extensions"].as_array().is_some_and(|extensions| {
                extensions.iter().any(|e| e["uri"] == TCK_REQUIRED_EXTENSION_URI && e["required"] == true)
            })
        }),
    ];
    for (variant, shows) in cases {
        let card = Agent::start(variant).card().await;
        assert!(shows(&card), "{variant}: {}", card["capabilities"]);
        assert!(!card["supportedInterfaces"].as_array().unwrap().is_empty(), "{variant}: {card}");
    }
}

#[tokio::test]
async fn it_serves_until_ctrl_c_or_sigterm_and_then_exits_cleanly() {
    for (signal, number) in [("INT", 2), ("TERM", 15)] {
        let mut agent = Agent::start("standard");
        // Serving (the card answers) and still running: it does not return before a signal.
        agent.card().await;
        let pid = agent.child.id().to_string();
        // Sent before the agent catches it, the signal would kill it by default: wait until the
        // kernel lists it among the caught ones.
        eventually(&format!("the agent catches SIG{signal}"), START_TIMEOUT, async || catches(&pid, number)).await;
        let sent = Command::new("kill").args([&format!("-{signal}"), &pid]).status().expect("kill runs");
        assert!(sent.success(), "SIG{signal} sent");
        let mut exited = None;
        eventually(&format!("the agent exits on SIG{signal}"), START_TIMEOUT, async || {
            exited = agent.child.try_wait().unwrap();
            exited.is_some()
        })
        .await;
        let status = exited.unwrap();
        assert!(status.success(), "SIG{signal}: {status}");
    }
}

/// Whether process `pid` has a handler for signal `number` (`SigCgt` in `/proc/PID/status`).
fn catches(pid: &str, number: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let caught = status.lines().find_map(|line| line.strip_prefix("SigCgt:")).map(str::trim);
    caught.and_then(|mask| u64::from_str_radix(mask, 16).ok()).is_some_and(|mask| mask & (1 << (number - 1)) != 0)
}

#[test]
fn an_unknown_variant_is_refused_naming_the_variants() {
    let output = Command::new(env!("CARGO_BIN_EXE_tck-agent"))
        .args(["--port", &free_port().to_string(), "--variant", "everything"])
        .output()
        .expect("the tck-agent binary runs");
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("everything") && error.contains("no-streaming"), "{error}");
}
