//! Documents in and out over HTTP while the agent serves:
//!
//! - `POST /documents`: add or replace documents, as JSON Lines (`application/x-ndjson`, one BEIR
//!   corpus line each) or as JSON `{"documents": [...]}`;
//! - `GET /documents/{id}`: one stored document;
//! - `DELETE /documents/{id}`: remove one.
//!
//! Ingestion computes vectors on blocking threads, so searches keep being answered meanwhile.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use mesh_agent_kit::auth::{ADMIN_ROLES, ANY_ROLE, require};
use mesh_agent_kit::http::PathParam;
use mesh_agent_kit::{AgentError, ErrorResponse};
use serde::{Deserialize, Serialize};

use crate::corpus::{Document, read_jsonl};
use crate::error::SearchError;
use crate::index::{IngestReport, SearchIndex};

/// Content types of a JSON Lines body.
const JSON_LINES_TYPES: &[&str] = &["application/x-ndjson", "application/jsonl", "application/json-lines"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentBatch {
    documents: Vec<Document>,
}

/// Answer of `POST /documents`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestAnswer {
    pub added: usize,
    pub replaced: usize,
    pub unchanged: usize,
    pub embedded: usize,
    /// Documents in the index afterwards.
    pub documents: usize,
    pub time_ms: f64,
}

/// Answer of `DELETE /documents/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeleteAnswer {
    pub deleted: String,
    pub documents: usize,
}

/// Documents are the admin's to ingest and delete; anyone authenticated reads them.
pub fn routes(index: Arc<SearchIndex>) -> Router {
    let writes = Router::new().route("/documents", post(ingest)).route("/documents/{id}", delete(remove));
    let reads = Router::new().route("/documents/{id}", get(fetch));
    require(writes, ADMIN_ROLES).merge(require(reads, ANY_ROLE)).with_state(index)
}

async fn ingest(
    State(index): State<Arc<SearchIndex>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<IngestAnswer>, ErrorResponse> {
    let started = Instant::now();
    let body = body.map_err(|rejection| {
        let code = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            "REQUEST_BODY_TOO_LARGE"
        } else {
            "REQUEST_INVALID_BODY"
        };
        ErrorResponse::new(rejection.status(), code, rejection.body_text())
    })?;
    let documents = parse_documents(&headers, &body)?;
    let writer = index.clone();
    let report = on_blocking_thread(move || writer.upsert(documents, &|_| {})).await?;
    let IngestReport { added, replaced, unchanged, embedded } = report;
    Ok(Json(IngestAnswer {
        added,
        replaced,
        unchanged,
        embedded,
        documents: index.len(),
        time_ms: started.elapsed().as_secs_f64() * 1000.0,
    }))
}

fn parse_documents(headers: &HeaderMap, body: &[u8]) -> Result<Vec<Document>, ErrorResponse> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let invalid = |message: String| ErrorResponse::new(StatusCode::BAD_REQUEST, "DOCUMENTS_INVALID", message);
    let documents = if JSON_LINES_TYPES.contains(&content_type.as_str()) {
        read_jsonl(body).map_err(|e| invalid(e.to_string()))?
    } else if content_type == "application/json" {
        let batch: DocumentBatch = serde_json::from_slice(body).map_err(|e| {
            invalid(format!("expected {{\"documents\": [{{\"_id\", \"title\", \"text\"}}, ...]}}: {e}"))
        })?;
        if let Some(position) = batch.documents.iter().position(|d| d.id.is_empty()) {
            return Err(invalid(format!("document {position} has an empty _id")));
        }
        batch.documents
    } else {
        return Err(ErrorResponse::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "REQUEST_UNSUPPORTED_MEDIA_TYPE",
            format!("send application/x-ndjson (BEIR corpus lines) or application/json, not {content_type:?}"),
        ));
    };
    if documents.is_empty() {
        return Err(invalid("the body holds no document".into()));
    }
    Ok(documents)
}

async fn fetch(
    State(index): State<Arc<SearchIndex>>,
    PathParam(id): PathParam<String>,
) -> Result<Json<Document>, ErrorResponse> {
    index.document(&id).map(|document| Json((*document).clone())).ok_or_else(|| not_found(&id))
}

async fn remove(
    State(index): State<Arc<SearchIndex>>,
    PathParam(id): PathParam<String>,
) -> Result<Json<DeleteAnswer>, ErrorResponse> {
    let (writer, ids) = (index.clone(), vec![id.clone()]);
    let deleted = on_blocking_thread(move || writer.delete(&ids)).await?;
    if deleted == 0 {
        return Err(not_found(&id));
    }
    Ok(Json(DeleteAnswer { deleted: id, documents: index.len() }))
}

/// Runs index work on a blocking thread (it computes vectors and writes files), its failures as
/// the agent's error bodies.
async fn on_blocking_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, SearchError> + Send + 'static,
) -> Result<T, ErrorResponse> {
    crate::on_blocking_thread(work).await.map_err(|e| AgentError::from(e).into())
}

fn not_found(id: &str) -> ErrorResponse {
    ErrorResponse::new(StatusCode::NOT_FOUND, "DOCUMENT_NOT_FOUND", format!("no document with _id {id:?}"))
}
