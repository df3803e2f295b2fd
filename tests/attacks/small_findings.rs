//! Findings 7 (the Host half) and 8: every refusal of the A2A bindings carries the mesh JSON
//! error; a call chain only counts when an agent wrote it; a token is refused before its `nbf`;
//! the suite's agents present short-lived tokens they renew; an open server answers only the
//! hosts it serves (DNS rebinding).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2a_mesh::SuiteConfig;
use base64::Engine;
use mesh_agent_kit::AgentConfig;
use mesh_auth::{AuthConfig, Claims, Role, mint_hs256};
use mesh_client::HttpClient;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::secured::{Mesh, SECRET, message, token};

/// The longest an agent token of the suite may live to count as short-lived.
const AGENT_TOKEN_LIFE_S_MAX: u64 = 3600;
/// Seconds a token's `exp` may lie past the test's own clock reading (it is read first).
const CLOCK_SLACK_S: u64 = 5;
/// Upper bound for a condition a test waits for.
const WAIT_DEADLINE: Duration = Duration::from_secs(20);

/// The status and the mesh error code of an answer, failing unless its body is a mesh JSON error.
async fn mesh_error(answer: reqwest::Response) -> (StatusCode, String) {
    let status = answer.status();
    let content_type = answer.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    let text = answer.text().await.unwrap();
    let body: Value =
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status} answered in plain text: {text:?}"));
    assert_eq!(content_type.as_deref(), Some("application/json"), "{status}: {text}");
    let code = body["error_code"].as_str().unwrap_or_else(|| panic!("no error_code in {body}")).to_owned();
    assert!(body["error_message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    (status, code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bindings_refuse_an_oversize_body_a_bad_path_and_a_bare_websocket_request_in_json() {
    let (mesh, _data) = Mesh::start().await;
    let agent = &mesh.suite.urls.entity_extraction;
    let oversize =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"pad":"{}"}}}}"#, "x".repeat(2 << 20));
    for path in ["/", "/message:send"] {
        let answer = mesh
            .http
            .post(format!("{agent}{path}"))
            .bearer_auth(&mesh.alice)
            .header("content-type", "application/json")
            .body(oversize.clone())
            .send()
            .await
            .unwrap();
        // The body was left unread: the connection is not to be reused (the request below would
        // go into a socket being closed).
        assert_eq!(answer.headers().get("connection").map(|v| v.as_bytes()), Some(&b"close"[..]), "{path}");
        assert_eq!(
            mesh_error(answer).await,
            (StatusCode::PAYLOAD_TOO_LARGE, "REQUEST_BODY_TOO_LARGE".into()),
            "{path}"
        );
    }
    let answer = mesh.http.get(format!("{agent}/tasks/%FF%FE")).bearer_auth(&mesh.alice).send().await.unwrap();
    assert_eq!(mesh_error(answer).await.0, StatusCode::BAD_REQUEST);
    let ws = format!("{}/ws?agent=orchestrator", mesh.suite.urls.ui_agent);
    let answer = mesh.http.get(ws).bearer_auth(&mesh.alice).send().await.unwrap();
    let (status, _) = mesh_error(answer).await;
    assert!(status.is_client_error(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_chain_counts_only_when_an_agent_wrote_it() {
    let (mesh, _data) = Mesh::start().await;
    let agent = &mesh.suite.urls.entity_extraction;
    let send = |bearer: String| {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": message("robots playing soccer")});
        mesh.http
            .post(agent)
            .bearer_auth(bearer)
            .header("A2A-Version", "1.0")
            .header(mesh_protocol::call::CALL_CHAIN_HEADER, "entity_extraction")
            .json(&body)
            .send()
    };
    // The same message without a chain, for comparison: answered.
    let plain = mesh.rpc(agent, &mesh.alice, "SendMessage", message("robots playing soccer")).await;
    assert_eq!(plain["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{plain}");
    // A user is where a chain starts: a chain it writes is nobody's, and the call is its own.
    let answer: Value = send(mesh.alice.clone()).await.unwrap().json().await.unwrap();
    assert_eq!(answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    // An agent's chain counts: the agent is already in it, a cycle.
    let answer = send(token("orchestrator", "", &[Role::Agent])).await.unwrap();
    assert_eq!(answer.status(), StatusCode::LOOP_DETECTED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_refused_before_its_not_before_time() {
    let (mesh, _data) = Mesh::start().await;
    let now_s = Claims::new("x", "", &[], 0).exp;
    let later = Claims { nbf: Some(now_s + 3600), ..Claims::new("ops", "", &[Role::Admin], 7200) };
    let early = mint_hs256(SECRET.as_bytes(), &later).unwrap();
    let (status, body) = mesh.call(Method::GET, &mesh.registry("/agents"), Some(&early), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, _) = mesh.call(Method::GET, &mesh.registry("/agents"), Some(&mesh.admin), None).await;
    assert_eq!(status, StatusCode::OK);
}

/// The `exp` of a JWT, read from its payload.
fn expiry_s(jwt: &str) -> u64 {
    let payload = jwt.split('.').nth(1).unwrap();
    let claims: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    claims["exp"].as_u64().unwrap()
}

#[tokio::test]
async fn the_suites_agents_present_short_lived_tokens_and_renew_them() {
    let data = tempfile::tempdir().unwrap();
    let mut config = SuiteConfig::ephemeral(data.path());
    config.share_auth(&AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() }).unwrap();
    let mut auth = config.search.agent.auth.clone();
    assert_eq!(auth.credential, None, "no long-lived token is handed out");

    // What the agent presents, seen by a server that keeps every Authorization it is sent.
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let kept = seen.clone();
    let router = axum::Router::new().route(
        "/",
        axum::routing::get(move |headers: axum::http::HeaderMap| async move {
            let bearer = headers["authorization"].to_str().unwrap().trim_start_matches("Bearer ").to_owned();
            kept.lock().unwrap().push(bearer);
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });

    let now_s = Claims::new("x", "", &[], 0).exp;
    // The suite's life first, then a short one so the renewal shows within the test.
    for (ttl_s, renewals) in [(auth.credential_self_issued_ttl_s.unwrap(), 0), (2, 1)] {
        auth.credential_self_issued_ttl_s = Some(ttl_s);
        seen.lock().unwrap().clear();
        let http = mesh_server::with_own_credential(&HttpClient::with_reqwest().unwrap(), &auth, "search").unwrap();
        let get = || http.send(axum::http::Request::get(&url).body(bytes::Bytes::new()).unwrap(), WAIT_DEADLINE);
        get().await.unwrap();
        let first = seen.lock().unwrap()[0].clone();
        let life_s = expiry_s(&first) - now_s;
        assert!(life_s <= ttl_s + CLOCK_SLACK_S && life_s <= AGENT_TOKEN_LIFE_S_MAX, "the token lives {life_s} s");
        if renewals == 0 {
            continue;
        }
        let deadline = Instant::now() + WAIT_DEADLINE;
        loop {
            get().await.unwrap();
            let last = seen.lock().unwrap().last().unwrap().clone();
            if last != first {
                assert!(expiry_s(&last) >= expiry_s(&first), "the renewed token lives on");
                break;
            }
            assert!(Instant::now() < deadline, "the token was never renewed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test]
async fn an_open_agent_answers_only_requests_to_its_own_hosts() {
    let (url, _stop) = crate::lone_agent::serve(AgentConfig::default()).await;
    let http = reqwest::Client::new();
    let port = url.rsplit(':').next().unwrap();
    for host in ["evil.example", &format!("evil.example:{port}"), "10.0.0.8"] {
        let answer = http.get(format!("{url}/.well-known/agent-card.json")).header("host", host).send().await.unwrap();
        assert_eq!(
            mesh_error(answer).await,
            (StatusCode::MISDIRECTED_REQUEST, "REQUEST_HOST_NOT_ALLOWED".into()),
            "{host}"
        );
    }
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let answer = http.get(format!("{url}/.well-known/agent-card.json")).header("host", &host).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "{host}");
    }
}
