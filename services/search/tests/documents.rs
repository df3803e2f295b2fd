//! `POST /documents`, `GET /documents/{id}` and `DELETE /documents/{id}` on a real search agent
//! on port 0, with authentication off (a developer's loopback, where the admin role the writes
//! need is not asked for): every status the routes answer, each error as the mesh's JSON body.
//!
//! Documents are checked field by field, never as whole objects, so fields the routes may add
//! (a tenant, say) do not change what these tests mean. The dense profile is off: these routes
//! behave the same without the model, which `scifact.rs` and the embedding crate test.

use axum::http::{Method, StatusCode};
use mesh_agent_kit::testing::{CALL_TIMEOUT, JSON, RunningAgent, local_agent_config};
use mesh_client::reply_data;
use mesh_protocol::agents::SearchResults;
use mesh_protocol::seed::TaskRequest;
use search::SearchConfig;
use search::config::DenseConfig;
use serde_json::{Value, json};

const JSON_LINES: &str = "application/x-ndjson";
/// The one document the agent's index starts with (its corpus file).
const SEED_DOCUMENT: &str = r#"{"_id":"seed-1","title":"Seed","text":"the document the index starts with"}"#;

/// The agent, on an index in `data` that starts with [`SEED_DOCUMENT`].
async fn agent(data: &tempfile::TempDir) -> RunningAgent {
    let corpus = data.path().join("corpus.jsonl");
    std::fs::write(&corpus, SEED_DOCUMENT).unwrap();
    let config = SearchConfig {
        agent: local_agent_config(),
        data_dir: Some(data.path().join("search")),
        corpus_path: Some(corpus),
        dense: DenseConfig { enabled: false, ..DenseConfig::default() },
        ..SearchConfig::default()
    };
    RunningAgent::start(|http| search::build(&config, http)).await
}

/// Sends `body` as `content_type` to `path` and expects `status` with a JSON body, which it returns.
async fn expect(
    agent: &RunningAgent,
    method: Method,
    path: &str,
    content_type: &str,
    body: impl Into<axum::body::Bytes>,
    status: StatusCode,
) -> Value {
    let target = format!("{method} {path}");
    let response = agent.http().send(agent.request(method, path, content_type, body), CALL_TIMEOUT).await.unwrap();
    let answer: Value = serde_json::from_slice(response.body())
        .unwrap_or_else(|e| panic!("{target}: not JSON ({e}): {:?}", response.body()));
    assert_eq!(response.status(), status, "{target}: {answer}");
    answer
}

/// `(added, replaced, unchanged, documents)` of an ingest answer.
fn counts(answer: &Value) -> (u64, u64, u64, u64) {
    let count = |key: &str| answer[key].as_u64().unwrap_or_else(|| panic!("no {key} in {answer}"));
    (count("added"), count("replaced"), count("unchanged"), count("documents"))
}

/// `(title, text)` of a stored document, after checking its id.
fn title_and_text(document: &Value, id: &str) -> (String, String) {
    assert_eq!(document["_id"], id, "{document}");
    (document["title"].as_str().unwrap().to_owned(), document["text"].as_str().unwrap().to_owned())
}

/// The ids BM25 ranks for `query`.
async fn bm25_ids(agent: &RunningAgent, query: &str) -> Vec<String> {
    let data = json!({"profiles": ["bm25"], "top_k": 5});
    let response = agent.send(&TaskRequest::from_text(None, query, Some(data))).await;
    let results: SearchResults = reply_data(agent.url(), &response).unwrap();
    results.results.into_iter().map(|hit| hit.id).collect()
}

