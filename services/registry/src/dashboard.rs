//! The dashboard at `GET /dashboard`: the communication graph live, an agent panel, a link
//! editor, recent calls and the org chart. Its files (`dashboard/src` and the pinned graph
//! library) are embedded in the binary by `build.rs`; the page talks only to this registry (its
//! Content-Security-Policy allows nothing else), so the agent panel reads an agent's card and
//! `/health` through the two read-only relays below rather than from the agent's own origin.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mesh_server::ErrorResponse;
use mesh_server::http::PathParam;

use crate::api::RegistryState;

/// One embedded file.
#[derive(Debug)]
struct Asset {
    /// Under `/dashboard/assets/`.
    path: &'static str,
    content_type: &'static str,
    /// Quoted, computed from the bytes at build time.
    etag: &'static str,
    body: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/dashboard_assets.rs"));

/// The page itself; its scripts and styles are assets.
const INDEX: &str = "index.html";

/// Only this registry's own origin: no inline script or style, no third party, no framing. The
/// graph library styles its canvas through the CSSOM, which `style-src 'self'` does not restrict.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Files may change with every build while their names stay, so browsers revalidate each time
/// (a 304 when the ETag still matches) instead of keeping a stale copy.
const ASSET_CACHE_CONTROL: &str = "no-cache";

/// An agent's card or health document larger than this is not relayed.
const RELAY_BODY_BYTES_MAX: usize = 256 * 1024;

/// What anyone may read without credentials: the page and its assets (`PUBLIC_PREFIXES`).
pub const PUBLIC_PATHS: &[&str] = &["/dashboard", "/dashboard/", "/openapi.json"];
pub const PUBLIC_PREFIXES: &[&str] = &["/dashboard/assets/"];

/// The dashboard's routes; merged into the registry's router.
pub fn routes(state: Arc<RegistryState>) -> Router {
    // The page and its assets are public (see [`PUBLIC_PATHS`]); the relays read agents'
    // documents, which only authenticated callers may.
    let relays = Router::new()
        .route("/dashboard/agents/{name}/card", get(agent_card))
        .route("/dashboard/agents/{name}/health", get(agent_health));
    Router::new()
        .route("/dashboard", get(index))
        .route("/dashboard/", get(index))
        .route("/dashboard/assets/{*path}", get(asset))
        .merge(mesh_server::auth::require(relays, mesh_server::auth::ANY_ROLE))
        .with_state(state)
}

async fn index(headers: HeaderMap) -> Response {
    serve(find(INDEX).expect("build.rs embeds dashboard/src/index.html"), &headers)
}

async fn asset(PathParam(path): PathParam<String>, headers: HeaderMap) -> Response {
    match find(&path) {
        Some(asset) => serve(asset, &headers),
        None => {
            ErrorResponse::new(StatusCode::NOT_FOUND, "ASSET_NOT_FOUND", format!("the dashboard has no file {path:?}"))
                .into_response()
        }
    }
}

fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|asset| asset.path == path)
}

/// The file, or `304 Not Modified` when the browser's copy carries the same ETag.
fn serve(asset: &Asset, request: &HeaderMap) -> Response {
    let fresh = request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|tag| tag.trim().trim_start_matches("W/"))
        .any(|tag| tag == asset.etag || tag == "*");
    let mut response =
        if fresh { StatusCode::NOT_MODIFIED.into_response() } else { Body::from(asset.body).into_response() };
    let headers = response.headers_mut();
    headers.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(ASSET_CACHE_CONTROL));
    if !fresh {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    }
    secure(headers);
    response
}

fn secure(headers: &mut HeaderMap) {
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// The agent's card, fetched now from the URL it registered.
async fn agent_card(State(state): State<Arc<RegistryState>>, PathParam(name): PathParam<String>) -> Response {
    match state.directory.get(&name) {
        Ok(agent) => relay(&state, &agent.agent_card_url).await,
        Err(error) => error.into_response(),
    }
}

/// The agent's own `/health` document (its metrics and circuit breakers), fetched now.
async fn agent_health(State(state): State<Arc<RegistryState>>, PathParam(name): PathParam<String>) -> Response {
    match state.directory.get(&name) {
        Ok(agent) => relay(&state, &agent.health_endpoint).await,
        Err(error) => error.into_response(),
    }
}

/// GETs a registered agent's document and answers it when it is a JSON value, else a JSON error.
/// Only URLs the agent registered are fetched, so the relay reaches nothing an agent did not offer.
async fn relay(state: &RegistryState, url: &str) -> Response {
    let request = match Request::builder()
        .method(Method::GET)
        .uri(url)
        .header(header::ACCEPT, "application/json")
        .body(axum::body::Bytes::new())
    {
        Ok(request) => request,
        Err(e) => return unreachable_agent(url, &e.to_string()),
    };
    let response = match state.http.send(request, state.health_check_timeout).await {
        Ok(response) => response,
        Err(e) => return unreachable_agent(url, &e.to_string()),
    };
    let status = response.status();
    let body = response.into_body();
    if body.len() > RELAY_BODY_BYTES_MAX {
        return unreachable_agent(url, &format!("the document is larger than {RELAY_BODY_BYTES_MAX} bytes"));
    }
    // An agent answers /health with its JSON report even when it reports itself unhealthy: pass
    // that on with its status, but never a body that is not JSON.
    if serde_json::from_slice::<serde_json::Value>(&body).is_err() {
        return unreachable_agent(url, &format!("answered {status} with a body that is not JSON"));
    }
    let status = if status.is_success() { StatusCode::OK } else { StatusCode::BAD_GATEWAY };
    let mut response = (status, Body::from(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn unreachable_agent(url: &str, reason: &str) -> Response {
    ErrorResponse::new(StatusCode::BAD_GATEWAY, "AGENT_UNREACHABLE", format!("cannot read {url}: {reason}"))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeds_the_page_its_scripts_and_the_graph_library_with_its_licence() {
        for path in [INDEX, "app.js", "style.css", "vendor/cytoscape.esm.min.mjs", "vendor/cytoscape.LICENSE.txt"] {
            let asset = find(path).unwrap_or_else(|| panic!("{path} is not embedded"));
            assert!(!asset.body.is_empty(), "{path} is empty");
            assert!(asset.etag.starts_with('"') && asset.etag.ends_with('"'), "{path}: {}", asset.etag);
        }
        assert!(find(INDEX).unwrap().content_type.starts_with("text/html"));
        assert!(find("vendor/cytoscape.esm.min.mjs").unwrap().content_type.starts_with("text/javascript"));
        let licence = std::str::from_utf8(find("vendor/cytoscape.LICENSE.txt").unwrap().body).unwrap();
        assert!(licence.contains("MIT") || licence.contains("Permission is hereby granted"), "{licence}");
    }

    #[test]
    fn answers_not_modified_for_a_matching_etag_only() {
        let asset = find("app.js").unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"other\", W/\"x\""));
        let response = serve(asset, &headers);
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], asset.content_type);
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from_str(&format!("\"other\", {}", asset.etag)).unwrap());
        let response = serve(asset, &headers);
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(response.headers()[header::ETAG], asset.etag);
        assert!(response.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap().contains("default-src 'self'"));
    }
}
