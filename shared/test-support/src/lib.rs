//! The real parts some tests need (PostgreSQL, a Kafka broker, SciFact, the embedding model, the
//! Python virtualenvs, schemathesis, Prometheus, chromium) and one rule for when one is missing: on a
//! developer's machine the test says what is missing and passes without it; under CI it fails,
//! naming the part, because there a missing part means a broken install step, and a test that
//! skipped would hide it behind a green run.
//!
//! Also the test doubles tests share: [`llm::ScriptedLlm`], an OpenAI-compatible server that
//! answers from a script and records what it was asked, and [`mcp::McpTestServer`], a real MCP
//! server with a few tools.
//!
//! And [`relay::Relay`], a TCP relay a test cuts to take a real part away.
//!
//! And [`eventually`], for waiting on a condition instead of sleeping, and [`logs`], for waiting
//! on a line the code under test logged.

use std::fmt::Display;

pub mod llm;
pub mod logs;
pub mod mcp;
pub mod metrics;
pub mod relay;
pub mod wait;

pub use wait::eventually;

/// A TCP port on 127.0.0.1 that was free a moment ago, for a test that must name the port a
/// process it starts listens on (a process that cannot be told to report the port it took).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Whether this is a CI run: `CI` set to anything but empty, `0` or `false` (`.ci/run` and the
/// usual CI services set `CI=true`).
pub fn under_ci() -> bool {
    means_ci(std::env::var("CI").ok().as_deref())
}

fn means_ci(value: Option<&str>) -> bool {
    value.is_some_and(|ci| !matches!(ci.trim().to_ascii_lowercase().as_str(), "" | "0" | "false"))
}

/// The real part `found` is; when it is missing (`Err(why)`), a failure naming `part` and `why`
/// under CI, and elsewhere the same on stderr and `None`, so the caller skips what needs it.
#[track_caller]
pub fn require<T, E: Display>(part: &str, found: Result<T, E>) -> Option<T> {
    require_as(under_ci(), part, found)
}

/// The value of the environment variable `var` that names a real part, as [`require`] has it;
/// `hint` says how to provide it.
#[track_caller]
pub fn env_part(part: &str, var: &str, hint: &str) -> Option<String> {
    require(part, std::env::var(var).map_err(|_| format!("{var} is unset ({hint})")))
}

/// The PostgreSQL server of the PostgreSQL variants of the storage tests: `MESH_TEST_POSTGRES_URL`.
#[track_caller]
pub fn postgres_url() -> Option<String> {
    env_part(
        "PostgreSQL",
        "MESH_TEST_POSTGRES_URL",
        "e.g. postgres://postgres@127.0.0.1:5432/test; .ci/run starts the server and sets it",
    )
}

/// The Kafka-protocol broker of the Kafka tests: `MESH_TEST_KAFKA_BROKERS`.
#[track_caller]
pub fn kafka_brokers() -> Option<String> {
    env_part("a Kafka broker", "MESH_TEST_KAFKA_BROKERS", "scripts/kafka-broker.sh starts one on 127.0.0.1:9092")
}

/// A PostgreSQL database of its own for one test on the server `MESH_TEST_POSTGRES_URL` names, so
/// tests running at once never see each other's rows; dropped by [`ScratchDatabase::drop_database`]
/// (a failing test leaves it behind, under a name saying which test made it). `None` (the test
/// skips) without the server outside CI, as [`require`] has it.
#[derive(Debug)]
pub struct ScratchDatabase {
    /// The database's URL: the server's, with the database's name as its path.
    pub url: String,
    admin_url: String,
    name: String,
}

impl ScratchDatabase {
    /// Creates `<prefix>_<uuid>`; `prefix` is the test's own, lowercase ASCII letters and `_`.
    pub async fn create(prefix: &str) -> Option<Self> {
        use sqlx::Connection;
        assert!(prefix.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "a plain prefix, not {prefix:?}");
        let admin_url = postgres_url()?;
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&admin_url).await.expect("MESH_TEST_POSTGRES_URL is reachable");
        // The name is the checked prefix and a UUID's hex digits, never input.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut admin).await.unwrap();
        let mut url = url::Url::parse(&admin_url).expect("MESH_TEST_POSTGRES_URL is a URL");
        url.set_path(&name);
        Some(Self { url: url.into(), admin_url, name })
    }

    /// Drops the database, ending the sessions still open on it.
    pub async fn drop_database(self) {
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect(&self.admin_url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {} WITH (FORCE)", self.name)))
            .execute(&mut admin)
            .await
            .unwrap();
    }
}

#[track_caller]
fn require_as<T, E: Display>(ci: bool, part: &str, found: Result<T, E>) -> Option<T> {
    match found {
        Ok(found) => Some(found),
        Err(why) if ci => panic!("CI is set but {part} is missing: {why}"),
        Err(why) => {
            eprintln!("SKIPPED without {part}: {why}");
            None
        }
    }
}

/// The Python with the official A2A SDK (`MESH_A2A_PYTHON`), for the interop and card-signature
/// tests.
#[track_caller]
pub fn a2a_sdk_python() -> Option<String> {
    env_part(
        "the A2A Python SDK",
        "MESH_A2A_PYTHON",
        "a Python with tests/interop/requirements.txt; .ci/run builds its virtualenv and sets it",
    )
}

/// The official JS SDK agent of the gateway's tests (`MESH_A2A_JS_AGENT`: the path of
/// `tests/js-agent/agent.mjs` once `npm ci` installed its packages beside it).
#[track_caller]
pub fn a2a_js_agent() -> Option<String> {
    env_part(
        "the A2A JS SDK agent",
        "MESH_A2A_JS_AGENT",
        "tests/js-agent/agent.mjs after `npm ci` in tests/js-agent; .ci/run installs it and sets it",
    )
}

/// The schemathesis executable (`MESH_SCHEMATHESIS`), for the registry's schema fuzzing test.
#[track_caller]
pub fn schemathesis() -> Option<String> {
    env_part(
        "schemathesis",
        "MESH_SCHEMATHESIS",
        "the `st` of a virtualenv with tests/schemathesis/requirements.txt; .ci/run builds it and sets it",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_is_any_value_but_empty_zero_or_false() {
        for (value, ci) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("false"), false),
            (Some(" FALSE "), false),
            (Some("true"), true),
            (Some("1"), true),
            (Some("yes"), true),
        ] {
            assert_eq!(means_ci(value), ci, "CI={value:?}");
        }
    }

    #[test]
    fn a_missing_part_skips_outside_ci() {
        assert_eq!(require_as(false, "PostgreSQL", Err::<u8, _>("no server")), None);
        assert_eq!(require_as(false, "PostgreSQL", Ok::<u8, &str>(7)), Some(7));
    }

    #[test]
    fn a_missing_part_fails_under_ci_naming_it() {
        assert_eq!(require_as(true, "PostgreSQL", Ok::<u8, &str>(7)), Some(7));
        let failure = std::panic::catch_unwind(|| require_as(true, "PostgreSQL", Err::<u8, _>("no server")))
            .expect_err("a missing part fails under CI");
        let message = failure.downcast_ref::<String>().expect("a formatted panic message");
        assert_eq!(message, "CI is set but PostgreSQL is missing: no server");
    }
}
