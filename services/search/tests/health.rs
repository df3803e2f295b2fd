//! Honest health: a search agent whose embedding model is missing serves the lexical profiles
//! and says `degraded` (still ready: it takes traffic), naming the missing part.

use mesh_agent_kit::AgentConfig;
use mesh_client::HttpClient;
use search::SearchConfig;
use search::config::DenseConfig;
use serde_json::Value;

#[tokio::test]
async fn a_missing_model_makes_the_agent_degraded_but_ready() {
    let data = tempfile::tempdir().unwrap();
    let no_model = tempfile::tempdir().unwrap();
    let config = SearchConfig {
        agent: AgentConfig {
            task_store_url: Some(format!("sqlite://{}", data.path().join("tasks.db").display())),
            ..AgentConfig::default()
        },
        data_dir: Some(data.path().join("search")),
        dense: DenseConfig { model_dir: Some(no_model.path().to_owned()), download: false, ..DenseConfig::default() },
        ..SearchConfig::default()
    };
    let app = search::build(&config, HttpClient::with_reqwest().unwrap()).await.unwrap();
    let url = app.url().to_owned();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));

    let health = reqwest::get(format!("{url}/health")).await.unwrap();
    assert_eq!(health.status(), 200, "a degraded agent still answers 200: it serves");
    let health: Value = health.json().await.unwrap();
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["components"]["dense"]["status"], "unavailable", "{health}");
    // The bundled sample is far below the size from which dense searches compare signs first.
    assert_eq!(health["components"]["index"]["dense_method"], "exact", "{health}");
    let reasons = health["reasons"].as_array().unwrap();
    assert!(reasons.iter().any(|r| r.as_str().is_some_and(|r| r.starts_with("dense: "))), "{health}");
    let ready = reqwest::get(format!("{url}/health/ready")).await.unwrap();
    assert_eq!(ready.status(), 200);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!((ready["status"].as_str(), ready["health"].as_str()), (Some("ready"), Some("degraded")));

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
