//! The registry's catalogs (issue #37) against a real registry on port 0 with real agents: the
//! AI Catalog at `/.well-known/ai-catalog.json` and the ARD manifest at `/.well-known/ard.json`
//! list the agents `GET /agents` lists, pass the JSON Schema ARD publishes
//! (`tests/data/catalogs/`) and the AI Catalog specification's requirements (it publishes no
//! schema), follow registrations and health, answer 304 to a current `If-None-Match`, and are
//! read only with credentials when authentication is on.

use mesh_auth::{AuthConfig, Claims, Role, mint_hs256};
use reqwest::StatusCode;
use reqwest::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, HeaderMap, IF_NONE_MATCH};
use serde_json::{Value, json};

use crate::common::{FakeAgent, TOKEN_TTL_S, TestRegistry, eventually};

const ARD_SCHEMA: &str = include_str!("../data/catalogs/ard-ai-catalog.schema.json");
const AI_CATALOG_PATH: &str = "/.well-known/ai-catalog.json";
const ARD_PATH: &str = "/.well-known/ard.json";
const SECRET: &str = "a-catalog-test-secret-of-32-bytes!";

/// A catalog as served: status, headers and the JSON body (`Null` when there is none).
struct Served {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Served {
    fn etag(&self) -> &str {
        self.headers.get(ETAG).and_then(|v| v.to_str().ok()).expect("an ETag")
    }

    fn header(&self, name: reqwest::header::HeaderName) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
    }
}

async fn get(registry: &TestRegistry, path: &str, if_none_match: Option<&str>, bearer: Option<&str>) -> Served {
    let mut request = registry.http.get(format!("{}{path}", registry.url));
    if let Some(etag) = if_none_match {
        request = request.header(IF_NONE_MATCH, etag);
    }
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let response = request.send().await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = response.bytes().await.unwrap();
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
    Served { status, headers, body }
}

/// Every violation of ARD's published JSON Schema (draft 2020-12, formats checked too).
fn ard_schema_errors(document: &Value) -> Vec<String> {
    let schema: Value = serde_json::from_str(ARD_SCHEMA).unwrap();
    let validator = jsonschema::options().should_validate_formats(true).build(&schema).unwrap();
    validator.iter_errors(document).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

/// Every violation of the AI Catalog specification's requirements (`specification/ai-catalog.md`:
/// Top-Level Structure, Host Info, Catalog Entry, Extensions, Version Handling), which publishes
/// no JSON Schema to check against.
fn ai_catalog_violations(document: &Value) -> Vec<String> {
    let mut violations = Vec::new();
    let mut require = |holds: bool, what: String| {
        if !holds {
            violations.push(what);
        }
    };
    let version = document["specVersion"].as_str().unwrap_or_default();
    let major_minor = version.split_once('.').is_some_and(|(major, minor)| {
        [major, minor].iter().all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
    });
    require(major_minor, format!("specVersion {version:?} is a \"Major.Minor\" string"));
    if let Some(host) = document.get("host") {
        require(host["displayName"].is_string(), "host.displayName is a string".into());
    }
    let Some(entries) = document["entries"].as_array() else {
        require(false, "entries is an array".into());
        return violations;
    };
    let mut identifiers = std::collections::HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let identifier = entry["identifier"].as_str();
        require(identifier.is_some_and(|id| !id.is_empty()), format!("entries[{i}].identifier is a string"));
        require(identifiers.insert(identifier), format!("entries[{i}].identifier is unique (no version given)"));
        require(entry["type"].is_string(), format!("entries[{i}].type is a string"));
        let (url, data) = (entry.get("url"), entry.get("data"));
        require(url.is_some() != data.is_some(), format!("entries[{i}] has exactly one of url and data"));
        require(url.is_none_or(Value::is_string), format!("entries[{i}].url is a string"));
        for optional in ["displayName", "description", "version", "updatedAt"] {
            require(entry.get(optional).is_none_or(Value::is_string), format!("entries[{i}].{optional} is a string"));
        }
        let tags = entry.get("tags").map(|t| t.as_array().is_some_and(|t| t.iter().all(Value::is_string)));
        require(tags.unwrap_or(true), format!("entries[{i}].tags is an array of strings"));
        if let Some(extensions) = entry.get("extensions") {
            let keys = extensions.as_object().map(|e| e.keys().cloned().collect::<Vec<_>>());
            require(keys.is_some(), format!("entries[{i}].extensions is an object"));
            for key in keys.unwrap_or_default() {
                let url = reqwest::Url::parse(&key).is_ok_and(|u| u.has_host());
                let reverse_dns = key.split('.').count() >= 2 && !key.contains(['/', ':', ' ']);
                require(url || reverse_dns, format!("entries[{i}].extensions key {key:?} is a URL or reverse-DNS"));
            }
        }
    }
    violations
}

