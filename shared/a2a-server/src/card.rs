use std::hash::{DefaultHasher, Hash, Hasher};

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mesh_protocol::a2a::v1::{AgentCard, AgentSkill};

/// How long clients may cache the card; it only changes when the agent restarts with a new one.
const CARD_MAX_AGE_S: u64 = 300;

/// An agent card rendered once at start, with the validator clients use to revalidate it.
#[derive(Debug, Clone)]
pub struct CardDocument {
    card: AgentCard,
    json: Bytes,
    etag: HeaderValue,
    /// When this document was rendered, as an HTTP date: the card changes only with a new one.
    last_modified: HeaderValue,
    /// Who may keep a copy: anyone (`public`), or only the client it was served to (`private`).
    cache_scope: &'static str,
}

impl CardDocument {
    /// The public card, which shared caches may keep.
    pub fn new(card: AgentCard) -> Result<Self, serde_json::Error> {
        Self::render(card, "public")
    }

    /// A card served to authenticated callers only (the extended card): no shared cache may keep
    /// it, or it would serve it to the next caller without credentials.
    pub fn private(card: AgentCard) -> Result<Self, serde_json::Error> {
        Self::render(card, "private")
    }

    fn render(card: AgentCard, cache_scope: &'static str) -> Result<Self, serde_json::Error> {
        let json = Bytes::from(serde_json::to_vec(&card)?);
        let mut hasher = DefaultHasher::new();
        json.hash(&mut hasher);
        let etag = HeaderValue::try_from(format!("\"{:016x}\"", hasher.finish()))
            .expect("a quoted hex string is a valid header value");
        let last_modified = HeaderValue::try_from(chrono::Utc::now().format("%a, %d %b %Y %H:%M:%S GMT").to_string())
            .expect("an HTTP date is a valid header value");
        Ok(Self { card, json, etag, last_modified, cache_scope })
    }

    pub fn card(&self) -> &AgentCard {
        &self.card
    }

    /// The card, or 304 when the client already holds this version (`If-None-Match`).
    pub fn respond(&self, request_headers: &HeaderMap) -> Response {
        let cache_control = HeaderValue::from_str(&format!("{}, max-age={CARD_MAX_AGE_S}", self.cache_scope))
            .expect("a numeric max-age is a valid header value");
        let fresh = request_headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            // If-None-Match uses the weak comparison (RFC 9110 §13.1.2): a `W/` prefix still matches.
            .map(|tag| tag.trim().trim_start_matches("W/"))
            .any(|tag| tag == "*" || tag == self.etag);
        let headers = [
            (header::ETAG, self.etag.clone()),
            (header::LAST_MODIFIED, self.last_modified.clone()),
            (header::CACHE_CONTROL, cache_control),
        ];
        if fresh {
            return (StatusCode::NOT_MODIFIED, headers).into_response();
        }
        let content_type = [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))];
        (headers, content_type, self.json.clone()).into_response()
    }
}

/// `card` with `signer`'s signature (A2A 1.0 §8.4) over the JSON it is served as.
pub fn sign_card(card: AgentCard, signer: &mesh_auth::CardSigner) -> Result<AgentCard, mesh_auth::AuthError> {
    let unreadable = |e: serde_json::Error| mesh_auth::AuthError::Config(format!("the card cannot be signed: {e}"));
    let mut json = serde_json::to_value(&card).map_err(unreadable)?;
    signer.sign(&mut json)?;
    serde_json::from_value(json).map_err(unreadable)
}

/// The authenticated extended card (A2A 1.0 §3.1.11): the public card as served (interfaces,
/// capabilities and security schemes included) plus `skills`, which only authenticated callers see.
pub fn extended_card(public: &AgentCard, skills: &[AgentSkill]) -> AgentCard {
    let mut card = public.clone();
    card.skills.extend_from_slice(skills);
    card
}
