//! The communication graph's API against a real registry on port 0: link CRUD and its errors,
//! the topology, org chart and policy feed, configured links and their precedence, link messages,
//! and the event stream's order and resumption.

use std::time::Duration;

use mesh_protocol::graph::{
    EventBody, GraphMode, GraphPolicy, Link, LinkDirection, LinkList, LinkMessages, LinkRelationship, LinkSource,
    MeshEvent, OrgChart, Topology,
};
use registry::LinkDef;
use serde_json::{Value, json};

use crate::common::{FakeAgent, TestRegistry, eventually};

/// The registry with agents `names` registered (fake agents that stay up while it runs).
async fn registry_with(names: &[&str]) -> (TestRegistry, Vec<FakeAgent>) {
    let registry = TestRegistry::start().await;
    let mut agents = Vec::new();
    for name in names {
        let agent = FakeAgent::start(name).await;
        registry.client.register(&agent.registration(&["work"])).await.unwrap();
        agents.push(agent);
    }
    (registry, agents)
}

async fn send(registry: &TestRegistry, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = registry.http.request(method, format!("{}{path}", registry.url));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path} answered {status} without JSON: {text}")))
}

async fn create(registry: &TestRegistry, body: Value) -> (u16, Value) {
    send(registry, reqwest::Method::POST, "/api/links", Some(body)).await
}