/// Registers `agent` by its card, as a standard A2A agent does.
async fn register_by_card(registry: &TestRegistry, agent: &FakeAgent) {
    let card_url = format!("{}/.well-known/agent-card.json", agent.url);
    let response = registry
        .http
        .post(format!("{}/register", registry.url))
        .json(&json!({"agent_card_url": card_url}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{}", response.text().await.unwrap());
}

#[tokio::test]
async fn both_catalogs_list_the_registered_agents_in_their_published_formats() {
    let registry = TestRegistry::start().await;
    let echo = FakeAgent::start("echo").await;
    let weather = FakeAgent::start("weather").await;
    register_by_card(&registry, &echo).await;
    registry.client.register(&weather.registration(&["forecast", "weather"])).await.unwrap();
    // Healths settled first, so the list and the catalogs read below hold the same ones.
    eventually("both agents are healthy", || async { registry.client.stats().await.unwrap().healthy_agents == 2 })
        .await;
    let listed: Value =
        registry.http.get(format!("{}/agents", registry.url)).send().await.unwrap().json().await.unwrap();

    let served = get(&registry, AI_CATALOG_PATH, None, None).await;
    assert_eq!(served.status, StatusCode::OK);
    assert_eq!(served.header(CONTENT_TYPE), "application/ai-catalog+json");
    assert_eq!(served.header(CACHE_CONTROL), "private, max-age=10");
    let catalog = &served.body;
    assert_eq!(ai_catalog_violations(catalog), Vec::<String>::new(), "{catalog:#}");
    assert_eq!(ard_schema_errors(catalog), Vec::<String>::new(), "ARD crawlers read this path too: {catalog:#}");
    assert_eq!(catalog["specVersion"], "1.0");
    let entries = catalog["entries"].as_array().unwrap();
    let agents = listed["agents"].as_array().unwrap();
    assert_eq!(entries.len(), agents.len(), "every agent GET /agents lists: {catalog:#}");
    for (entry, agent) in entries.iter().zip(agents) {
        let card_url = agent["agent_card_url"].as_str().unwrap();
        let host = reqwest::Url::parse(card_url).unwrap().host_str().unwrap().to_owned();
        assert_eq!(entry["identifier"], format!("urn:air:{host}:a2a-mesh:{}", agent["path"].as_str().unwrap()));
        assert_eq!(entry["displayName"], agent["name"]);
        assert_eq!(entry["description"], agent["description"], "the card's description");
        assert_eq!(entry["description"], "test agent");
        assert_eq!(entry["type"], "application/a2a-agent-card+json");
        assert_eq!(entry["url"], card_url, "the card, from which a reader registers it");
        let metadata = &entry["extensions"]["https://ai-catalog.org/extensions/metadata"];
        for field in ["name", "path", "health_status", "capabilities", "interfaces"] {
            assert_eq!(metadata[field], agent[field], "{field} as GET /agents has it");
        }
    }
    assert_eq!(entries[1]["tags"], json!(["forecast", "weather"]), "capabilities are the entry's keywords");

    let served = get(&registry, ARD_PATH, None, None).await;
    assert_eq!((served.status, served.header(CONTENT_TYPE)), (StatusCode::OK, "application/json"));
    let manifest = &served.body;
    assert_eq!(ard_schema_errors(manifest), Vec::<String>::new(), "{manifest:#}");
    let ard_entries = manifest["entries"].as_array().unwrap();
    assert_eq!(ard_entries.len(), agents.len());
    for ((ard, entry), agent) in ard_entries.iter().zip(entries).zip(agents) {
        for field in ["identifier", "displayName", "description", "type", "url"] {
            assert_eq!(ard[field], entry[field], "{field} as in the AI Catalog");
        }
        assert_eq!(ard["metadata"]["path"], agent["path"]);
        assert_eq!(ard["metadata"]["health"], agent["health_status"]);
    }
    assert_eq!(ard_entries[1]["capabilities"], json!(["forecast", "weather"]));

    // The checks above find what they look for: a catalog breaking each format is refused.
    let mut broken = catalog.clone();
    broken["entries"][0]["data"] = json!({});
    broken["entries"][1]["identifier"] = json!("weather");
    assert_eq!(ai_catalog_violations(&broken).len(), 1, "url and data both: {:?}", ai_catalog_violations(&broken));
    assert_eq!(ard_schema_errors(&broken).len(), 2, "{:?}", ard_schema_errors(&broken));
}

#[tokio::test]
async fn a_current_etag_is_answered_304_until_the_directory_changes() {
    let registry = TestRegistry::start().await;
    let echo = FakeAgent::start("echo").await;
    registry.client.register(&echo.registration(&["echo"])).await.unwrap();
    eventually("echo is healthy in the catalog", || async {
        let served = get(&registry, ARD_PATH, None, None).await;
        served.body["entries"][0]["metadata"]["health"] == "healthy"
    })
    .await;

    for path in [AI_CATALOG_PATH, ARD_PATH] {
        let first = get(&registry, path, None, None).await;
        let etag = first.etag().to_owned();
        let again = get(&registry, path, None, None).await;
        assert_eq!(again.etag(), etag, "{path}: the same directory, the same ETag");
        let unchanged = get(&registry, path, Some(&etag), None).await;
        assert_eq!(unchanged.status, StatusCode::NOT_MODIFIED, "{path}");
        assert_eq!(unchanged.body, Value::Null, "{path}: no body");
        assert_eq!((unchanged.etag(), unchanged.header(CACHE_CONTROL)), (etag.as_str(), "private, max-age=10"));
        let listed = get(&registry, path, Some(&format!("\"stale\", W/{etag}")), None).await;
        assert_eq!(listed.status, StatusCode::NOT_MODIFIED, "{path}: among others, weakly");
        let other = get(&registry, path, Some("\"stale\""), None).await;
        assert_eq!((other.status, other.body.clone()), (StatusCode::OK, first.body.clone()), "{path}");
    }

    // A registration changes both catalogs; so does a change of health.
    let before = [get(&registry, AI_CATALOG_PATH, None, None).await, get(&registry, ARD_PATH, None, None).await];
    let weather = FakeAgent::start("weather").await;
    registry.client.register(&weather.registration(&["weather"])).await.unwrap();
    for (path, old) in [AI_CATALOG_PATH, ARD_PATH].into_iter().zip(&before) {
        let served = get(&registry, path, Some(old.etag()), None).await;
        assert_eq!(served.status, StatusCode::OK, "{path}: a new agent");
        assert_ne!(served.etag(), old.etag());
        assert_eq!(served.body["entries"].as_array().unwrap().len(), 2);
    }
    let with_weather = get(&registry, ARD_PATH, None, None).await;
    echo.answer_health(503);
    eventually("echo's health change shows in the manifest under a new ETag", || async {
        let served = get(&registry, ARD_PATH, Some(with_weather.etag()), None).await;
        served.status == StatusCode::OK && served.body["entries"][0]["metadata"]["health"] == "unhealthy"
    })
    .await;
}

#[tokio::test]
async fn with_authentication_on_the_catalogs_are_read_with_credentials_only() {
    let registry = TestRegistry::start_with(|config| {
        config.auth = AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() };
    })
    .await;
    let token = |subject: &str, roles: &[Role]| {
        mint_hs256(SECRET.as_bytes(), &Claims::new(subject, "", roles, TOKEN_TTL_S)).unwrap()
    };
    let echo = FakeAgent::start("echo").await;
    let response = registry
        .http
        .post(format!("{}/register", registry.url))
        .bearer_auth(token("echo", &[Role::Agent]))
        .json(&echo.registration(&["echo"]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    for path in [AI_CATALOG_PATH, ARD_PATH] {
        assert_eq!(get(&registry, path, None, None).await.status, StatusCode::UNAUTHORIZED, "{path}");
        let user = get(&registry, path, None, Some(&token("alice", &[Role::User]))).await;
        assert_eq!(user.status, StatusCode::OK, "{path}: any role reads it, as GET /agents");
        assert_eq!(user.body["entries"][0]["displayName"], "echo");
    }
}
