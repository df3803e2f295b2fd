//! One orchestrated query under load, and how it went: what the chaos script's load generator
//! (`examples/chaos_load.rs`) and the replica test (`tests/replicas.rs`) both send and count.
//! Included by path from each (`#[path]`), so there is one definition of what counts as answered.

use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue, Method};
use mesh_client::{HttpClient, json_request};
use mesh_protocol::agents::QueryAnswer;
use mesh_protocol::call::CALL_DEADLINE_MS_HEADER;
use mesh_protocol::error::ErrorBody;
use mesh_protocol::seed::{ResponseStatus, TaskRequest, TaskResponse};

/// Queries the workers cycle through.
pub const QUERIES: &[&str] = &[
    "show me robots playing soccer",
    "jazz piano recordings",
    "documentary about the ocean",
    "funny cat videos",
    "photos of mountains at sunset",
    "news about electric cars",
    "classical music for studying",
    "cooking pasta tutorial",
];
/// Extra time a worker waits past a query's deadline, so a late answer is seen (and counted)
/// rather than cut off.
const LATE_GRACE_MS: u64 = 5_000;

/// How one query went.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// `SUCCESS`, `PARTIAL`, `ERROR <code>`, `TIMEOUT <code>` or `NO BODY <status or failure>`.
    pub kind: String,
    pub latency_ms: f64,
    /// The search agent that answered, from the answer's metadata.
    pub searched_by: Option<String>,
    pub finished: Instant,
}

impl Outcome {
    /// A `SUCCESS` or `PARTIAL` answer: the query was answered, wholly or in part.
    pub fn answered(&self) -> bool {
        self.kind == "SUCCESS" || self.kind == "PARTIAL"
    }
}

/// Sends `text` to the orchestrator at `orchestrator_url` with a deadline of `deadline_ms`.
pub async fn query(http: &HttpClient, orchestrator_url: &str, text: &str, deadline_ms: u64) -> Outcome {
    let task = TaskRequest::from_text(None, text, Some(serde_json::json!({"top_k": 5})));
    let url = format!("{}/tasks/send", orchestrator_url.trim_end_matches('/'));
    let started = Instant::now();
    let outcome = |kind: String, searched_by: Option<String>| Outcome {
        kind,
        latency_ms: started.elapsed().as_secs_f64() * 1000.0,
        searched_by,
        finished: Instant::now(),
    };
    let mut request = match json_request(Method::POST, &url, Some(&task)) {
        Ok(request) => request,
        Err(error) => return outcome(format!("NO BODY {error}"), None),
    };
    request.headers_mut().insert(HeaderName::from_static(CALL_DEADLINE_MS_HEADER), HeaderValue::from(deadline_ms));
    let response = match http.send(request, Duration::from_millis(deadline_ms + LATE_GRACE_MS)).await {
        Ok(response) => response,
        Err(error) => return outcome(format!("NO BODY {error}"), None),
    };
    if response.status().is_success() {
        return match serde_json::from_slice::<TaskResponse>(response.body()) {
            Ok(answer) => {
                let searched_by = mesh_client::reply_data::<QueryAnswer>(&url, &answer).ok().and_then(|a| {
                    a.metadata.agents.into_iter().find(|c| c.capability == "search").and_then(|c| c.agent)
                });
                let kind = match answer.status {
                    ResponseStatus::Success => "SUCCESS",
                    ResponseStatus::Partial => "PARTIAL",
                };
                outcome(kind.to_owned(), searched_by)
            }
            Err(error) => outcome(format!("NO BODY {} {error}", response.status()), None),
        };
    }
    match serde_json::from_slice::<ErrorBody>(response.body()) {
        Ok(body) => {
            let word = serde_json::to_value(body.status).ok().and_then(|v| v.as_str().map(str::to_owned));
            outcome(format!("{} {} ({})", word.unwrap_or_default(), body.error_code, response.status()), None)
        }
        Err(_) => outcome(format!("NO BODY {}", response.status()), None),
    }
}