fn code(body: &Value) -> &str {
    body["error_code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn links_are_created_read_updated_listed_and_deleted() {
    let (registry, _agents) = registry_with(&["boss", "worker", "peer"]).await;

    let (status, body) = create(
        &registry,
        json!({"from_agent_id":"boss","to_agent_id":"worker","direction":"one_way","relationship":"superior"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let link: Link = serde_json::from_value(body).unwrap();
    assert_eq!(
        (link.direction, link.relationship, link.enabled),
        (LinkDirection::OneWay, LinkRelationship::Superior, true)
    );
    assert_eq!(link.source, LinkSource::Api);
    let (_, peer) = create(&registry, json!({"from_agent_id":"worker","to_agent_id":"peer"})).await;

    let (status, fetched) = send(&registry, reqwest::Method::GET, &format!("/api/links/{}", link.id), None).await;
    assert_eq!((status, serde_json::from_value::<Link>(fetched).unwrap()), (200, link.clone()));

    let (status, updated) = send(
        &registry,
        reqwest::Method::PUT,
        &format!("/api/links/{}", link.id),
        Some(json!({"enabled": false, "direction": "two_way"})),
    )
    .await;
    assert_eq!(status, 200, "{updated}");
    let updated: Link = serde_json::from_value(updated).unwrap();
    assert_eq!(
        (updated.enabled, updated.direction, updated.relationship),
        (false, LinkDirection::TwoWay, LinkRelationship::Superior)
    );
    assert!(updated.updated_at >= link.updated_at);

    let (_, all) = send(&registry, reqwest::Method::GET, "/api/links", None).await;
    assert_eq!(serde_json::from_value::<LinkList>(all).unwrap().links.len(), 2);
    let (_, boss) = send(&registry, reqwest::Method::GET, "/api/agents/boss/links", None).await;
    let boss: LinkList = serde_json::from_value(boss).unwrap();
    assert_eq!((boss.agent_id.as_deref(), boss.links.len()), (Some("boss"), 1));
    let (_, worker) = send(&registry, reqwest::Method::GET, "/api/agents/worker/links", None).await;
    assert_eq!(serde_json::from_value::<LinkList>(worker).unwrap().links.len(), 2);

    let (status, _) = send(&registry, reqwest::Method::DELETE, &format!("/api/links/{}", link.id), None).await;
    assert_eq!(status, 200);
    let (status, gone) = send(&registry, reqwest::Method::GET, &format!("/api/links/{}", link.id), None).await;
    assert_eq!((status, code(&gone)), (404, "LINK_NOT_FOUND"));
    let (status, gone) = send(&registry, reqwest::Method::DELETE, &format!("/api/links/{}", link.id), None).await;
    assert_eq!((status, code(&gone)), (404, "LINK_NOT_FOUND"));
    let (_, all) = send(&registry, reqwest::Method::GET, "/api/links", None).await;
    assert_eq!(serde_json::from_value::<LinkList>(all).unwrap().links[0].id, peer["id"].as_str().unwrap());
    registry.stop().await;
}

#[tokio::test]
async fn bad_links_get_json_errors_naming_the_problem() {
    let (registry, _agents) = registry_with(&["a", "b"]).await;
    let (status, body) = create(&registry, json!({"from_agent_id":"a","to_agent_id":"ghost"})).await;
    assert_eq!((status, code(&body)), (404, "AGENT_NOT_FOUND"));
    assert!(body["error_message"].as_str().unwrap().contains("ghost"));
    let (status, body) = create(&registry, json!({"from_agent_id":"a","to_agent_id":"a"})).await;
    assert_eq!((status, code(&body)), (400, "LINK_SELF"));
    let (status, body) = create(&registry, json!({"from_agent_id":"a","to_agent_id":"b","relationship":"boss"})).await;
    assert_eq!((status, code(&body)), (422, "REQUEST_INVALID_BODY"));
    assert!(body["error_message"].as_str().unwrap().contains("boss"), "{body}");
    let (status, body) = create(&registry, json!({"from_agent_id":"a","to_agent_id":"b","colour":"red"})).await;
    assert_eq!((status, code(&body)), (422, "REQUEST_INVALID_BODY"));

    let (status, _) = create(&registry, json!({"from_agent_id":"a","to_agent_id":"b"})).await;
    assert_eq!(status, 201);
    let (status, body) = create(&registry, json!({"from_agent_id":"a","to_agent_id":"b","direction":"one_way"})).await;
    assert_eq!((status, code(&body)), (409, "LINK_EXISTS"));
    // The reverse direction is another pair.
    let (status, _) = create(&registry, json!({"from_agent_id":"b","to_agent_id":"a"})).await;
    assert_eq!(status, 201);

    let (status, body) = send(&registry, reqwest::Method::PUT, "/api/links/nope", Some(json!({"enabled":true}))).await;
    assert_eq!((status, code(&body)), (404, "LINK_NOT_FOUND"));
    let (status, body) = send(&registry, reqwest::Method::GET, "/api/links/nope/messages?limit=0", None).await;
    assert_eq!((status, code(&body)), (400, "LINK_INVALID"));
    registry.stop().await;
}

#[tokio::test]
async fn topology_org_chart_and_policy_describe_the_graph() {
    let (registry, _agents) = registry_with(&["ceo", "cto", "dev", "cfo"]).await;
    for (from, to, relationship) in
        [("ceo", "cto", "superior"), ("dev", "cto", "subordinate"), ("cto", "cfo", "peer"), ("ceo", "cfo", "superior")]
    {
        let (status, body) =
            create(&registry, json!({"from_agent_id":from,"to_agent_id":to,"relationship":relationship})).await;
        assert_eq!(status, 201, "{body}");
    }
    eventually("every agent's health is known", || async {
        registry.client.stats().await.unwrap().healthy_agents == 4
    })
    .await;

    let (_, topology) = send(&registry, reqwest::Method::GET, "/api/topology", None).await;
    let topology: Topology = serde_json::from_value(topology).unwrap();
    assert_eq!(topology.mode, GraphMode::Open);
    let mut ids: Vec<_> = topology.agents.iter().map(|a| a.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["ceo", "cfo", "cto", "dev"]);
    assert!(topology.agents.iter().all(|a| a.capabilities == ["work"]));
    assert_eq!(topology.links.len(), 4);
    assert!(
        topology
            .links
            .iter()
            .any(|l| l.from == "dev" && l.to == "cto" && l.relationship == LinkRelationship::Subordinate)
    );

    let (_, org) = send(&registry, reqwest::Method::GET, "/api/agents/cto/org", None).await;
    let org: OrgChart = serde_json::from_value(org).unwrap();
    assert_eq!(
        (org.superiors, org.subordinates, org.peers),
        (vec!["ceo".to_owned()], vec!["dev".to_owned()], vec!["cfo".to_owned()])
    );

    let response = registry.http.get(format!("{}/api/policy", registry.url)).send().await.unwrap();
    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
    let policy: GraphPolicy = response.json().await.unwrap();
    assert_eq!((policy.mode, policy.links.len()), (GraphMode::Open, 4));
    let again =
        registry.http.get(format!("{}/api/policy", registry.url)).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(again.status(), 304);
    let (_, _) = create(&registry, json!({"from_agent_id":"cfo","to_agent_id":"dev"})).await;
    let changed =
        registry.http.get(format!("{}/api/policy", registry.url)).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(changed.status(), 200);
    assert_ne!(changed.headers()["etag"].to_str().unwrap(), etag);
    registry.stop().await;
}

fn def(from: &str, to: &str, direction: LinkDirection, relationship: LinkRelationship) -> LinkDef {
    LinkDef { from: from.into(), to: to.into(), direction, relationship, enabled: true }
}

async fn links(registry: &TestRegistry) -> Vec<Link> {
    let (_, list) = send(registry, reqwest::Method::GET, "/api/links", None).await;
    serde_json::from_value::<LinkList>(list).unwrap().links
}

#[tokio::test]
async fn configured_links_are_synced_at_start_and_on_reload_and_the_configuration_wins() {
    let data = tempfile::tempdir().unwrap();
    let database_url = format!("sqlite://{}", data.path().join("registry.db").display());
    let configured = vec![
        def("orchestrator", "search", LinkDirection::OneWay, LinkRelationship::Superior),
        def("orchestrator", "planner", LinkDirection::TwoWay, LinkRelationship::Superior),
    ];
    let first = configured.clone();
    let registry = TestRegistry::start_on(database_url.clone(), None, move |c| {
        c.links = first;
        c.graph_mode = GraphMode::Enforced;
    })
    .await;
    let synced = links(&registry).await;
    assert_eq!(synced.len(), 2);
    assert!(synced.iter().all(|l| l.source == LinkSource::Config));
    let search = synced.iter().find(|l| l.to_agent_id == "search").unwrap().clone();
    assert_eq!((search.direction, search.relationship), (LinkDirection::OneWay, LinkRelationship::Superior));

    // An operator changes a configured link through the API and adds one of their own.
    let agents = [FakeAgent::start("planner").await, FakeAgent::start("search").await];
    for agent in &agents {
        registry.client.register(&agent.registration(&["work"])).await.unwrap();
    }
    let (status, _) = send(
        &registry,
        reqwest::Method::PUT,
        &format!("/api/links/{}", search.id),
        Some(json!({"direction":"two_way","enabled":false})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = create(&registry, json!({"from_agent_id":"search","to_agent_id":"planner"})).await;
    assert_eq!(status, 201);

    // Reload: the configuration wins over the API change, the API's own link stays, and a link
    // dropped from the configuration goes.
    let mut reloaded = configured.clone();
    reloaded.truncate(1);
    let config = registry::RegistryConfig { links: reloaded, graph_mode: GraphMode::Open, ..Default::default() };
    registry.service.reload_graph(&config).await.unwrap();
    let after = links(&registry).await;
    assert_eq!(after.len(), 2, "{after:?}");
    let search_after = after.iter().find(|l| l.to_agent_id == "search" && l.from_agent_id == "orchestrator").unwrap();
    assert_eq!((search_after.direction, search_after.enabled), (LinkDirection::OneWay, true));
    assert_eq!(search_after.id, search.id, "the link keeps its id and so its history");
    assert!(after.iter().any(|l| l.from_agent_id == "search" && l.source == LinkSource::Api));
    let (_, policy) = send(&registry, reqwest::Method::GET, "/api/policy", None).await;
    assert_eq!(policy["mode"], "open");
    registry.stop().await;

    // A restart over the same database with the full configuration brings the dropped link back.
    let registry = TestRegistry::start_on(database_url, Some(data), move |c| c.links = configured).await;
    assert_eq!(links(&registry).await.len(), 3);
    registry.stop().await;
}

#[tokio::test]
async fn link_messages_are_kept_in_order_for_the_links_ends_only() {
    let (registry, _agents) = registry_with(&["boss", "worker", "stranger"]).await;
    let (_, link) =
        create(&registry, json!({"from_agent_id":"boss","to_agent_id":"worker","relationship":"superior"})).await;
    let id = link["id"].as_str().unwrap();
    let path = format!("/api/links/{id}/messages");
    for (n, (from, to)) in [("boss", "worker"), ("worker", "boss"), ("boss", "worker")].into_iter().enumerate() {
        let (status, body) = send(
            &registry,
            reqwest::Method::POST,
            &path,
            Some(json!({"from_agent_id":from,"to_agent_id":to,"context_id":format!("link:{id}"),
                        "text":format!("message {n}"),"reply":"ok","status":"SUCCESS"})),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = send(
        &registry,
        reqwest::Method::POST,
        &path,
        Some(
            json!({"from_agent_id":"stranger","to_agent_id":"worker","context_id":"x","text":"hi","status":"SUCCESS"}),
        ),
    )
    .await;
    assert_eq!((status, code(&body)), (403, "LINK_SENDER_FORBIDDEN"), "a sender that is not an end of the link");
    let (status, body) = send(
        &registry,
        reqwest::Method::POST,
        &path,
        Some(json!({"from_agent_id":"boss","to_agent_id":"stranger","context_id":"x","text":"hi","status":"SUCCESS"})),
    )
    .await;
    assert_eq!((status, code(&body)), (400, "LINK_INVALID"), "a receiver that is not the other end");

    let (_, history) = send(&registry, reqwest::Method::GET, &path, None).await;
    let history: LinkMessages = serde_json::from_value(history).unwrap();
    let texts: Vec<_> = history.messages.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["message 0", "message 1", "message 2"]);
    // The relationship is the sender's: the worker reports to its superior.
    assert_eq!(history.messages[0].relationship, LinkRelationship::Superior);
    assert_eq!(history.messages[1].relationship, LinkRelationship::Subordinate);
    let (_, newest) = send(&registry, reqwest::Method::GET, &format!("{path}?limit=2"), None).await;
    assert_eq!(serde_json::from_value::<LinkMessages>(newest).unwrap().messages[0].text, "message 1");

    // Deleting the link deletes its history.
    send(&registry, reqwest::Method::DELETE, &format!("/api/links/{id}"), None).await;
    let (status, _) = send(&registry, reqwest::Method::GET, &path, None).await;
    assert_eq!(status, 404);
    registry.stop().await;
}

#[tokio::test]
async fn receipts_come_from_the_receiving_end_only_over_an_enabled_link_for_its_tenants() {
    use mesh_auth::{AuthConfig, Claims, Role, mint_hs256};
    const SECRET: &str = "a-receipts-test-secret-of-32-bytes!!";
    let token = |subject: &str, tenant: &str, roles: &[Role]| {
        mint_hs256(SECRET.as_bytes(), &Claims::new(subject, tenant, roles, 3_600)).unwrap()
    };
    let registry = TestRegistry::start_with(|config| {
        config.auth = AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() };
    })
    .await;
    let admin = token("ops", "", &[Role::Admin]);
    let mut agents = Vec::new();
    for name in ["boss", "worker"] {
        let agent = FakeAgent::start(name).await;
        let response = registry
            .http
            .post(format!("{}/register", registry.url))
            .bearer_auth(token(name, "", &[Role::Agent]))
            .json(&agent.registration(&["work"]))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        agents.push(agent);
    }
    let post = |path: String, bearer: Option<String>, body: Value| {
        let mut request = registry.http.post(format!("{}{path}", registry.url)).json(&body);
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, link) = post(
        "/api/links".into(),
        Some(admin.clone()),
        json!({"from_agent_id":"boss","to_agent_id":"worker","direction":"one_way","relationship":"superior"}),
    )
    .await;
    assert_eq!(status, 201, "{link}");
    let id = link["id"].as_str().unwrap().to_owned();
    let receipts = format!("/api/links/{id}/receipts");
    let receipt = |from: &str, to: &str| {
        json!({"from_agent_id":from,"to_agent_id":to,"context_id":format!("link:{id}"),"message_id":"m1",
               "task_id":"t1","status":"SUCCESS","tenant":"acme"})
    };
    let worker = Some(token("worker", "", &[Role::Agent]));

    let (status, body) = post(receipts.clone(), worker.clone(), receipt("boss", "worker")).await;
    assert_eq!((status, body["message"].clone()), (202, json!("received")), "{body}");
    let (status, body) =
        post(receipts.clone(), Some(token("boss", "", &[Role::Agent])), receipt("worker", "boss")).await;
    assert_eq!(status, 202, "an answer inside the boss's conversation is received by the boss: {body}");
    for (bearer, body, expected) in [
        (None, receipt("boss", "worker"), (401, "AUTH_REQUIRED")),
        (Some(token("alice", "acme", &[Role::User])), receipt("boss", "worker"), (403, "AUTH_FORBIDDEN")),
        (Some(token("boss", "", &[Role::Agent])), receipt("boss", "worker"), (403, "LINK_SENDER_FORBIDDEN")),
        (worker.clone(), receipt("stranger", "worker"), (400, "LINK_INVALID")),
        (
            worker.clone(),
            json!({"from_agent_id":"boss","to_agent_id":"worker","context_id":"link:other",
                                "message_id":"m1","status":"SUCCESS"}),
            (400, "LINK_INVALID"),
        ),
        (
            worker.clone(),
            json!({"from_agent_id":"boss","to_agent_id":"worker","context_id":format!("link:{id}"),
                                "message_id":"","status":"SUCCESS"}),
            (400, "LINK_INVALID"),
        ),
        (Some(token("worker", "globex", &[Role::Agent])), receipt("boss", "worker"), (403, "TENANT_FORBIDDEN")),
        (worker.clone(), json!({"to_agent_id":"worker"}), (422, "")),
    ] {
        let (status, answer) = post(receipts.clone(), bearer, body.clone()).await;
        assert_eq!(status, expected.0, "{body}: {answer}");
        if !expected.1.is_empty() {
            assert_eq!(code(&answer), expected.1, "{body}: {answer}");
        }
        assert!(answer["error_message"].is_string(), "a JSON error body: {answer}");
    }
    let (status, body) = post("/api/links/nope/receipts".into(), worker.clone(), receipt("boss", "worker")).await;
    assert_eq!((status, code(&body)), (404, "LINK_NOT_FOUND"));
    let disable = registry
        .http
        .put(format!("{}/api/links/{id}", registry.url))
        .bearer_auth(&admin)
        .json(&json!({"enabled": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(disable.status(), 200);
    let (status, body) = post(receipts, worker, receipt("boss", "worker")).await;
    assert_eq!((status, code(&body)), (409, "LINK_DISABLED"));
    registry.stop().await;
}

/// A Server-Sent Events reader over a raw response.
struct EventStream {
    response: reqwest::Response,
    buffer: String,
}

impl EventStream {
    async fn open(registry: &TestRegistry, last_event_id: Option<u64>) -> Self {
        let mut request = registry.http.get(format!("{}/api/events", registry.url));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Self { response, buffer: String::new() }
    }

    /// The next event (keep-alive comments skipped), checking its SSE id and name match its body.
    async fn next(&mut self) -> MeshEvent {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let field =
                    |name: &str| frame.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim_start().to_owned());
                let Some(data) = field("data:") else { continue };
                let event: MeshEvent = serde_json::from_str(&data).unwrap();
                assert_eq!(field("id:"), Some(event.id.to_string()));
                assert_eq!(field("event:").as_deref(), Some(event.body.kind()));
                return event;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.response.chunk())
                .await
                .expect("an event within 10 s")
                .unwrap()
                .expect("the stream stays open");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

#[tokio::test]
async fn events_arrive_in_order_and_a_stream_resumes_after_its_last_event() {
    let (registry, agents) = registry_with(&["a", "b"]).await;
    eventually("both agents are healthy", || async { registry.client.stats().await.unwrap().healthy_agents == 2 })
        .await;
    let mut stream = EventStream::open(&registry, None).await;

    let (_, link) = create(&registry, json!({"from_agent_id":"a","to_agent_id":"b"})).await;
    let id = link["id"].as_str().unwrap().to_owned();
    send(&registry, reqwest::Method::PUT, &format!("/api/links/{id}"), Some(json!({"enabled":false}))).await;
    let (status, accepted) = send(
        &registry,
        reqwest::Method::POST,
        "/api/events/calls",
        Some(json!({"calls":[{"from":"a","to":"b","capability":"work","status":"SUCCESS","latency_ms":7},
                             {"from":"b","to":"a","status":"TIMEOUT","latency_ms":30000}]})),
    )
    .await;
    assert_eq!((status, accepted["accepted"].as_u64()), (202, Some(2)));
    let message =
        json!({"from_agent_id":"a","to_agent_id":"b","context_id":format!("link:{id}"),"text":"hi","status":"SUCCESS"});
    let messages = format!("/api/links/{id}/messages");
    let (status, body) = send(&registry, reqwest::Method::POST, &messages, Some(message.clone())).await;
    assert_eq!((status, code(&body)), (409, "LINK_DISABLED"), "nothing is recorded over a disabled link");
    send(&registry, reqwest::Method::PUT, &format!("/api/links/{id}"), Some(json!({"enabled":true}))).await;
    let (status, body) = send(&registry, reqwest::Method::POST, &messages, Some(message)).await;
    assert_eq!(status, 201, "{body}");
    // Received is the receiver's word: its receipt, not the sender's record, publishes it.
    let receipt = json!({"from_agent_id":"a","to_agent_id":"b","context_id":format!("link:{id}"),
                         "message_id":"a2a-m1","status":"SUCCESS"});
    let (status, body) =
        send(&registry, reqwest::Method::POST, &format!("/api/links/{id}/receipts"), Some(receipt)).await;
    assert_eq!(status, 202, "{body}");
    agents[1].answer_health(500);
    send(&registry, reqwest::Method::DELETE, &format!("/api/links/{id}"), None).await;

    let mut seen = Vec::new();
    for _ in 0..8 {
        seen.push(stream.next().await);
    }
    let kinds: Vec<_> = seen.iter().map(|e| e.body.kind()).collect();
    assert_eq!(
        kinds[..7],
        [
            "link_created",
            "link_updated",
            "call",
            "call",
            "link_updated",
            "agent_message_sent",
            "agent_message_received"
        ]
    );
    // The health change and the deletion race each other; both come, in id order.
    let mut last = vec![kinds[7]];
    last.push(stream.next().await.body.kind());
    last.sort();
    assert_eq!(last, ["health_changed", "link_deleted"]);
    assert!(seen.windows(2).all(|w| w[0].id < w[1].id));
    match &seen[2].body {
        EventBody::Call { from, to, capability, latency_ms, .. } => {
            assert_eq!((from.as_str(), to.as_str(), capability.as_deref(), *latency_ms), ("a", "b", Some("work"), 7));
        }
        other => panic!("expected a call, got {other:?}"),
    }
    drop(stream);

    // Resuming after the second event replays the rest, in order, then goes live.
    let mut resumed = EventStream::open(&registry, Some(seen[1].id)).await;
    for expected in &seen[2..] {
        assert_eq!(resumed.next().await.id, expected.id);
    }
    let (status, body) = send(
        &registry,
        reqwest::Method::POST,
        "/api/events/calls",
        Some(json!({"calls":(0..1001).map(|_| json!({"from":"a","to":"b","status":"SUCCESS","latency_ms":1})).collect::<Vec<_>>()})),
    )
    .await;
    assert_eq!((status, code(&body)), (400, "LINK_INVALID"));
    registry.stop().await;
}

#[tokio::test]
async fn event_streams_are_bounded_and_end_when_the_registry_stops() {
    let registry = TestRegistry::start_with(|c| c.event_subscribers_max = 1).await;
    let _open = EventStream::open(&registry, None).await;
    let (status, body) = send(&registry, reqwest::Method::GET, "/api/events", None).await;
    assert_eq!((status, code(&body)), (503, "EVENT_SUBSCRIBERS_FULL"));
    let (_, stats) = send(&registry, reqwest::Method::GET, "/api/events/stats", None).await;
    assert_eq!(stats["subscribers"], 1);
    // Stopping does not wait for the open stream's reader.
    tokio::time::timeout(Duration::from_secs(10), registry.stop())
        .await
        .expect("the registry stops with a stream open");
}

#[tokio::test]
async fn links_and_their_messages_work_on_postgres() {
    let Some(database_url) = mesh_test_support::postgres_url() else { return };
    let registry = TestRegistry::start_on(database_url, None, |_| {}).await;
    // Unique names: the database is shared with other runs.
    let suffix = &uuid::Uuid::new_v4().to_string()[..8];
    let (boss, worker) = (format!("boss-{suffix}"), format!("worker-{suffix}"));
    let agents = [FakeAgent::start(&boss).await, FakeAgent::start(&worker).await];
    for agent in &agents {
        registry.client.register(&agent.registration(&["work"])).await.unwrap();
    }
    let (status, link) = create(
        &registry,
        json!({"from_agent_id":boss,"to_agent_id":worker,"relationship":"superior","direction":"one_way"}),
    )
    .await;
    assert_eq!(status, 201, "{link}");
    let id = link["id"].as_str().unwrap();
    let (status, again) = create(&registry, json!({"from_agent_id":boss,"to_agent_id":worker})).await;
    assert_eq!((status, code(&again)), (409, "LINK_EXISTS"));
    let path = format!("/api/links/{id}/messages");
    for (text, tenant) in [("m0", "acme"), ("m1", "acme"), ("m2", "acme"), ("g0", "globex")] {
        let (status, body) = send(
            &registry,
            reqwest::Method::POST,
            &path,
            Some(json!({"from_agent_id":boss,"to_agent_id":worker,"context_id":format!("link:{id}"),"text":text,
                        "status":"SUCCESS","tenant":tenant})),
        )
        .await;
        assert_eq!((status, body["tenant"].as_str()), (201, Some(tenant)), "{body}");
    }
    // Each message keeps its tenant (the column the migration added); a reader may narrow to one.
    for (query, expected) in [
        ("?limit=2", vec![("m2", "acme"), ("g0", "globex")]),
        ("?tenant=acme&limit=2", vec![("m1", "acme"), ("m2", "acme")]),
        ("?tenant=globex", vec![("g0", "globex")]),
    ] {
        let (_, history) = send(&registry, reqwest::Method::GET, &format!("{path}{query}"), None).await;
        let history = serde_json::from_value::<LinkMessages>(history).unwrap();
        let got: Vec<_> = history.messages.iter().map(|m| (m.text.as_str(), m.tenant.as_str())).collect();
        assert_eq!(got, expected, "{query}");
    }
    let (status, _) = send(&registry, reqwest::Method::DELETE, &format!("/api/links/{id}"), None).await;
    assert_eq!(status, 200);
    for agent in &agents {
        registry.client.deregister(&agent.name, None).await.unwrap();
    }
    registry.stop().await;
}