#[tokio::test]
async fn documents_go_in_are_read_back_searched_replaced_and_deleted() {
    let data = tempfile::tempdir().unwrap();
    let agent = agent(&data).await;

    // JSON: two new documents, one with the optional fields and a non-ASCII id.
    let batch = json!({"documents": [
        {"_id": "café-1", "title": "Zebra crossing", "text": "a zebra walks across the road",
         "modality": "video", "tags": ["animals", "street"]},
        {"_id": "doc-2", "title": "Quokka", "text": "a smiling quokka on an island"},
    ]});
    let answer = expect(&agent, Method::POST, "/documents", JSON, batch.to_string(), StatusCode::OK).await;
    assert_eq!(counts(&answer), (2, 0, 0, 3), "{answer}");
    assert!(answer["time_ms"].as_f64().is_some_and(|t| t >= 0.0), "{answer}");

    let cafe = expect(&agent, Method::GET, "/documents/caf%C3%A9-1", JSON, "", StatusCode::OK).await;
    assert_eq!(title_and_text(&cafe, "café-1"), ("Zebra crossing".into(), "a zebra walks across the road".into()));
    assert_eq!((cafe["modality"].as_str(), &cafe["tags"]), (Some("video"), &json!(["animals", "street"])));
    assert_eq!(bm25_ids(&agent, "zebra").await, ["café-1"], "an ingested document is searched at once");

    // JSON Lines: one line unchanged, one changed: the changed one replaces the stored one.
    let lines = concat!(
        r#"{"_id":"doc-2","title":"Quokka","text":"a smiling quokka on an island"}"#,
        "\n\n",
        r#"{"_id":"café-1","title":"Zebra crossing","text":"an okapi, not a zebra, crosses the road"}"#,
        "\n",
    );
    let answer = expect(&agent, Method::POST, "/documents", JSON_LINES, lines, StatusCode::OK).await;
    assert_eq!(counts(&answer), (0, 1, 1, 3), "{answer}");
    let cafe = expect(&agent, Method::GET, "/documents/caf%C3%A9-1", JSON, "", StatusCode::OK).await;
    assert_eq!(title_and_text(&cafe, "café-1").1, "an okapi, not a zebra, crosses the road");
    assert_eq!(bm25_ids(&agent, "okapi").await, ["café-1"]);

    let answer = expect(&agent, Method::DELETE, "/documents/doc-2", JSON, "", StatusCode::OK).await;
    assert_eq!((answer["deleted"].as_str(), answer["documents"].as_u64()), (Some("doc-2"), Some(2)), "{answer}");
    assert!(bm25_ids(&agent, "quokka").await.is_empty(), "a deleted document is no longer found");
    for method in [Method::GET, Method::DELETE] {
        let error = agent
            .expect_error(
                agent.request(method, "/documents/doc-2", JSON, ""),
                StatusCode::NOT_FOUND,
                "DOCUMENT_NOT_FOUND",
            )
            .await;
        assert!(error.error_message.contains("\"doc-2\""), "{error:?}");
    }
    // The document the index started with was never touched.
    let seed = expect(&agent, Method::GET, "/documents/seed-1", JSON, "", StatusCode::OK).await;
    assert_eq!(title_and_text(&seed, "seed-1").0, "Seed");
}

