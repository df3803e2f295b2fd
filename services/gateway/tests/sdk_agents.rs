//! Official-SDK agents (a2a-sdk) behind the gateway, reached with the official Python client on
//! both JSON bindings in both versions, streaming and not; the refusals (no token, a rule
//! denying a method, another tenant's task); two SDK agents calling each other through the
//! gateway (a cycle refused, the depth limit held); the registry's event stream showing a call;
//! a killed agent failed over (skill route) and its circuit opened. Runs where
//! `MESH_A2A_PYTHON` names a Python with the SDK; skips elsewhere, fails under CI.

mod common;

use std::time::Duration;

use common::{Mesh, texts, token};
use mesh_auth::Role;
use serde_json::{Value, json};

const USER: &[Role] = &[Role::User];

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_client_reaches_an_sdk_agent_on_both_bindings_streaming_and_not() {
    let Some(python) = mesh_test_support::a2a_sdk_python() else { return };
    let mut mesh = Mesh::start(python, |config| config).await;
    mesh.agent("echo", &["echo"]).await;
    let acme = token("ann", "acme", USER);
    let url = format!("{}/agents/echo", mesh.gateway);
    for transport in ["jsonrpc", "http_json"] {
        for protocol in ["1.0", "0.3"] {
            for op in ["send", "stream"] {
                let text = format!("{transport} {protocol} {op}");
                let answer = mesh
                    .client(&[
                        "--url",
                        &url,
                        "--transport",
                        transport,
                        "--protocol",
                        protocol,
                        "--token",
                        &acme,
                        "--op",
                        op,
                        "--text",
                        &text,
                    ])
                    .await;
                let case = format!("{transport} {protocol} {op}: {answer}");
                assert_eq!(answer["ok"], true, "{case}");
                assert!(answer["interface"].as_str().unwrap().starts_with(&mesh.gateway), "{case}");
                assert_eq!(answer["state"], "TASK_STATE_COMPLETED", "{case}");
                assert!(answer["texts"].as_array().unwrap().contains(&json!(format!("echo: {text}"))), "{case}");
                if op == "stream" {
                    assert_eq!(answer["kinds"][0], "task", "{case}");
                }
                // The task is the tenant's: its own client reads it, another tenant's does not.
                let task = answer["task_id"].as_str().unwrap();
                let mut reads = Vec::new();
                for reader in [acme.clone(), token("bob", "globex", USER)] {
                    let args = ["--url", &url, "--transport", transport, "--protocol", protocol, "--token", &reader];
                    reads.push(mesh.client(&[&args[..], &["--op", "get", "--task", task]].concat()).await);
                }
                let (own, other) = (&reads[0], &reads[1]);
                assert_eq!((own["ok"].clone(), own["task_id"].as_str()), (json!(true), Some(task)), "{case}: {own}");
                assert_eq!(other["ok"], false, "{case}: another tenant read the task: {other}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_carry_json_in_the_callers_binding() {
    let Some(python) = mesh_test_support::a2a_sdk_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[[rules]]\nname = \"no-cancel\"\neffect = \"deny\"\nwhen = 'method == \"CancelTask\" && !(\"admin\" in caller.roles)'\n",
    )
    .unwrap();
    let mut mesh =
        Mesh::start(python, |config| gateway::GatewayConfig { policy_file: Some(policy.clone()), ..config }).await;
    mesh.agent("echo", &["echo"]).await;

    // No token: 401 with a JSON body.
    let (status, body) = mesh.send("/agents/echo/", None, "hi").await;
    assert_eq!(status, 401, "{body}");
    assert!(body.is_object(), "{body}");
    let card = mesh.http.get(format!("{}/agents/echo/.well-known/agent-card.json", mesh.gateway)).send().await.unwrap();
    assert_eq!(card.status(), 401);

    let acme = token("ann", "acme", USER);
    let (status, sent) = mesh.send("/agents/echo/", Some(&acme), "hi").await;
    assert_eq!(status, 200, "{sent}");
    let task = sent["result"]["task"]["id"].as_str().unwrap().to_owned();

    // The rule denies CancelTask: a JSON-RPC error on JSON-RPC, problem JSON on HTTP+JSON.
    let cancel = json!({"jsonrpc": "2.0", "id": 7, "method": "CancelTask", "params": {"id": task}});
    let (status, denied) = mesh.rpc("/agents/echo/", Some(&acme), &cancel).await;
    assert_eq!(status, 403, "{denied}");
    assert_eq!(denied["id"], 7);
    assert_eq!(denied["error"]["code"], gateway::POLICY_DENIED_JSONRPC_CODE);
    assert_eq!(denied["error"]["data"]["error_code"], "POLICY_DENIED");
    let response = mesh
        .http
        .post(format!("{}/agents/echo/tasks/{task}:cancel", mesh.gateway))
        .bearer_auth(&acme)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["error_code"], "POLICY_DENIED");
    // An admin is not denied by that rule: the call reaches the agent, which answers that its
    // completed task cannot be canceled (A2A's TaskNotCancelableError).
    let admin = token("operator", "acme", &[Role::Admin]);
    let (status, answer) = mesh.rpc("/agents/echo/", Some(&admin), &cancel).await;
    assert_eq!((status, &answer["id"], &answer["error"]["code"]), (200, &json!(7), &json!(-32002)), "{answer}");

    // Another tenant's task is "not found", on both bindings.
    let globex = token("bob", "globex", USER);
    let get = json!({"jsonrpc": "2.0", "id": 8, "method": "GetTask", "params": {"id": task}});
    let (status, hidden) = mesh.rpc("/agents/echo/", Some(&globex), &get).await;
    assert_eq!((status, hidden["error"]["code"].clone()), (200, json!(-32001)), "{hidden}");
    assert_eq!(hidden["error"]["data"][0]["reason"], "TASK_NOT_FOUND", "as an agent answers it: {hidden}");
    let response =
        mesh.http.get(format!("{}/agents/echo/tasks/{task}", mesh.gateway)).bearer_auth(&globex).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let hidden: Value = response.json().await.unwrap();
    assert_eq!(hidden["error"]["details"][0]["reason"], "TASK_NOT_FOUND", "AIP-193, as an agent answers: {hidden}");
    let (status, own) = mesh.rpc("/agents/echo/", Some(&acme), &get).await;
    assert_eq!((status, own["result"]["id"].as_str()), (200, Some(task.as_str())), "{own}");
    // Another tenant's listing never shows the task (the gateway keeps only the caller's tenant's).
    let list = json!({"jsonrpc": "2.0", "id": 9, "method": "ListTasks", "params": {}});
    let (_, listed) = mesh.rpc("/agents/echo/", Some(&globex), &list).await;
    assert!(!listed.to_string().contains(task.as_str()), "another tenant listed the task: {listed}");

    // The listing shows the agent with its skills.
    let listed: Value = mesh
        .http
        .get(format!("{}/agents", mesh.gateway))
        .bearer_auth(&acme)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["agents"][0]["name"], "echo", "{listed}");
    assert_eq!(listed["agents"][0]["skills"], json!(["echo"]), "{listed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sdk_agents_calling_each_other_through_the_gateway_meet_the_cycle_and_depth_limits() {
    let Some(python) = mesh_test_support::a2a_sdk_python() else { return };
    let mut mesh = Mesh::start(python, |config| gateway::GatewayConfig { call_depth_max: 2, ..config }).await;
    for name in ["a", "b", "c"] {
        mesh.agent(name, &["relay"]).await;
    }
    let acme = token("ann", "acme", USER);
    // a calls b, which answers: one hop.
    let (status, answer) = mesh.send("/agents/a/", Some(&acme), "via:b|hi").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(texts(&answer), ["a <- echo: hi"]);
    // a calls b, which calls a back: the gateway refuses the cycle.
    let (_, answer) = mesh.send("/agents/a/", Some(&acme), "via:b,a|hi").await;
    let text = texts(&answer).join(" ");
    assert!(text.starts_with("a <- b <- refused:") && text.contains("CALL_CYCLE_DETECTED"), "{answer}");
    // a calls b, which calls c: two hops deep, the limit here.
    let (_, answer) = mesh.send("/agents/a/", Some(&acme), "via:b,c|hi").await;
    let text = texts(&answer).join(" ");
    assert!(text.starts_with("a <- b <- refused:") && text.contains("CALL_DEPTH_EXCEEDED"), "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_registry_event_stream_shows_a_call_through_the_gateway() {
    let Some(python) = mesh_test_support::a2a_sdk_python() else { return };
    let mut mesh = Mesh::start(python, |config| config).await;
    mesh.agent("echo", &["echo"]).await;
    let admin = token("operator", "", &[Role::Admin]);
    let mut events = mesh.http.get(format!("{}/api/events", mesh.registry)).bearer_auth(&admin).send().await.unwrap();
    assert!(events.status().is_success());
    let (status, _) = mesh.send("/agents/echo/", Some(&token("ann", "acme", USER)), "hi").await;
    assert_eq!(status, 200);
    let mut seen = String::new();
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(chunk) = events.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.lines().any(|line| {
                line.starts_with("data:") && line.contains("\"to\":\"echo\"") && line.contains("\"from\":\"gateway\"")
            }) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "no call event in {seen}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_agent_fails_over_by_skill_and_opens_its_circuit() {
    let Some(python) = mesh_test_support::a2a_sdk_python() else { return };
    let mut mesh = Mesh::start(python, |config| config).await;
    let (_, first) = mesh.agent("e1", &["echo"]).await;
    mesh.agent("e2", &["echo"]).await;
    let acme = token("ann", "acme", USER);
    // The gateway knows e1 (its card) before it dies.
    let (status, answer) = mesh.send("/agents/e1/", Some(&acme), "hello").await;
    assert_eq!(status, 200, "{answer}");
    mesh.kill(first).await;
    // Every message by skill is answered, by e2, whichever the registry picks first.
    for i in 0..4 {
        let (status, answer) = mesh.send("/skills/echo/", Some(&acme), &format!("m{i}")).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(texts(&answer), [format!("echo: m{i}")]);
    }
    // Called by name, e1 fails until its circuit opens; then calls fail at once.
    let mut codes = Vec::new();
    for _ in 0..5 {
        let (status, answer) = mesh.send("/agents/e1/", Some(&acme), "hi").await;
        assert!(status >= 500, "{answer}");
        codes.push(answer["error"]["data"]["error_code"].as_str().unwrap_or_default().to_owned());
        if codes.last().is_some_and(|code| code == "AGENT_CIRCUIT_OPEN") {
            break;
        }
    }
    assert_eq!(codes.last().map(String::as_str), Some("AGENT_CIRCUIT_OPEN"), "{codes:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_is_routed_by_its_text_to_the_agent_whose_skill_fits_it() {
    let Some(python) = mesh_test_support::a2a_sdk_python() else { return };
    let mut mesh = Mesh::start(python, |config| config).await;
    mesh.agent("e1", &["echo"]).await;
    let acme = token("ann", "acme", USER);
    // Routed once the registry has indexed the agent's card and found it healthy.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let answer = loop {
        let (status, answer) = mesh.send("/route/", Some(&acme), "please echo this back").await;
        if status == 200 {
            break answer;
        }
        assert!(tokio::time::Instant::now() < deadline, "never routed: {answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(texts(&answer), ["echo: please echo this back"], "{answer}");
    // Nothing fits: the mesh's own refusal, naming why.
    let (status, answer) = mesh.send("/route/", Some(&acme), "qqzz xyzzy").await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error"]["data"]["error_code"], "NO_AGENT_FOR_REQUEST", "{answer}");
    // Only messages are routed by their text.
    let get_task = json!({"jsonrpc": "2.0", "id": "r2", "method": "GetTask", "params": {"id": "t-1"}});
    let (_, answer) = mesh.rpc("/route/", Some(&acme), &get_task).await;
    assert!(answer["error"]["message"].as_str().unwrap_or_default().contains("GetTask on a route"), "{answer}");
}
