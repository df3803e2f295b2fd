//! The whole suite with authentication on (one HS256 secret, as `MESH_AUTH_JWT_HS256_SECRET`
//! gives `up`): every route that changes state or lists data refuses a caller without
//! credentials (the registry's routes are read from its own OpenAPI document, so a route added
//! there is checked too), and a caller with the wrong role; tenants never see each other's tasks
//! on any binding; nobody takes another agent's name; the agents still call each other, each as
//! itself; tenants never see each other's conversations. Also protected mode: no service starts open on a non-loopback address.

#[path = "common/secured.rs"]
mod secured;

use a2a_mesh::SuiteConfig;
use mesh_auth::Role;
use reqwest::{Method, StatusCode};
use secured::{Mesh, SECRET, WAIT_DEADLINE, message, token};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_that_changes_or_lists_data_needs_credentials_and_the_right_role() {
    let (mesh, _data) = Mesh::start().await;
    let urls = mesh.suite.urls.clone();

    // The registry's routes, from its own OpenAPI document (public, like the probes).
    let (status, openapi) = mesh.call(Method::GET, &mesh.registry("/openapi.json"), None, None).await;
    assert_eq!(status, StatusCode::OK);
    let mut routes = Vec::new();
    for (path, operations) in openapi["paths"].as_object().unwrap() {
        let path = path.replace("{name}", "search").replace("{id}", "x").replace("{capability}", "search");
        for method in operations.as_object().unwrap().keys() {
            routes.push((Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(), mesh.registry(&path)));
        }
    }
    assert!(routes.len() >= 20, "the registry documents its routes: {routes:?}");
    routes.extend([
        (Method::GET, mesh.registry("/dashboard/agents/search/card")),
        (Method::GET, mesh.registry("/dashboard/agents/search/health")),
    ]);
    // Every agent's task routes on every binding, the search agent's documents, the UI agent.
    let agent = &urls.entity_extraction;
    for path in [
        "/tasks/send",
        "/",
        "/message:send",
        "/message:stream",
        "/acme/message:send",
        "/v1/message:send",
        "/tasks/t1:cancel",
        "/v1/tasks/t1:cancel",
    ] {
        routes.push((Method::POST, format!("{agent}{path}")));
    }
    for path in ["/tasks", "/tasks/t1", "/acme/tasks", "/v1/tasks/t1", "/tasks/t1:subscribe"] {
        routes.push((Method::GET, format!("{agent}{path}")));
    }
    routes.extend([
        (Method::POST, format!("{}/documents", urls.search)),
        (Method::GET, format!("{}/documents/d1", urls.search)),
        (Method::DELETE, format!("{}/documents/d1", urls.search)),
        (Method::GET, format!("{}/conversations", urls.ui_agent)),
        (Method::GET, format!("{}/ws?agent=orchestrator", urls.ui_agent)),
        (Method::POST, format!("{}/conversations/c1/replay", urls.ui_agent)),
    ]);
    for (method, url) in &routes {
        let (status, body) = mesh.call(method.clone(), url, None, Some(json!({}))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {url} without credentials: {body}");
        let forged = token("ops", "", &[Role::Admin]).replace('.', "x.") + "x";
        let (status, _) = mesh.call(method.clone(), url, Some(&forged), Some(json!({}))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {url} with a forged token");
    }
    // Probes and cards stay public.
    for url in [mesh.registry("/health"), format!("{agent}/health"), format!("{agent}/.well-known/agent-card.json")] {
        assert_eq!(mesh.call(Method::GET, &url, None, None).await.0, StatusCode::OK, "{url}");
    }

    // Wrong roles: a user administers nothing and registers nothing.
    let alice = mesh.alice.clone();
    let link = json!({"from": "search", "to": "orchestrator", "direction": "one_way", "relationship": "peer"});
    for (method, url, body) in [
        (Method::POST, mesh.registry("/api/links"), link),
        (Method::POST, mesh.registry("/register"), json!({"name": "search", "url": "http://127.0.0.1:1"})),
        (Method::DELETE, mesh.registry("/agents/search"), json!({})),
        (Method::POST, mesh.registry("/api/events/calls"), json!({"calls": []})),
        (Method::DELETE, format!("{}/documents/d1", urls.search), json!({})),
        (Method::POST, format!("{}/conversations/c1/replay", urls.ui_agent), json!({})),
    ] {
        let (status, answer) = mesh.call(method.clone(), &url, Some(&alice), Some(body)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {url} as a user: {answer}");
        assert_eq!(answer["error_code"], "AUTH_FORBIDDEN");
    }
    // The JSON-RPC binding answers a JSON-RPC error, and the challenge names the scheme.
    let response = mesh
        .http
        .post(agent)
        .json(&json!({"jsonrpc": "2.0", "id": "r9", "method": "SendMessage", "params": message("x")}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers()["www-authenticate"].to_str().unwrap().starts_with("Bearer realm="));
    let answer: Value = response.json().await.unwrap();
    assert_eq!((answer["id"].as_str(), answer["error"]["code"].as_i64()), (Some("r9"), Some(-32041)));
    // Cards tell clients how to authenticate, in 1.0 and 0.3 spellings.
    let card = mesh.call(Method::GET, &format!("{agent}/.well-known/agent-card.json"), None, None).await.1;
    assert_eq!(card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer");
    assert_eq!(card["securityRequirements"][0]["schemes"]["bearer"], json!({"list": []}));
    assert_eq!(card["security"][0], json!({"bearer": []}));

    // The agents call each other as themselves: a user's query is answered in full.
    let answer = mesh
        .call(
            Method::POST,
            &format!("{}/tasks/send", urls.orchestrator),
            Some(&alice),
            Some(json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": "robots playing soccer"}]}]})),
        )
        .await;
    assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
    assert_eq!(answer.1["status"], "SUCCESS", "every hop authenticated: {}", answer.1);
    mesh.suite.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_never_see_each_others_tasks() {
    let (mesh, _data) = Mesh::start().await;
    let agent = mesh.suite.urls.entity_extraction.clone();
    let (alice, bob) = (mesh.alice.clone(), mesh.bob.clone());

    let sent = mesh.rpc(&agent, &alice, "SendMessage", message("Paris in spring")).await;
    let id = sent["result"]["task"]["id"].as_str().unwrap_or_else(|| panic!("{sent}")).to_owned();
    // Alice sees her task on both bindings; Bob is told it does not exist, on every method.
    assert_eq!(mesh.rpc(&agent, &alice, "GetTask", json!({"id": id})).await["result"]["id"], id.as_str());
    let (status, _) = mesh.call(Method::GET, &format!("{agent}/tasks/{id}"), Some(&alice), None).await;
    assert_eq!(status, StatusCode::OK);
    for (method, params) in [("GetTask", json!({"id": id})), ("CancelTask", json!({"id": id}))] {
        let answer = mesh.rpc(&agent, &bob, method, params).await;
        assert_eq!(answer["error"]["code"], -32001, "{method} by another tenant: {answer}");
    }
    for (method, path) in [(Method::GET, format!("/tasks/{id}")), (Method::POST, format!("/tasks/{id}:cancel"))] {
        let (status, _) = mesh.call(method.clone(), &format!("{agent}{path}"), Some(&bob), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path} by another tenant");
    }
    let (status, _) = mesh.call(Method::GET, &format!("{agent}/tasks/{id}:subscribe"), Some(&bob), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "subscribe by another tenant");
    let listed = mesh.rpc(&agent, &bob, "ListTasks", json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let listed = mesh.rpc(&agent, &alice, "ListTasks", json!({})).await;
    assert_eq!(listed["result"]["tasks"].as_array().map(Vec::len), Some(1), "{listed}");
    // 0.3 methods are scoped alike.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": id}});
    let answer: Value =
        mesh.http.post(&agent).bearer_auth(&bob).json(&body).send().await.unwrap().json().await.unwrap();
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    // Naming another tenant does not help a user.
    let (status, body) = mesh.call(Method::GET, &format!("{agent}/acme/tasks/{id}"), Some(&bob), None).await;
    // A2A's HTTP+JSON binding answers it as invalid parameters, naming the tenant refused.
    assert_eq!(
        (status, body["error"]["status"].as_str()),
        (StatusCode::BAD_REQUEST, Some("INVALID_ARGUMENT")),
        "{body}"
    );
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("do not grant tenant \"acme\"")), "{body}");

    // Seed `/tasks/send` records land in the caller's tenant.
    let seed = json!({"id": "seed-1", "messages": [{"role": "user", "parts": [{"type": "text", "text": "Berlin"}]}]});
    let (status, _) = mesh.call(Method::POST, &format!("{agent}/tasks/send"), Some(&alice), Some(seed)).await;
    assert_eq!(status, StatusCode::OK);
    // Acknowledged, so stored: readable at once.
    assert_eq!(mesh.rpc(&agent, &alice, "GetTask", json!({"id": "seed-1"})).await["result"]["id"], "seed-1");
    assert_eq!(mesh.rpc(&agent, &bob, "GetTask", json!({"id": "seed-1"})).await["error"]["code"], -32001);
    // A caller-chosen id never overwrites another caller's record, even in the same tenant; in
    // another tenant the same id is a record of its own.
    let carol = token("carol", "acme", &[Role::User]);
    let reuse = json!({"id": "seed-1", "messages": [{"role": "user", "parts": [{"type": "text", "text": "Rome"}]}]});
    let (status, body) =
        mesh.call(Method::POST, &format!("{agent}/tasks/send"), Some(&carol), Some(reuse.clone())).await;
    assert_eq!((status, body["error_code"].as_str()), (StatusCode::CONFLICT, Some("TASK_ID_TAKEN")), "{body}");
    let kept = mesh.rpc(&agent, &alice, "GetTask", json!({"id": "seed-1"})).await;
    assert!(kept.to_string().contains("Berlin") && !kept.to_string().contains("Rome"), "{kept}");
    let (status, _) = mesh.call(Method::POST, &format!("{agent}/tasks/send"), Some(&bob), Some(reuse)).await;
    assert_eq!(status, StatusCode::OK, "another tenant's seed-1 is its own");
    mesh.suite.stop().await.unwrap();
}

/// Opens a WebSocket conversation with the orchestrator through the UI agent as `bearer`
/// (`query` appended to the URL), says one line and waits for the answer; returns the
/// conversation id, or the refusal's status.
async fn converse(mesh: &Mesh, bearer: &str, query: &str) -> Result<String, StatusCode> {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!("{}/ws?agent=orchestrator{query}", mesh.suite.urls.ui_agent.replacen("http://", "ws://", 1));
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {bearer}").parse().unwrap());
    let (mut socket, response) = match tokio_tungstenite::connect_async(request).await {
        Ok(connected) => connected,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            return Err(StatusCode::from_u16(response.status().as_u16()).unwrap());
        }
        Err(error) => panic!("cannot open the socket: {error}"),
    };
    let id = response.headers()[ui_agent::WS_CONVERSATION_HEADER].to_str().unwrap().to_owned();
    socket.send(tokio_tungstenite::tungstenite::Message::Text("robots playing soccer".into())).await.unwrap();
    let answer = tokio::time::timeout(WAIT_DEADLINE, socket.next()).await.expect("an answer in time");
    assert!(matches!(answer, Some(Ok(tokio_tungstenite::tungstenite::Message::Text(_)))), "{answer:?}");
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_never_see_each_others_conversations() {
    let (mesh, _data) = Mesh::start().await;
    let ui = mesh.suite.urls.ui_agent.clone();
    let conversation = converse(&mesh, &mesh.alice, "").await.unwrap();
    let listed = |body: &Value| -> Vec<String> {
        let conversations = body["conversations"].as_array().cloned().unwrap_or_default();
        conversations.iter().filter_map(|c| c["id"].as_str().map(str::to_owned)).collect()
    };

    // Alice lists and reads her conversation, in her tenant.
    let (status, body) = mesh.call(Method::GET, &format!("{ui}/conversations"), Some(&mesh.alice), None).await;
    assert_eq!((status, listed(&body)), (StatusCode::OK, vec![conversation.clone()]), "{body}");
    assert_eq!(body["conversations"][0]["tenant"], "acme");
    for path in [format!("/conversations/{conversation}"), format!("/conversations/{conversation}/messages?as=x")] {
        let (status, body) = mesh.call(Method::GET, &format!("{ui}{path}"), Some(&mesh.alice), None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }

    // Bob neither lists, reads, replays nor resumes it: it does not exist for him.
    let (status, body) = mesh.call(Method::GET, &format!("{ui}/conversations"), Some(&mesh.bob), None).await;
    assert_eq!((status, listed(&body)), (StatusCode::OK, vec![]), "{body}");
    let message = {
        let (_, tree) =
            mesh.call(Method::GET, &format!("{ui}/conversations/{conversation}"), Some(&mesh.alice), None).await;
        tree["nodes"][1]["id"].as_str().unwrap().to_owned()
    };
    for path in [
        format!("/conversations/{conversation}"),
        format!("/conversations/{conversation}/messages?as=x"),
        format!("/conversations/{message}"),
    ] {
        let (status, body) = mesh.call(Method::GET, &format!("{ui}{path}"), Some(&mesh.bob), None).await;
        assert_eq!((status, body["error_code"].as_str()), (StatusCode::NOT_FOUND, Some("CONVERSATION_NOT_FOUND")));
    }
    assert_eq!(converse(&mesh, &mesh.bob, &format!("&conversation={conversation}")).await, Err(StatusCode::NOT_FOUND));
    // Naming Alice's tenant does not help him.
    let (status, _) = mesh.call(Method::GET, &format!("{ui}/conversations?tenant=acme"), Some(&mesh.bob), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(converse(&mesh, &mesh.bob, "&tenant=acme").await, Err(StatusCode::FORBIDDEN));

    // Alice resumes it; an operator sees every tenant's, or one tenant's.
    assert_eq!(converse(&mesh, &mesh.alice, &format!("&conversation={conversation}")).await, Ok(conversation.clone()));
    let (_, body) = mesh.call(Method::GET, &format!("{ui}/conversations"), Some(&mesh.admin), None).await;
    assert!(listed(&body).contains(&conversation), "{body}");
    let (_, body) = mesh.call(Method::GET, &format!("{ui}/conversations?tenant=globex"), Some(&mesh.admin), None).await;
    assert!(listed(&body).is_empty(), "{body}");
    let (status, body) =
        mesh.call(Method::POST, &format!("{ui}/conversations/{conversation}/replay"), Some(&mesh.admin), None).await;
    assert_eq!((status, body["matches_docmem"].as_bool()), (StatusCode::OK, Some(true)), "{body}");
    mesh.suite.stop().await.unwrap();
}

/// The ids of the documents a search by `bearer` finds for `query`, over the seed format.
async fn found_documents(mesh: &Mesh, bearer: &str, query: &str) -> Vec<String> {
    let task = json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": query}]}]});
    let url = format!("{}/tasks/send", mesh.suite.urls.search);
    let (status, body) = mesh.call(Method::POST, &url, Some(bearer), Some(task)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let results = body["messages"][0]["parts"][0]["data"]["results"].as_array().cloned().unwrap_or_default();
    results.iter().filter_map(|hit| hit["id"].as_str().map(str::to_owned)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_searches_the_shared_corpus_and_its_own_documents_never_another_tenants() {
    let (mesh, _data) = Mesh::start().await;
    let search = mesh.suite.urls.search.clone();
    let own = json!({"documents": [{"_id": "acme-quokka", "title": "Quokka telescope", "text": "A quokka builds a telescope."}]});
    let (status, body) =
        mesh.call(Method::POST, &format!("{search}/documents?tenant=acme"), Some(&mesh.admin), Some(own.clone())).await;
    assert_eq!((status, body["tenant"].as_str()), (StatusCode::OK, Some("acme")), "{body}");
    // Only an admin adds documents, to any tenant; a user cannot, not even to its own.
    let (status, _) =
        mesh.call(Method::POST, &format!("{search}/documents?tenant=acme"), Some(&mesh.alice), Some(own)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    assert!(found_documents(&mesh, &mesh.alice, "quokka telescope").await.contains(&"acme-quokka".to_owned()));
    assert!(!found_documents(&mesh, &mesh.bob, "quokka telescope").await.contains(&"acme-quokka".to_owned()));
    let shared = found_documents(&mesh, &mesh.bob, "robots playing soccer").await;
    assert!(!shared.is_empty(), "every tenant searches the shared corpus");
    assert_eq!(found_documents(&mesh, &mesh.alice, "robots playing soccer").await, shared);
    // The tenant comes from the credential: the tenant a user's call context names is replaced by its own.
    let task = json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": "quokka telescope"}]}]});
    let borrowed = mesh
        .http
        .post(format!("{search}/tasks/send"))
        .bearer_auth(&mesh.bob)
        .header("x-mesh-tenant", "acme")
        .json(&task);
    let answer = borrowed.send().await.unwrap();
    let status = answer.status();
    let body = answer.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body.contains("acme-quokka"), "a user's call acts in its credential's tenant: {body}");

    // Reads: a user's own tenant first, then the shared corpus; another tenant's are not found,
    // and naming another tenant is refused.
    let (status, body) =
        mesh.call(Method::GET, &format!("{search}/documents/acme-quokka"), Some(&mesh.alice), None).await;
    assert_eq!((status, body["tenant"].as_str()), (StatusCode::OK, Some("acme")), "{body}");
    let (status, _) = mesh.call(Method::GET, &format!("{search}/documents/acme-quokka"), Some(&mesh.bob), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) =
        mesh.call(Method::GET, &format!("{search}/documents/acme-quokka?tenant=acme"), Some(&mesh.bob), None).await;
    assert_eq!((status, body["error_code"].as_str()), (StatusCode::FORBIDDEN, Some("TENANT_FORBIDDEN")), "{body}");
    let (status, body) =
        mesh.call(Method::GET, &format!("{search}/documents/x?tenant=no%2Fslash"), Some(&mesh.admin), None).await;
    assert_eq!((status, body["error_code"].as_str()), (StatusCode::BAD_REQUEST, Some("TENANT_INVALID")), "{body}");

    // The orchestrator's fan-out searches as the user: the tenant travels with the call.
    let ask = |bearer: String| {
        let orchestrator = mesh.suite.urls.orchestrator.clone();
        let task = json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": "quokka telescope"}]}]});
        let http = mesh.http.clone();
        async move {
            let answer =
                http.post(format!("{orchestrator}/tasks/send")).bearer_auth(bearer).json(&task).send().await.unwrap();
            answer.text().await.unwrap()
        }
    };
    assert!(ask(mesh.alice.clone()).await.contains("acme-quokka"));
    assert!(!ask(mesh.bob.clone()).await.contains("acme-quokka"));

    let (status, _) =
        mesh.call(Method::DELETE, &format!("{search}/documents/acme-quokka"), Some(&mesh.admin), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a delete without ?tenant= addresses the shared corpus");
    let (status, _) = mesh
        .call(Method::DELETE, &format!("{search}/documents/acme-quokka?tenant=acme"), Some(&mesh.admin), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(!found_documents(&mesh, &mesh.alice, "quokka telescope").await.contains(&"acme-quokka".to_owned()));
    mesh.suite.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_takes_another_agents_name() {
    let (mesh, _data) = Mesh::start().await;
    let registration = |name: &str| json!({"name": name, "url": "http://127.0.0.1:9", "capabilities": ["x"]});
    let intruder = token("intruder", "", &[Role::Agent]);
    // An agent registers only under its own name, and removes no one else.
    let (status, answer) =
        mesh.call(Method::POST, &mesh.registry("/register"), Some(&intruder), Some(registration("search"))).await;
    assert_eq!((status, answer["error_code"].as_str()), (StatusCode::FORBIDDEN, Some("NAME_FORBIDDEN")));
    let (status, _) = mesh.call(Method::DELETE, &mesh.registry("/agents/search"), Some(&intruder), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A name an admin registered is the admin's: the agent of that name is refused.
    let (status, answer) =
        mesh.call(Method::POST, &mesh.registry("/register"), Some(&mesh.admin), Some(registration("shared"))).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let shared = token("shared", "", &[Role::Agent]);
    let (status, answer) =
        mesh.call(Method::POST, &mesh.registry("/register"), Some(&shared), Some(registration("shared"))).await;
    assert_eq!((status, answer["error_code"].as_str()), (StatusCode::CONFLICT, Some("NAME_TAKEN")), "{answer}");
    // Its own name is the agent's to hold and to remove.
    let (status, _) =
        mesh.call(Method::POST, &mesh.registry("/register"), Some(&intruder), Some(registration("intruder"))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = mesh.call(Method::DELETE, &mesh.registry("/agents/intruder"), Some(&intruder), None).await;
    assert_eq!(status, StatusCode::OK);
    // The search agent, registered with its own token, is still there.
    let (status, _) = mesh.call(Method::GET, &mesh.registry("/agents/search"), Some(&mesh.bob), None).await;
    assert_eq!(status, StatusCode::OK);
    mesh.suite.stop().await.unwrap();
}

#[tokio::test]
async fn no_service_starts_open_off_loopback_unless_told_to() {
    let data = tempfile::tempdir().unwrap();
    let mut config = SuiteConfig::ephemeral(data.path());
    config.registry.host = "0.0.0.0".into();
    let refused = registry::Application::build(&config.registry).await.unwrap_err().to_string();
    assert!(refused.contains("refusing to listen on 0.0.0.0"), "{refused}");
    config.registry.auth.insecure = true;
    assert!(registry::Application::build(&config.registry).await.is_ok());

    let mut ui = config.ui_agent.clone();
    ui.host = "0.0.0.0".into();
    assert!(ui_agent::UiAgent::build(&ui).await.is_err());
    let mut agent = config.entity_extraction.clone();
    agent.agent.host = "0.0.0.0".into();
    let refused = entity_extraction::build(&agent, mesh_client::HttpClient::with_reqwest().unwrap()).await.unwrap_err();
    assert!(refused.to_string().contains("refusing"), "{refused}");
    agent.agent.auth.jwt_hs256_secret = Some(SECRET.into());
    assert!(entity_extraction::build(&agent, mesh_client::HttpClient::with_reqwest().unwrap()).await.is_ok());
}