#[tokio::test]
async fn bad_documents_are_refused_with_json_errors_and_change_nothing() {
    let data = tempfile::tempdir().unwrap();
    let agent = agent(&data).await;
    let invalid = [
        (JSON, "not json".to_owned(), "expected {\"documents\""),
        (JSON, json!({"docs": []}).to_string(), "unknown field `docs`"),
        (
            JSON,
            json!({"documents": [{"_id": "ok"}, {"_id": "", "text": "x"}]}).to_string(),
            "document 1 has an empty _id",
        ),
        (JSON, json!({"documents": []}).to_string(), "no document"),
        (JSON_LINES, "{\"_id\":\"fine\"}\n{\"_id\": 3}\n".to_owned(), "line 2"),
        (JSON_LINES, "{\"_id\":\"\",\"text\":\"x\"}".to_owned(), "empty _id"),
        (JSON_LINES, "\n \n".to_owned(), "no document"),
    ];
    for (content_type, body, message) in invalid {
        let request = agent.request(Method::POST, "/documents", content_type, body.clone());
        let error = agent.expect_error(request, StatusCode::BAD_REQUEST, "DOCUMENTS_INVALID").await;
        assert!(error.error_message.contains(message), "{body:?}: {error:?}");
    }
    let plain = agent.request(Method::POST, "/documents", "text/plain", r#"{"_id":"x"}"#);
    let error = agent.expect_error(plain, StatusCode::UNSUPPORTED_MEDIA_TYPE, "REQUEST_UNSUPPORTED_MEDIA_TYPE").await;
    assert!(error.error_message.contains("application/x-ndjson"), "{error:?}");
    let put = agent.request(Method::PUT, "/documents/seed-1", JSON, "{}");
    agent.expect_error(put, StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED").await;

    // None of them stored anything: the documents they named are absent, the index unchanged.
    for id in ["ok", "fine", "x"] {
        let missing = agent.request(Method::GET, &format!("/documents/{id}"), JSON, "");
        agent.expect_error(missing, StatusCode::NOT_FOUND, "DOCUMENT_NOT_FOUND").await;
    }
    let one = json!({"documents": [{"_id": "seed-1", "title": "Seed", "text": "the document the index starts with"}]});
    let answer = expect(&agent, Method::POST, "/documents", JSON, one.to_string(), StatusCode::OK).await;
    assert_eq!(counts(&answer), (0, 0, 1, 1), "{answer}");
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_with_413() {
    let data = tempfile::tempdir().unwrap();
    let agent = agent(&data).await;
    let text = "x".repeat(mesh_server::http::BODY_LIMIT_BYTES_DEFAULT);
    let body = json!({"documents": [{"_id": "huge", "text": text}]}).to_string();
    let request = agent.request(Method::POST, "/documents", JSON, body);
    agent.expect_error(request, StatusCode::PAYLOAD_TOO_LARGE, "REQUEST_BODY_TOO_LARGE").await;
}

#[tokio::test]
async fn a_tenants_documents_are_its_own_and_read_before_the_shared_ones() {
    let data = tempfile::tempdir().unwrap();
    let agent = agent(&data).await;
    let own = json!({"documents": [{"_id": "seed-1", "title": "Acme's own", "text": "only acme has this"}]});
    let started = std::time::Instant::now();
    let answer = expect(&agent, Method::POST, "/documents?tenant=acme", JSON, own.to_string(), StatusCode::OK).await;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(answer["tenant"], "acme", "{answer}");
    assert_eq!(counts(&answer), (1, 0, 0, 2), "a document of its own beside the shared one: {answer}");
    // The agent's own time of the ingest, in milliseconds: within what the client waited.
    let time_ms = answer["time_ms"].as_f64().unwrap();
    assert!(time_ms > 0.01 && time_ms <= elapsed_ms, "{time_ms} ms of {elapsed_ms} ms");

    let acme = expect(&agent, Method::GET, "/documents/seed-1?tenant=acme", JSON, "", StatusCode::OK).await;
    assert_eq!((title_and_text(&acme, "seed-1").0.as_str(), &acme["tenant"]), ("Acme's own", &json!("acme")));
    let shared = expect(&agent, Method::GET, "/documents/seed-1", JSON, "", StatusCode::OK).await;
    assert_eq!((title_and_text(&shared, "seed-1").0.as_str(), shared.get("tenant")), ("Seed", None));

    // Deleting the tenant's copy leaves the shared one, which the tenant then reads.
    let answer = expect(&agent, Method::DELETE, "/documents/seed-1?tenant=acme", JSON, "", StatusCode::OK).await;
    assert_eq!(answer["documents"], 1, "{answer}");
    let acme = expect(&agent, Method::GET, "/documents/seed-1?tenant=acme", JSON, "", StatusCode::OK).await;
    assert_eq!((title_and_text(&acme, "seed-1").0.as_str(), acme.get("tenant")), ("Seed", None));

    for (method, body) in
        [(Method::POST, own.to_string()), (Method::GET, String::new()), (Method::DELETE, String::new())]
    {
        let path =
            if method == Method::POST { "/documents?tenant=not%20one" } else { "/documents/seed-1?tenant=not%20one" };
        let request = agent.request(method, path, JSON, body);
        let error = agent.expect_error(request, StatusCode::BAD_REQUEST, "TENANT_INVALID").await;
        assert!(error.error_message.contains("not one"), "{error:?}");
    }
}
