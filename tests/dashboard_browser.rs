//! The registry's dashboard in a real browser: the whole suite on port 0 with authentication on,
//! as it runs in production, then `tests/browser/dashboard.mjs` (playwright-core driving
//! Debian's chromium) signs in, checks the page against the registry's API, edits links through
//! it, sends a query and waits for its calls.
//!
//! Needs `node`, chromium (`MESH_CHROMIUM`, else `/usr/bin/chromium`) and the script's packages
//! (`npm ci` in `tests/browser`; `.ci/run` does all three). Under CI a missing one
//! fails the test; elsewhere the test says what is missing and passes without running.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use a2a_mesh::{RunningSuite, SuiteConfig};

mod common;

/// The script's own waits add up to about a minute at worst; past this it is stuck.
const BROWSER_RUN_DEADLINE_S: u64 = 180;
const CHROMIUM_DEFAULT: &str = "/usr/bin/chromium";

/// What the browser run needs, or why it cannot run here.
fn prerequisites(root: &Path) -> Result<(PathBuf, PathBuf), String> {
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Err("`node` is not on PATH (install Node.js 20+)".into());
    }
    let chromium = PathBuf::from(std::env::var("MESH_CHROMIUM").unwrap_or_else(|_| CHROMIUM_DEFAULT.into()));
    if !chromium.is_file() {
        return Err(format!("no chromium at {} (apt-get install chromium, or set MESH_CHROMIUM)", chromium.display()));
    }
    let script_dir = root.join("tests/browser");
    if !script_dir.join("node_modules/playwright-core/package.json").is_file() {
        return Err(format!("playwright-core is not installed: run `npm ci` in {}", script_dir.display()));
    }
    Ok((chromium, script_dir))
}

/// The suite's HS256 secret, as `MESH_AUTH_JWT_HS256_SECRET` gives `up`.
const SECRET: &str = "a-browser-test-secret-of-32-bytes-or-more";

/// An operator's token: the page signs in with it, and the script calls the API with it.
fn admin_token() -> String {
    let claims = mesh_auth::Claims::new("operator", "", &[mesh_auth::Role::Admin], 3600);
    mesh_auth::mint_hs256(SECRET.as_bytes(), &claims).unwrap()
}

async fn start_suite(data: &tempfile::TempDir, token: &str) -> RunningSuite {
    let mut config = SuiteConfig::ephemeral(data.path());
    let auth = mesh_auth::AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..mesh_auth::AuthConfig::default() };
    config.share_auth(&auth).unwrap();
    common::start_healthy(config, Some(token)).await
}

/// The links `deploy/` gives the suite: the orchestrator is superior to its three workers, so the
/// page has edges to draw and the query's calls cross links. A suite that loads them from its
/// configuration has them already; only missing ones are created.
async fn link_the_suite_as_deployed(registry: &str, token: &str) {
    let http = reqwest::Client::new();
    let existing: serde_json::Value =
        http.get(format!("{registry}/api/links")).bearer_auth(token).send().await.unwrap().json().await.unwrap();
    let linked = |worker: &str| {
        existing["links"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["from_agent_id"] == "orchestrator" && l["to_agent_id"] == worker)
    };
    for worker in ["search", "entity_extraction", "profile_selection"] {
        if linked(worker) {
            continue;
        }
        let response = http
            .post(format!("{registry}/api/links"))
            .bearer_auth(token)
            .json(&serde_json::json!({
                "from_agent_id": "orchestrator", "to_agent_id": worker,
                "direction": "one_way", "relationship": "superior",
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "link orchestrator -> {worker}: {}", response.text().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_and_edits_the_live_graph_in_chromium() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Some((chromium, script_dir)) = mesh_test_support::require("a browser test tool", prerequisites(root)) else {
        return;
    };
    let screenshots = std::env::var_os("MESH_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots"));

    let data = tempfile::tempdir().unwrap();
    let token = admin_token();
    let suite = start_suite(&data, &token).await;
    link_the_suite_as_deployed(&suite.urls.registry, &token).await;
    let run = tokio::process::Command::new("node")
        .arg(script_dir.join("dashboard.mjs"))
        .current_dir(&script_dir)
        .env("MESH_REGISTRY_URL", &suite.urls.registry)
        .env("MESH_ORCHESTRATOR_URL", &suite.urls.orchestrator)
        .env("MESH_CHROMIUM", &chromium)
        .env("MESH_TOKEN", &token)
        .env("MESH_SCREENSHOT_DIR", &screenshots)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(BROWSER_RUN_DEADLINE_S), run)
        .await
        .unwrap_or_else(|_| panic!("the browser run took longer than {BROWSER_RUN_DEADLINE_S} s"))
        .expect("node runs");
    suite.stop().await.unwrap();

    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    // The script's output above says which checks failed and where the screenshots are.
    assert!(output.status.success(), "the browser checks failed ({})", output.status);
    assert!(stdout.contains(" 0 failed"), "the script did not report its checks");
}
