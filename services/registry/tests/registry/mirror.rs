//! Read-only federation (issue #37): a registry mirrors another registry, a real `registry`
//! process, by following its AI Catalog with `If-None-Match`. The mirrored agents are listed
//! with their origin, follow the other registry's changes, never shadow a local name, are never
//! written back, and outlive the other registry going away.

use registry::mirror::MirrorConfig;
use serde_json::Value;

use crate::common::{FakeAgent, RegistryProcess, TestRegistry, eventually};

/// How often the mirror reads the other registry's catalog in these tests.
const MIRROR_INTERVAL_MS: u64 = 100;

/// `GET {url}/agents{query}`.
async fn agents(http: &reqwest::Client, url: &str, query: &str) -> Value {
    http.get(format!("{url}/agents{query}")).send().await.unwrap().json().await.unwrap()
}

/// Each listed agent's name and origin, in the listing's order.
fn names_and_origins(listing: &Value) -> Vec<(String, Option<String>)> {
    listing["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap().to_owned(), a["origin"].as_str().map(str::to_owned)))
        .collect()
}

/// The sum of the Prometheus samples at `url` whose line starts with `metric{` and holds every
/// one of `labels`.
async fn samples(http: &reqwest::Client, url: &str, metric: &str, labels: &[&str]) -> f64 {
    let text = http.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|line| line.starts_with(&format!("{metric}{{")) && labels.iter().all(|l| line.contains(l)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_registry_mirrors_another_registry_read_only_and_local_names_win() {
    // The mirror runs in this process: its metrics need the recorder the binary installs.
    mesh_telemetry::install_metrics().unwrap();
    let http = reqwest::Client::new();
    let data = tempfile::tempdir().unwrap();
    let origin = RegistryProcess::spawn(&format!("sqlite://{}", data.path().join("origin.db").display())).await;
    let (eu_search, eu_shared, eu_translate) =
        (FakeAgent::start("eu-search").await, FakeAgent::start("shared").await, FakeAgent::start("eu-translate").await);
    origin.client.register(&eu_search.registration(&["search"])).await.unwrap();
    origin.client.register(&eu_shared.registration(&["entity_extraction"])).await.unwrap();

    let mirror = TestRegistry::start_with(|config| {
        config.mirrors = vec![MirrorConfig {
            url: format!("{}/", origin.url),
            interval_ms: MIRROR_INTERVAL_MS,
            credential_file: None,
        }];
    })
    .await;
    let (local_shared, local_only) = (FakeAgent::start("shared").await, FakeAgent::start("local-only").await);
    mirror.client.register(&local_shared.registration(&["summarize"])).await.unwrap();
    mirror.client.register(&local_only.registration(&["summarize"])).await.unwrap();

    // The other registry's agents are listed beside the local ones, in name order, marked with
    // where they come from; its "shared" is not, since a local agent holds that name.
    let expected = vec![
        ("eu-search".to_owned(), Some(origin.url.clone())),
        ("local-only".to_owned(), None),
        ("shared".to_owned(), None),
    ];
    eventually("the mirror lists the other registry's agents", || async {
        names_and_origins(&agents(&http, &mirror.url, "").await) == expected
    })
    .await;
    let listing = agents(&http, &mirror.url, "").await;
    assert_eq!(listing["total"], 3);
    assert_eq!(listing["agents"][2]["url"], local_shared.url, "the local agent, not the mirrored one");

    // One mirrored agent is served as the other registry serves it, with its origin; its health
    // is the other registry's finding.
    eventually("the mirrored agent's health follows its registry's", || async {
        let mirrored: Value =
            http.get(format!("{}/agents/eu-search", mirror.url)).send().await.unwrap().json().await.unwrap();
        let own: Value =
            http.get(format!("{}/agents/eu-search", origin.url)).send().await.unwrap().json().await.unwrap();
        mirrored["health_status"] == "healthy" && mirrored["origin"] == origin.url.as_str() && {
            // A catalog carries no skills, nor the times that move at every poll.
            let mut own = own;
            own["origin"] = origin.url.as_str().into();
            own["skills"] = serde_json::json!([]);
            own["updated_at"] = own["registered_at"].clone();
            own.as_object_mut().unwrap().remove("last_health_check");
            mirrored == own
        }
    })
    .await;
    let found = agents(&http, &mirror.url, "?capability=search").await;
    assert_eq!(names_and_origins(&found), [("eu-search".to_owned(), Some(origin.url.clone()))]);
    let unknown = http.get(format!("{}/agents/nobody", mirror.url)).send().await.unwrap();
    assert_eq!(unknown.status(), reqwest::StatusCode::NOT_FOUND);

    // The mirror reads with If-None-Match: the other registry answers an unchanged catalog 304.
    let catalog_route = "route=\"/.well-known/ai-catalog.json\"";
    eventually("the other registry answers the mirror's reads 304", || async {
        samples(&http, &origin.url, "http_server_request_duration_seconds_count", &[catalog_route, "status=\"304\""])
            .await
            > 0.0
    })
    .await;

    // Nothing is written back, and the mirror's own catalog publishes its own agents only.
    let at_origin = agents(&http, &origin.url, "").await;
    assert_eq!(
        names_and_origins(&at_origin),
        [("eu-search".to_owned(), None), ("shared".to_owned(), None)],
        "the other registry holds only its own agents"
    );
    assert_eq!(at_origin["agents"][1]["url"], eu_shared.url);
    let catalog: Value =
        http.get(format!("{}/.well-known/ai-catalog.json", mirror.url)).send().await.unwrap().json().await.unwrap();
    let published: Vec<&str> =
        catalog["entries"].as_array().unwrap().iter().map(|e| e["displayName"].as_str().unwrap()).collect();
    assert_eq!(published, ["local-only", "shared"]);

    // Changes at the other registry are followed: a new agent appears, a removed one goes.
    origin.client.register(&eu_translate.registration(&["translate"])).await.unwrap();
    origin.client.deregister("eu-search", None).await.unwrap();
    let expected = vec![
        ("eu-translate".to_owned(), Some(origin.url.clone())),
        ("local-only".to_owned(), None),
        ("shared".to_owned(), None),
    ];
    eventually("the mirror follows the other registry's changes", || async {
        names_and_origins(&agents(&http, &mirror.url, "").await) == expected
    })
    .await;

    // A local registration under a mirrored name takes it over at once.
    let local_translate = FakeAgent::start("eu-translate").await;
    mirror.client.register(&local_translate.registration(&["translate"])).await.unwrap();
    let listing = agents(&http, &mirror.url, "").await;
    assert_eq!(names_and_origins(&listing)[0], ("eu-translate".to_owned(), None));
    assert_eq!(listing["agents"][0]["url"], local_translate.url);
    mirror.client.deregister("eu-translate", None).await.unwrap();

    // When the other registry goes away, its reads fail and the last copy is still served.
    let failed = |http: reqwest::Client, mirror: String, origin: String| async move {
        samples(
            &http,
            &mirror,
            "mesh_registry_mirror_reads_total",
            &[&format!("origin=\"{origin}\""), "outcome=\"failed\""],
        )
        .await
    };
    assert_eq!(failed(http.clone(), mirror.url.clone(), origin.url.clone()).await, 0.0);
    let origin_url = origin.url.clone();
    origin.kill_9();
    eventually("the mirror's reads of the stopped registry fail", || async {
        failed(http.clone(), mirror.url.clone(), origin_url.clone()).await > 0.0
    })
    .await;
    assert_eq!(names_and_origins(&agents(&http, &mirror.url, "").await), expected);
    mirror.stop().await;
}
