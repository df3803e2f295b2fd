//! An official JS SDK agent (`@a2a-js/sdk`, `tests/js-agent/agent.mjs`) behind the gateway,
//! reached with the official Python client (a2a-sdk) on both JSON bindings in both versions,
//! streaming and not, its tasks kept to their tenant. Runs where `MESH_A2A_PYTHON` names a Python
//! with the SDK and `MESH_A2A_JS_AGENT` the JS agent with its packages installed (`npm ci` in
//! tests/js-agent); skips elsewhere, fails under CI.

mod common;

use common::{Mesh, token};
use mesh_auth::Role;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_client_reaches_a_js_sdk_agent_on_both_bindings_streaming_and_not() {
    let Some(python) = mesh_test_support::a2a_sdk_python() else { return };
    let Some(agent) = mesh_test_support::a2a_js_agent() else { return };
    let mut mesh = Mesh::start(python, |config| config).await;
    mesh.js_agent(&agent, "js-echo", &["echo"]).await;
    let acme = token("ann", "acme", &[Role::User]);
    let globex = token("bob", "globex", &[Role::User]);
    let url = format!("{}/agents/js-echo", mesh.gateway);
    for transport in ["jsonrpc", "http_json"] {
        for protocol in ["1.0", "0.3"] {
            for op in ["send", "stream"] {
                let text = format!("{transport} {protocol} {op}");
                let base = ["--url", &url, "--transport", transport, "--protocol", protocol];
                let answer = mesh.client(&[&base[..], &["--token", &acme, "--op", op, "--text", &text]].concat()).await;
                let case = format!("{transport} {protocol} {op}: {answer}");
                assert_eq!(answer["ok"], true, "{case}");
                assert!(answer["interface"].as_str().unwrap().starts_with(&mesh.gateway), "{case}");
                assert_eq!(answer["state"], "TASK_STATE_COMPLETED", "{case}");
                assert_eq!(answer["texts"], json!([format!("echo: {text}")]), "{case}");
                if op == "stream" {
                    assert_eq!(answer["kinds"][0], "task", "{case}");
                }
                // The task is the tenant's: its own client reads it, another tenant's does not.
                let task = answer["task_id"].as_str().unwrap();
                let own = mesh.client(&[&base[..], &["--token", &acme, "--op", "get", "--task", task]].concat()).await;
                assert_eq!((own["ok"].clone(), own["task_id"].as_str()), (json!(true), Some(task)), "{case}: {own}");
                let other =
                    mesh.client(&[&base[..], &["--token", &globex, "--op", "get", "--task", task]].concat()).await;
                assert_eq!(other["ok"], false, "{case}: another tenant read the task: {other}");
            }
        }
    }
}
