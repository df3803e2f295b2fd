//! Schema fuzzing of the registry's HTTP API: schemathesis (PyPI) reads the registry's own
//! OpenAPI document (`/openapi.json`) from a real registry on port 0 with authentication on, and
//! sends generated requests, valid and invalid, to every operation in it, once as an admin (every
//! route lets it in), once as an agent (admin routes and other names refuse it) and once without
//! credentials (schemathesis makes up bearer tokens and API keys). Every answer must be no server
//! error, have a status the document lists for the operation, and match the schema and content
//! type the document gives for that status.
//!
//! The runs are bounded and reproducible: deterministic generation (the same requests every run,
//! no seed involved) and a small number of examples per operation. schemathesis is the `st` named by `MESH_SCHEMATHESIS` (`.ci/run`
//! builds its virtualenv from tests/schemathesis/requirements.txt); without it the test says why
//! it skips, and under CI it fails.

use std::process::Stdio;
use std::time::{Duration, Instant};

use mesh_auth::{AuthConfig, Claims, Role, mint_hs256};
use tokio::process::Command;

use crate::common::{FakeAgent, TOKEN_TTL_S, TestRegistry};

const SECRET: &str = "a-schemathesis-secret-of-32-bytes!!";
/// Examples generated per operation and phase: enough to reach every documented answer of the
/// registry's small operations, few enough that the run stays well under a minute on two cores.
const MAX_EXAMPLES: u32 = 30;
/// Fewest test cases a run must generate: the document's 21 fuzzed operations give over 1,000.
const GENERATED_MIN: u32 = 500;
/// Upper bound for one schemathesis run; a hung run fails the test instead of holding CI.
const RUN_DEADLINE_S: u64 = 180;
/// What every answer is checked for.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance";

fn token(subject: &str, roles: &[Role]) -> String {
    mint_hs256(SECRET.as_bytes(), &Claims::new(subject, "", roles, TOKEN_TTL_S)).unwrap()
}

/// Runs schemathesis against `registry`, with `token` or without credentials; the failure
/// message carries its report.
async fn fuzz(st: &str, registry: &TestRegistry, who: &str, token: Option<&str>) {
    let started = Instant::now();
    // schemathesis keeps a cache in its working directory: not in the repository.
    let workdir = tempfile::tempdir().unwrap();
    let mut command = Command::new(st);
    command
        .current_dir(workdir.path())
        .args(["run", &format!("{}/openapi.json", registry.url)])
        .args(["--checks", CHECKS])
        .args(["--max-examples", &MAX_EXAMPLES.to_string(), "--generation-deterministic"])
        .args(["--phases", "examples,coverage,fuzzing", "--workers", "1"])
        // The event stream never ends: a generated request would wait out its timeout every time.
        // Its refusals are those of every operation, checked on the others.
        .args(["--exclude-path", "/api/events"])
        .args(["--request-timeout", "10", "--no-color", "--warnings", "off"])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(token) = token {
        command.args(["--header", &format!("Authorization: Bearer {token}")]);
    }
    let output = tokio::time::timeout(Duration::from_secs(RUN_DEADLINE_S), command.output())
        .await
        .unwrap_or_else(|_| panic!("schemathesis ran longer than {RUN_DEADLINE_S} s as {who}"))
        .unwrap_or_else(|e| panic!("cannot run {st}: {e}"));
    let report = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    eprintln!("schemathesis as {who}, {:.1} s:\n{report}", started.elapsed().as_secs_f64());
    assert!(output.status.success(), "schemathesis found failures as {who} ({}):\n{report}", output.status);
    // A run that reached no operation (a document that lost them) would pass as well.
    let generated = report
        .lines()
        .find_map(|line| line.trim().split_once(" generated, ").and_then(|(count, _)| count.parse::<u32>().ok()))
        .unwrap_or_else(|| panic!("no count of generated test cases in the report:\n{report}"));
    assert!(generated >= GENERATED_MIN, "only {generated} test cases as {who}:\n{report}");
}

#[tokio::test]
async fn the_openapi_document_describes_every_answer_and_no_request_breaks_the_server() {
    let Some(st) = mesh_test_support::schemathesis() else { return };
    let registry = TestRegistry::start_with(|config| {
        config.auth = AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() };
    })
    .await;
    // One agent the agent-role run may act on, so its routes also answer with the agent found.
    let agent = FakeAgent::start("fuzz_agent").await;
    let agent_token = token(&agent.name, &[Role::Agent]);
    let registered = registry
        .http
        .post(format!("{}/register", registry.url))
        .bearer_auth(&agent_token)
        .json(&agent.registration(&["search"]))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 200, "{}", registered.text().await.unwrap());

    fuzz(&st, &registry, "an admin", Some(&token("ops", &[Role::Admin]))).await;
    fuzz(&st, &registry, "an agent", Some(&agent_token)).await;
    // Without credentials schemathesis makes up its own from the document's security schemes.
    fuzz(&st, &registry, "an unauthenticated caller", None).await;
    registry.stop().await;
}
