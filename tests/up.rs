//! End to end: `a2a-mesh up` starts the suite, `a2a-mesh ask` gets an answer from it, and `up`
//! stops cleanly on Ctrl-C (SIGINT); `up --auth` does the same with authentication on, keys it
//! generates itself, and `ask` and `token` minting their tokens from them.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Longest the suite may take to print that it is up, or to stop after SIGINT. A bound on a
/// hang, not a speed check: the search agent embeds its bundled corpus into a fresh index first,
/// which takes tens of seconds in a test build on a busy 2-core machine.
const STARTUP_DEADLINE_MS: u64 = 120_000;

/// Where, in `up`'s directory, the test keeps what `up` writes to stderr.
const STDERR_FILE: &str = "up.stderr";

/// How much of `up`'s stderr a failure shows.
const STDERR_TAIL_LINES: usize = 30;

/// A running `a2a-mesh up`, in a directory of its own (its `data/` lands there).
struct Up {
    child: Child,
    dir: tempfile::TempDir,
    lines: mpsc::Receiver<String>,
    registry_url: String,
    orchestrator_url: String,
}

impl Up {
    /// Starts `up ARGS` with every service on port 0 and reads the addresses they were given
    /// from what `up` prints. Ports picked by the test and handed over would race: until `up`
    /// binds them, another test's outgoing connections may take them as their source ports.
    fn start(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut command = Command::new(env!("CARGO_BIN_EXE_a2a-mesh"));
        command.arg("up").args(args).current_dir(dir.path());
        for service in
            ["REGISTRY", "ORCHESTRATOR", "SEARCH", "ENTITY_EXTRACTION", "PROFILE_SELECTION", "UI_AGENT", "GATEWAY"]
        {
            command.env(format!("MESH_{service}_PORT"), "0");
        }
        let mut child = command
            .env("MESH_REGISTRY_DATABASE_URL", format!("sqlite://{}", data.join("registry.db").display()))
            .env("MESH_SEARCH_DATA_DIR", data.join("search"))
            .env("MESH_BUS_DATABASE_URL", format!("sqlite://{}", data.join("bus.db").display()))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join(STDERR_FILE)).unwrap())
            .spawn()
            .unwrap();
        let (lines_tx, lines) = mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || stdout.lines().map_while(Result::ok).for_each(|line| drop(lines_tx.send(line))));
        let mut up = Self { child, dir, lines, registry_url: String::new(), orchestrator_url: String::new() };
        up.registry_url = up.url_of("registry");
        up.orchestrator_url = up.url_of("orchestrator");
        up
    }

    /// The first line `up` prints that `matches`; if `up` exits or stays silent first, the
    /// failure shows what it wrote to stderr.
    fn line(&self, matches: impl Fn(&str) -> bool) -> String {
        let deadline = Duration::from_millis(STARTUP_DEADLINE_MS);
        std::iter::from_fn(|| self.lines.recv_timeout(deadline).ok()).find(|line| matches(line)).unwrap_or_else(|| {
            let stderr = std::fs::read_to_string(self.dir.path().join(STDERR_FILE)).unwrap_or_default();
            let tail: Vec<&str> = stderr.lines().rev().take(STDERR_TAIL_LINES).collect();
            panic!(
                "`up` never printed the line; the end of its stderr:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
    }

    /// The URL `up` prints for `service` (`  registry           http://127.0.0.1:PORT ...`).
    fn url_of(&self, service: &str) -> String {
        let line = self.line(|line| line.split_whitespace().next() == Some(service));
        let url = line.split_whitespace().nth(1).unwrap_or_default().to_owned();
        assert!(url.starts_with("http://127.0.0.1:"), "{line}");
        url
    }

    /// `a2a-mesh ARGS` run where `up` runs.
    fn command(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_a2a-mesh")).args(args).current_dir(self.dir.path()).output().unwrap()
    }

    /// Asks until the suite gives a complete answer (until its agents have registered, the
    /// answer may be partial or an error); returns what `ask` printed.
    fn ask_until_answered(&self) -> String {
        for _ in 0..(STARTUP_DEADLINE_MS / 100) {
            let ask =
                self.command(&["ask", "show me robots playing soccer", "--orchestrator-url", &self.orchestrator_url]);
            let printed = String::from_utf8_lossy(&ask.stdout).into_owned();
            if ask.status.success() && !printed.contains("Partial answer") {
                return printed;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("`ask` never got a complete answer from the suite");
    }

    fn stop(mut self) {
        let interrupted = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status().unwrap();
        assert!(interrupted.success());
        assert!(self.line(|line| line.contains("stopped")).contains("stopped"), "`up` reports that it stopped");
        assert!(self.child.wait().unwrap().success(), "`up` exits 0 after Ctrl-C");
    }
}

fn assert_answered(answer: &str) {
    assert!(answer.contains("Query: show me robots playing soccer"), "{answer}");
    assert!(
        answer.lines().any(|l| l.trim_start().starts_with("1. [") && l.to_lowercase().contains("robot")),
        "{answer}"
    );
}

#[test]
fn up_serves_the_suite_answers_ask_and_stops_on_ctrl_c() {
    let up = Up::start(&[]);
    assert_eq!(status_of(&format!("{}/health", up.registry_url), None), 200, "the registry `up` printed answers");
    assert_answered(&up.ask_until_answered());
    assert!(!up.dir.path().join("data/auth").exists(), "plain `up` generates no keys");
    up.stop();
}

/// `GET url` with `A2A-Version: 1.0` and `bearer`, if any: the status.
fn status_of(url: &str, bearer: Option<&str>) -> u16 {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut request = reqwest::Client::new().get(url).header("A2A-Version", "1.0");
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        request.send().await.unwrap().status().as_u16()
    })
}

#[test]
fn up_with_auth_generates_its_keys_and_the_command_line_mints_its_own_tokens() {
    let up = Up::start(&["--auth"]);
    let dashboard = up.line(|line| line.contains("/dashboard/#token="));
    let keys = up.dir.path().join("data/auth");
    for file in ["jwt-hs256.secret", "card-signing.pem", "card-signing.pub.pem"] {
        assert!(keys.join(file).is_file(), "`up --auth` generates {file}");
    }
    // The registry requires signed cards: the suite answering in full means every agent signed
    // its card with the generated key, and every hop authenticated with a token of its own.
    assert_answered(&up.ask_until_answered());

    let tasks = format!("{}/tasks", up.orchestrator_url);
    assert_eq!(status_of(&tasks, None), 401, "authentication is on");
    let token = up.command(&["token", "--subject", "alice", "--tenant", "acme", "--role", "user", "--ttl", "1h"]);
    assert!(token.status.success(), "{}", String::from_utf8_lossy(&token.stderr));
    let token = String::from_utf8(token.stdout).unwrap();
    assert_eq!(status_of(&tasks, Some(token.trim())), 200, "a minted token is accepted");
    let admin = dashboard.split("#token=").nth(1).unwrap().trim();
    assert_eq!(status_of(&format!("{}/api/links", up.registry_url), Some(admin)), 200, "the dashboard's token reads");
    let bad = up.command(&["token", "--subject", "x", "--role", "root"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("unknown role"));
    up.stop();
}

#[test]
fn token_without_a_key_says_how_to_get_one() {
    let empty = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_a2a-mesh"))
        .args(["token", "--subject", "alice", "--role", "user"])
        .current_dir(empty.path())
        .env_remove("MESH_AUTH_JWT_HS256_SECRET")
        .env_remove("MESH_AUTH_JWT_HS256_SECRET_FILE")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("up --auth") && said.contains("MESH_AUTH_JWT_HS256_SECRET_FILE"), "{said}");
    assert!(!Path::new(empty.path()).join("data").exists(), "`token` creates nothing");
}
