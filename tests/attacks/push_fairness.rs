//! Finding 4, the address half: a caller chooses its webhook's URL, so a push notification must
//! not become a request into the agent's own network (SSRF). Webhooks on loopback, private,
//! shared (CGNAT, where a cloud metadata service answers at 100.100.100.200) and other
//! non-public addresses, named directly or through a host name that resolves to one, are refused
//! by default; an agent that allows a network by name opts in to it.

use entity_extraction::EntityExtractionConfig;
use mesh_agent_kit::AgentConfig;
use mesh_client::HttpClient;
use serde_json::{Value, json};

/// Serves an entity-extraction agent on port 0 that allows webhooks in `push_allowed_networks`;
/// returns its URL and what stops it when dropped.
async fn agent(push_allowed_networks: &[&str]) -> (String, tokio::sync::oneshot::Sender<()>) {
    let config = EntityExtractionConfig {
        agent: AgentConfig {
            port: 0,
            task_store_url: Some("sqlite::memory:".into()),
            push_allowed_networks: push_allowed_networks.iter().map(|n| (*n).to_owned()).collect(),
            ..AgentConfig::default()
        },
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

/// A `SendMessage` whose answer is to be pushed to `webhook`.
async fn send_with_webhook(agent: &str, webhook: &str) -> Value {
    let message =
        json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": "Tokyo"}]});
    let params = json!({"message": message, "configuration": {"taskPushNotificationConfig": {"url": webhook}}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params});
    let answer = reqwest::Client::new().post(agent).header("A2A-Version", "1.0").json(&body).send().await.unwrap();
    answer.json().await.unwrap()
}

#[tokio::test]
async fn webhooks_on_non_public_addresses_are_refused_unless_their_network_is_allowed() {
    let (url, _stop) = agent(&[]).await;
    for webhook in [
        "http://127.0.0.1:9/hook",
        "http://localhost:9/hook",
        "http://10.0.0.1/hook",
        "http://192.168.1.1/hook",
        "http://100.100.100.200/latest/meta-data/",
        "http://[::1]:9/hook",
        "http://[::ffff:127.0.0.1]:9/hook",
    ] {
        let refused = send_with_webhook(&url, webhook).await;
        assert_eq!(refused["error"]["code"], -32602, "{webhook}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("non-public") || message.contains("no allowed address"), "{webhook}: {message}");
    }

    let (url, _stop) = agent(&["127.0.0.0/8"]).await;
    let accepted = send_with_webhook(&url, "http://127.0.0.1:9/hook").await;
    assert_eq!(accepted["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{accepted}");
    let refused = send_with_webhook(&url, "http://10.0.0.1/hook").await;
    assert_eq!(refused["error"]["code"], -32602, "only the network allowed by name opens: {refused}");
}
