//! `MESH_LOG_FORMAT=json`: one JSON object per line on stderr, for log collectors; with tracing
//! on, a line logged inside an exported span starts with that span's `trace_id` and `span_id`, so
//! a log line leads to its trace, and a line logged outside any span carries neither.
//!
//! Logging is installed once per process and writes to the process's stderr, so the test runs
//! this binary again as a child that logs, and reads the child's stderr.

use std::process::Command;

use mesh_telemetry::{LogFormat, Root, TraceSettings, span_ids};
use serde_json::Value;

/// Set in the child's environment: the test then logs instead of checking.
const CHILD: &str = "MESH_TELEMETRY_JSON_LOGS_CHILD";
/// The test's name, to run it alone in the child.
const TEST: &str = "json_log_lines_name_the_trace_and_span_they_are_logged_in";
/// Marks the child's stdout line with the span's ids, as the tracing API reports them (after the
/// test harness's own words on that line).
const IDS: &str = "ids: ";

/// Logs one line outside any span and one inside an exported span, and prints that span's ids.
fn log_as_the_child() {
    // A collector nobody listens on (a port bound, then freed): spans are exported in batches,
    // after the lines this test reads were written.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let traces = TraceSettings {
        traces_endpoint: Some(format!("http://127.0.0.1:{port}/v1/traces")),
        sampler: Some(opentelemetry_sdk::trace::Sampler::AlwaysOn),
        ..TraceSettings::default()
    };
    // As a deployed service reads it (deploy/kubernetes sets MESH_LOG_FORMAT=json).
    mesh_telemetry::init_with(LogFormat::from_env(), Some(traces), None);
    tracing::info!(outside = true, "before any span");
    let root = Root::start("json-logs", None, || tracing::info_span!("work"));
    let (trace_id, span_id) = span_ids(root.span()).expect("an always-on sampler exports the span");
    println!("{IDS}{trace_id} {span_id}");
    root.span().in_scope(|| tracing::info!(answer = 42, "inside the span"));
}

#[test]
fn json_log_lines_name_the_trace_and_span_they_are_logged_in() {
    if std::env::var_os(CHILD).is_some() {
        return log_as_the_child();
    }
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("MESH_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&child.stdout), String::from_utf8_lossy(&child.stderr));
    assert!(child.status.success(), "{stdout}\n{stderr}");
    let ids = stdout
        .lines()
        .find_map(|line| line.split_once(IDS).map(|(_, ids)| ids))
        .unwrap_or_else(|| panic!("no ids in {stdout}"));
    let (trace_id, span_id) = ids.split_once(' ').unwrap();

    let lines: Vec<(&str, Value)> = stderr
        .lines()
        .map(|line| (line, serde_json::from_str(line).unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"))))
        .collect();
    let logged = |message: &str| {
        lines
            .iter()
            .find(|(_, json)| json["message"] == message)
            .unwrap_or_else(|| panic!("no line {message:?} in {stderr}"))
    };

    let (_, outside) = logged("before any span");
    assert_eq!(outside["level"], "INFO", "{outside}");
    assert_eq!(outside["outside"], true, "the event's fields are top-level keys: {outside}");
    assert!(outside.get("trace_id").is_none() && outside.get("span_id").is_none(), "{outside}");

    let (raw, inside) = logged("inside the span");
    assert_eq!(inside["trace_id"], trace_id, "{inside}");
    assert_eq!(inside["span_id"], span_id, "{inside}");
    assert_eq!(inside["answer"], 42, "{inside}");
    // First, so a collector reading a line's head finds them in lines of any length.
    assert!(raw.starts_with(&format!(r#"{{"trace_id":"{trace_id}","span_id":"{span_id}","#)), "{raw}");
}
