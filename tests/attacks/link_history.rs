//! Finding 1 (and finding 8's event-stream cap): the registry's link history and its event stream
//! are attacked across tenants and in other agents' names, with the whole suite running with
//! authentication on.
//!
//! What must hold: a link message and its events (`agent_message_*`, the `call` events of the
//! calls behind it) carry the tenant of the call that produced them; a user reads only its own
//! tenant's, in `GET /api/links/{id}/messages` and on `GET /api/events`; an admin and an agent of
//! no tenant read every tenant's, an agent bound to a tenant only that tenant's. An agent records
//! history and reports calls only as itself, only on an enabled link of which it is an end, and
//! only for a tenant its credential may act for; each refusal is a JSON error. One tenant cannot
//! take every event stream: past its own share it is refused with a JSON `429`, and other
//! tenants still get theirs.

use std::time::{Duration, Instant};

use mesh_auth::Role;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::secured::{Mesh, token};

/// Upper bound for any condition these tests wait for.
const WAIT_DEADLINE: Duration = Duration::from_secs(20);
/// The acme document only acme's searches may find; its id shows wherever its text went.
const ACME_DOCUMENT_ID: &str = "acme-quokka-plans";

/// A reader of `GET /api/events` (Server-Sent Events), keeping every event it has read.
struct EventReader {
    response: reqwest::Response,
    buffer: String,
    events: Vec<Value>,
}

impl EventReader {
    async fn open(mesh: &Mesh, bearer: &str) -> Self {
        let response = Self::request(mesh, bearer).await;
        assert_eq!(response.status(), StatusCode::OK, "the event stream opens");
        Self { response, buffer: String::new(), events: Vec::new() }
    }

    async fn request(mesh: &Mesh, bearer: &str) -> reqwest::Response {
        mesh.http.get(mesh.registry("/api/events")).bearer_auth(bearer).send().await.unwrap()
    }

