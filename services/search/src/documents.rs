//! Documents in and out over HTTP while the agent serves:
//!
//! - `POST /documents`: add or replace documents, as JSON Lines (`application/x-ndjson`, one BEIR
//!   corpus line each) or as JSON `{"documents": [...]}`;
//! - `GET /documents/{id}`: one stored document;
//! - `DELETE /documents/{id}`: remove one.
//!
//! Writes address the shared corpus, or a tenant's own documents with `?tenant=`. A read finds the
//! reader's tenant's document first, then the shared one: a user reads its own tenant's (naming
//! another is refused), an admin any tenant's.
//!
//! Ingestion computes vectors on blocking threads, so searches keep being answered meanwhile.
//!
//! With a document log (replicas), a write is committed in the log before it is answered, and the
//! answer names the log entry (`sequence`) that holds it: a replica whose `/health` shows an
//! `applied_sequence` at least that far has it.

use std::sync::Arc;
use std::time::Instant;

use tokio_util::task::AbortOnDropHandle;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use mesh_agent_kit::AgentError;
use mesh_protocol::call::validate_tenant_id;
use mesh_server::ErrorResponse;
use mesh_server::auth::{ADMIN_ROLES, ANY_ROLE, RequestCaller, auth_error_response, require};
use mesh_server::http::{PathParam, QueryParams};
use serde::{Deserialize, Serialize};

use crate::corpus::{Document, read_jsonl};
use crate::index::IngestReport;
use crate::replica::{Replica, Written};

/// Content types of a JSON Lines body.
const JSON_LINES_TYPES: &[&str] = &["application/x-ndjson", "application/jsonl", "application/json-lines"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentBatch {
    documents: Vec<Document>,
}

/// The owner a request addresses: `?tenant=` for a tenant's own documents, none for the shared
/// corpus.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnerQuery {
    tenant: Option<String>,
}

impl OwnerQuery {
    /// The tenant named, checked; `None` for the shared corpus.
    fn tenant(&self) -> Result<Option<&str>, ErrorResponse> {
        match self.tenant.as_deref() {
            None | Some("") => Ok(None),
            Some(tenant) => validate_tenant_id(tenant)
                .map(|()| Some(tenant))
                .map_err(|reason| ErrorResponse::new(StatusCode::BAD_REQUEST, "TENANT_INVALID", reason)),
        }
    }
}

/// A stored document, with its tenant when it is not of the shared corpus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredDocument {
    #[serde(flatten)]
    pub document: Document,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// Answer of `POST /documents`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestAnswer {
    pub added: usize,
    pub replaced: usize,
    pub unchanged: usize,
    pub embedded: usize,
    /// Documents in the index afterwards, of every owner.
    pub documents: usize,
    /// The tenant the documents went to; none for the shared corpus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The document log entry holding this write; none without a log, or when nothing changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    pub time_ms: f64,
}

/// Answer of `DELETE /documents/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeleteAnswer {
    pub deleted: String,
    pub documents: usize,
    /// The document log entry holding this deletion; none without a log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
}

/// The replica the routes change, and its log follower, stopped when the routes are dropped.
#[derive(Debug)]
struct Documents {
    replica: Arc<Replica>,
    _follower: Option<AbortOnDropHandle<()>>,
}

/// Documents are the admin's to ingest and delete; anyone authenticated reads them.
pub fn routes(replica: Arc<Replica>, follower: Option<AbortOnDropHandle<()>>) -> Router {
    let writes = Router::new().route("/documents", post(ingest)).route("/documents/{id}", delete(remove));
    let reads = Router::new().route("/documents/{id}", get(fetch));
    require(writes, ADMIN_ROLES)
        .merge(require(reads, ANY_ROLE))
        .with_state(Arc::new(Documents { replica, _follower: follower }))
}

async fn ingest(
    State(documents_state): State<Arc<Documents>>,
    QueryParams(owner): QueryParams<OwnerQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<IngestAnswer>, ErrorResponse> {
    let started = Instant::now();
    let tenant = owner.tenant()?.map(str::to_owned);
    let body = body.map_err(|rejection| {
        let code = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            "REQUEST_BODY_TOO_LARGE"
        } else {
            "REQUEST_INVALID_BODY"
        };
        ErrorResponse::new(rejection.status(), code, rejection.body_text())
    })?;
    let documents = parse_documents(&headers, &body)?;
    // Waiting ingests queue in the replica; the request timeout bounds how long.
    let replica = &documents_state.replica;
    let Written { report, sequence } = replica.ingest(tenant.clone(), documents).await.map_err(agent_error)?;
    let IngestReport { added, replaced, unchanged, embedded, deleted: _ } = report;
    Ok(Json(IngestAnswer {
        added,
        replaced,
        unchanged,
        embedded,
        documents: replica.index().len(),
        tenant,
        sequence,
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
    State(documents): State<Arc<Documents>>,
    RequestCaller(caller): RequestCaller,
    QueryParams(owner): QueryParams<OwnerQuery>,
    PathParam(id): PathParam<String>,
) -> Result<Json<StoredDocument>, ErrorResponse> {
    let requested = owner.tenant()?.unwrap_or_default();
    let tenant = caller.tenant(requested, None).map_err(|error| auth_error_response(&error))?;
    let tenant = Some(tenant.as_str()).filter(|tenant| !tenant.is_empty());
    let index = documents.replica.index();
    let found = match tenant.and_then(|tenant| index.document(Some(tenant), &id)) {
        Some(own) => Some((own, tenant)),
        None => index.document(None, &id).map(|shared| (shared, None)),
    };
    let (document, tenant) = found.ok_or_else(|| not_found(&id))?;
    Ok(Json(StoredDocument { document: (*document).clone(), tenant: tenant.map(str::to_owned) }))
}

async fn remove(
    State(documents): State<Arc<Documents>>,
    QueryParams(owner): QueryParams<OwnerQuery>,
    PathParam(id): PathParam<String>,
) -> Result<Json<DeleteAnswer>, ErrorResponse> {
    let tenant = owner.tenant()?.map(str::to_owned);
    let replica = &documents.replica;
    let Written { report, sequence } = replica.delete(tenant, id.clone()).await.map_err(agent_error)?;
    if report.deleted == 0 {
        return Err(not_found(&id));
    }
    Ok(Json(DeleteAnswer { deleted: id, documents: replica.index().len(), sequence }))
}

/// The agent's error body of a failed change.
fn agent_error(error: crate::error::SearchError) -> ErrorResponse {
    AgentError::from(error).into()
}

fn not_found(id: &str) -> ErrorResponse {
    ErrorResponse::new(StatusCode::NOT_FOUND, "DOCUMENT_NOT_FOUND", format!("no document with _id {id:?}"))
}
