use std::time::Duration;

use http::Method;
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::registry::{AGENT_CARD_PATH, DEFAULT_PROCESS_PATH};
use mesh_protocol::seed::{Part, TaskRequest, TaskResponse};
use serde::de::DeserializeOwned;

use crate::http_client::{ClientError, HttpClient};

/// Calls the seed endpoint of the agent at `agent_url` (`POST {agent_url}/tasks/send`).
pub async fn send_task(
    http: &HttpClient,
    agent_url: &str,
    task: &TaskRequest,
    timeout: Duration,
) -> Result<TaskResponse, ClientError> {
    post_task(http, &format!("{}{DEFAULT_PROCESS_PATH}", agent_url.trim_end_matches('/')), task, timeout).await
}

/// Sends a seed task to a process endpoint as registered (an absolute URL).
pub async fn post_task(
    http: &HttpClient,
    endpoint: &str,
    task: &TaskRequest,
    timeout: Duration,
) -> Result<TaskResponse, ClientError> {
    http.call_json(Method::POST, endpoint, Some(task), timeout).await
}

/// Fetches the card of the agent at `agent_url` from its well-known path.
pub async fn fetch_card(http: &HttpClient, agent_url: &str, timeout: Duration) -> Result<AgentCard, ClientError> {
    fetch_card_at(http, &format!("{}{AGENT_CARD_PATH}", agent_url.trim_end_matches('/')), timeout).await
}

/// Fetches an agent card from where it was registered (an absolute URL).
pub async fn fetch_card_at(http: &HttpClient, card_url: &str, timeout: Duration) -> Result<AgentCard, ClientError> {
    http.get_json(card_url, timeout).await
}

/// The first data part of an agent's reply, decoded as `T`.
pub fn reply_data<T: DeserializeOwned>(agent_url: &str, response: &TaskResponse) -> Result<T, ClientError> {
    let data = response
        .messages
        .iter()
        .flat_map(|m| &m.parts)
        .find_map(|part| match part {
            Part::Data { data } => Some(data),
            Part::Text { .. } => None,
        })
        .ok_or_else(|| ClientError::Decode {
            url: agent_url.to_owned(),
            reason: "the reply has no data part".into(),
        })?;
    T::deserialize(data).map_err(|e| ClientError::Decode { url: agent_url.to_owned(), reason: e.to_string() })
}