    /// Reads until an event matching `wanted` arrives; every event read is kept in `events`.
    async fn until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) {
        let deadline = Instant::now() + WAIT_DEADLINE;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data:")) else { continue };
                let event: Value = serde_json::from_str(data.trim_start()).unwrap();
                let found = wanted(&event);
                self.events.push(event);
                if found {
                    return;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = tokio::time::timeout(left, self.response.chunk())
                .await
                .unwrap_or_else(|_| panic!("no {what} within {WAIT_DEADLINE:?}; read: {:#?}", self.events))
                .unwrap()
                .expect("the stream stays open");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    fn text(&self) -> String {
        serde_json::to_string(&self.events).unwrap()
    }
}

fn is_message_sent_for(tenant: &'static str) -> impl Fn(&Value) -> bool {
    move |event| event["kind"] == "agent_message_sent" && event["tenant"] == tenant
}

fn is_call_for(tenant: &'static str) -> impl Fn(&Value) -> bool {
    move |event| event["kind"] == "call" && event["from"] == "orchestrator" && event["tenant"] == tenant
}

/// Asks the orchestrator, as `bearer`, to message the search agent with `text` over their link;
/// returns the orchestrator's answer (link id, reply, message id in the registry's history).
async fn message_search(mesh: &Mesh, bearer: &str, text: &str) -> Value {
    let data = json!({"skill": "send_agent_message", "target": "search", "message": text});
    let task = json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": "message"}, {"type": "data", "data": data}]}]});
    let url = format!("{}/tasks/send", mesh.suite.urls.orchestrator);
    let (status, body) = mesh.call(Method::POST, &url, Some(bearer), Some(task)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let sent = body["messages"][0]["parts"].as_array().unwrap().iter().find_map(|p| p.get("data")).unwrap().clone();
    assert!(sent["message_id"].is_string(), "the registry recorded the message: {sent}");
    sent
}

async fn history(mesh: &Mesh, bearer: &str, link_id: &str) -> (StatusCode, Value) {
    mesh.call(Method::GET, &mesh.registry(&format!("/api/links/{link_id}/messages")), Some(bearer), None).await
}

/// The texts and tenants of a history, for comparisons.
fn texts_and_tenants(history: &Value) -> Vec<(String, String)> {
    let messages = history["messages"].as_array().unwrap_or_else(|| panic!("a history: {history}"));
    messages
        .iter()
        .map(|m| (m["text"].as_str().unwrap().to_owned(), m["tenant"].as_str().unwrap_or("?").to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_link_history_and_events_reach_that_tenant_and_admins_only() {
    let (mesh, _data) = Mesh::start().await;
    let search = mesh.suite.urls.search.clone();
    let document = json!({"documents": [{"_id": ACME_DOCUMENT_ID, "title": "Quokka telescope plans",
                                         "text": "The quokka telescope plans are acme's private design."}]});
    let (status, body) =
        mesh.call(Method::POST, &format!("{search}/documents?tenant=acme"), Some(&mesh.admin), Some(document)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut bob_events = EventReader::open(&mesh, &mesh.bob).await;
    let mut alice_events = EventReader::open(&mesh, &mesh.alice).await;
    let mut admin_events = EventReader::open(&mesh, &mesh.admin).await;

    // Alice of acme has the orchestrator message the search agent, which answers with acme's
    // private document; then Bob of globex does the same with a question of his own.
    let alice_sent = message_search(&mesh, &mesh.alice, "quokka telescope plans").await;
    assert!(alice_sent["reply"].as_str().unwrap_or_default().contains(ACME_DOCUMENT_ID), "{alice_sent}");
    let bob_sent = message_search(&mesh, &mesh.bob, "robots playing soccer").await;
    let link_id = alice_sent["link_id"].as_str().unwrap().to_owned();
    assert_eq!(bob_sent["link_id"], alice_sent["link_id"], "both went over the orchestrator's link to search");

    // History: each user reads its own tenant's messages only; admins and the mesh's own agents
    // (no tenant: they act for every tenant) read all; an agent bound to acme reads acme's.
    let (status, body) = history(&mesh, &mesh.bob, &link_id).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body.to_string().contains("quokka"), "bob of globex reads acme's link message: {body}");
    assert_eq!(texts_and_tenants(&body), [("robots playing soccer".to_owned(), "globex".to_owned())]);
    let (status, body) = history(&mesh, &mesh.alice, &link_id).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(texts_and_tenants(&body), [("quokka telescope plans".to_owned(), "acme".to_owned())]);
    assert!(body.to_string().contains(ACME_DOCUMENT_ID), "alice reads her own reply: {body}");
    let both = [
        ("quokka telescope plans".to_owned(), "acme".to_owned()),
        ("robots playing soccer".to_owned(), "globex".to_owned()),
    ];
    let mesh_agent = token("search", "", &[Role::Agent]);
    for (who, bearer) in [("admin", &mesh.admin), ("an agent of no tenant", &mesh_agent)] {
        let (status, body) = history(&mesh, bearer, &link_id).await;
        assert_eq!((status, texts_and_tenants(&body)), (StatusCode::OK, both.to_vec()), "{who}: {body}");
    }
    let acme_agent = token("search", "acme", &[Role::Agent]);
    let (_, body) = history(&mesh, &acme_agent, &link_id).await;
    assert_eq!(texts_and_tenants(&body), both[..1], "an agent bound to acme: {body}");
    // Naming another tenant is refused, and an admin may narrow to one.
    let url = mesh.registry(&format!("/api/links/{link_id}/messages?tenant=acme"));
    let (status, body) = mesh.call(Method::GET, &url, Some(&mesh.bob), None).await;
    assert_eq!((status, body["error_code"].as_str()), (StatusCode::FORBIDDEN, Some("TENANT_FORBIDDEN")), "{body}");
    let (status, body) = mesh.call(Method::GET, &url, Some(&mesh.admin), None).await;
    assert_eq!((status, texts_and_tenants(&body)), (StatusCode::OK, both[..1].to_vec()), "{body}");

    // Events: Bob's stream shows his message and his call, and nothing of acme's, which came
    // first (the orchestrator reports its calls in order).
    bob_events.until("globex's message event", is_message_sent_for("globex")).await;
    bob_events.until("globex's call event", is_call_for("globex")).await;
    assert!(!bob_events.text().contains("acme"), "bob of globex sees acme's events: {:#?}", bob_events.events);
    alice_events.until("acme's message event", is_message_sent_for("acme")).await;
    alice_events.until("acme's call event", is_call_for("acme")).await;
    admin_events.until("globex's call event", is_call_for("globex")).await;
    for tenant in ["acme", "globex"] {
        assert!(admin_events.events.iter().any(is_message_sent_for(tenant)), "admin sees {tenant}'s message");
        assert!(admin_events.events.iter().any(is_call_for(tenant)), "admin sees {tenant}'s call");
    }
    let message_ids: Vec<&Value> =
        admin_events.events.iter().filter(|e| e["kind"] == "agent_message_sent").map(|e| &e["message_id"]).collect();
    assert_eq!(message_ids, [&alice_sent["message_id"], &bob_sent["message_id"]]);
    mesh.suite.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_records_history_and_reports_calls_only_as_itself_over_its_own_enabled_links() {
    let (mesh, _data) = Mesh::start().await;
    let (status, links) = mesh.call(Method::GET, &mesh.registry("/api/links"), Some(&mesh.admin), None).await;
    assert_eq!(status, StatusCode::OK, "{links}");
    let link_to = |to: &str| {
        let links = links["links"].as_array().unwrap();
        let link = links.iter().find(|l| l["from_agent_id"] == "orchestrator" && l["to_agent_id"] == to);
        link.unwrap_or_else(|| panic!("the suite links the orchestrator to {to}: {links:?}"))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (to_search, to_entities) = (link_to("search"), link_to("entity_extraction"));
    let search_agent = token("search", "", &[Role::Agent]);
    let orchestrator = token("orchestrator", "", &[Role::Agent]);
    let record = |from: &str, to: &str, link: &str| {
        json!({"from_agent_id": from, "to_agent_id": to, "context_id": format!("link:{link}"),
               "text": "forged", "reply": "forged", "status": "SUCCESS"})
    };
    let post = async |bearer: &str, link: &str, body: Value| {
        mesh.call(Method::POST, &mesh.registry(&format!("/api/links/{link}/messages")), Some(bearer), Some(body)).await
    };

    // The search agent's credential, in the orchestrator's name: on a link search is an end of,
    // and on one it is not.
    for link in [&to_search, &to_entities] {
        let to = if *link == to_search { "search" } else { "entity_extraction" };
        let (status, body) = post(&search_agent, link, record("orchestrator", to, link)).await;
        assert_eq!(
            (status, body["error_code"].as_str()),
            (StatusCode::FORBIDDEN, Some("LINK_SENDER_FORBIDDEN")),
            "search recorded a message as the orchestrator: {body}"
        );
    }
    // As itself, on a link it is not an end of.
    let (status, body) = post(&search_agent, &to_entities, record("search", "entity_extraction", &to_entities)).await;
    assert_eq!((status, body["error_code"].as_str()), (StatusCode::FORBIDDEN, Some("LINK_SENDER_FORBIDDEN")), "{body}");
    // On a disabled link, even as its own sender.
    let (status, body) = mesh
        .call(
            Method::PUT,
            &mesh.registry(&format!("/api/links/{to_entities}")),
            Some(&mesh.admin),
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!((status, body["enabled"].as_bool()), (StatusCode::OK, Some(false)), "{body}");
    let (status, body) =
        post(&orchestrator, &to_entities, record("orchestrator", "entity_extraction", &to_entities)).await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (StatusCode::CONFLICT, Some("LINK_DISABLED")),
        "a message recorded on a disabled link: {body}"
    );
    // On a link that does not exist.
    let (status, body) = post(&orchestrator, "no-such-link", record("orchestrator", "search", "no-such-link")).await;
    assert_eq!((status, body["error_code"].as_str()), (StatusCode::NOT_FOUND, Some("LINK_NOT_FOUND")), "{body}");
    // For a tenant its credential does not act for: an orchestrator bound to acme, for globex.
    let acme_orchestrator = token("orchestrator", "acme", &[Role::Agent]);
    let mut for_globex = record("orchestrator", "search", &to_search);
    for_globex["tenant"] = json!("globex");
    let (status, body) = post(&acme_orchestrator, &to_search, for_globex).await;
    assert_eq!((status, body["error_code"].as_str()), (StatusCode::FORBIDDEN, Some("TENANT_FORBIDDEN")), "{body}");
    // Nothing of it reached the history.
    for link in [&to_search, &to_entities] {
        let (status, body) = history(&mesh, &mesh.admin, link).await;
        assert_eq!((status, body["messages"].as_array().map(Vec::len)), (StatusCode::OK, Some(0)), "{body}");
    }

    // Call reports: only in the reporting agent's own name.
    let forged = json!({"calls": [{"from": "orchestrator", "to": "search", "status": "SUCCESS", "latency_ms": 1}]});
    let (status, body) =
        mesh.call(Method::POST, &mesh.registry("/api/events/calls"), Some(&search_agent), Some(forged)).await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (StatusCode::FORBIDDEN, Some("LINK_SENDER_FORBIDDEN")),
        "search reported a call as the orchestrator: {body}"
    );
    let own = json!({"calls": [{"from": "search", "to": "orchestrator", "status": "SUCCESS", "latency_ms": 1}]});
    let (status, body) =
        mesh.call(Method::POST, &mesh.registry("/api/events/calls"), Some(&search_agent), Some(own)).await;
    assert_eq!((status, body["accepted"].as_u64()), (StatusCode::ACCEPTED, Some(1)), "{body}");
    mesh.suite.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenant_cannot_take_every_event_stream() {
    let (mesh, _data) = Mesh::start().await;
    let all_max = registry::RegistryConfig::default().event_subscribers_max;
    // Bob opens streams until refused, at most as many as the registry serves in all.
    let mut open = Vec::new();
    let refusal = loop {
        let response = EventReader::request(&mesh, &mesh.bob).await;
        if response.status() != StatusCode::OK {
            break response;
        }
        open.push(response);
        assert!(open.len() <= all_max, "one tenant holds every one of the {all_max} event streams");
    };
    let status = refusal.status();
    let body: Value = refusal.json().await.unwrap();
    assert_eq!(
        (status, body["error_code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("EVENT_SUBSCRIBERS_TENANT_FULL")),
        "after {} streams of one tenant: {body}",
        open.len()
    );
    assert!(open.len() < all_max, "the tenant's share is below the registry's cap: {}", open.len());
    // Other tenants and admins still get theirs; bob gets one back when he closes one.
    let _alice = EventReader::open(&mesh, &mesh.alice).await;
    let _admin = EventReader::open(&mesh, &mesh.admin).await;
    drop(open.pop());
    let deadline = Instant::now() + WAIT_DEADLINE;
    while EventReader::request(&mesh, &mesh.bob).await.status() != StatusCode::OK {
        assert!(Instant::now() < deadline, "bob's closed stream never gave its slot back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    mesh.suite.stop().await.unwrap();
}
