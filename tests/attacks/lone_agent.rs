//! One agent served alone on port 0 (the entity-extraction agent, tasks in memory), for the
//! attacks aimed at a single server rather than the suite.

use entity_extraction::EntityExtractionConfig;
use mesh_agent_kit::AgentConfig;
use mesh_client::HttpClient;

/// Serves the agent with `agent`'s settings (its port and task store set here); returns its URL
/// and what stops it when dropped.
pub async fn serve(agent: AgentConfig) -> (String, tokio::sync::oneshot::Sender<()>) {
    let config = EntityExtractionConfig {
        agent: AgentConfig { port: 0, task_store_url: Some("sqlite::memory:".into()), ..agent },
        ..EntityExtractionConfig::default()
    };
    let app = entity_extraction::build(&config, HttpClient::with_reqwest().unwrap()).await.unwrap();
    let url = app.url().to_owned();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    (url, stop)
}
