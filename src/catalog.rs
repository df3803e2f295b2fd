//! `a2a-mesh catalog import`: registers with a registry every A2A agent a catalog lists, an AI
//! Catalog or an Agentic Resource Discovery manifest (both `specVersion` 1.x, entries of
//! `identifier`, `type` and `url` or `data`), read from a file or a URL.
//!
//! Each agent is registered through the registry's `POST /register` with its card's URL alone,
//! so the registry fetches and checks the card as for any registration: a catalog vouches for
//! nothing. Entries that are not A2A agent cards are skipped; an agent card given inline
//! (`data`) fails, since registration reads a card where its agent serves it.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use http::Method;
use mesh_client::{ClientError, HttpClient};
use mesh_protocol::registry::StatusMessage;
use registry::catalog::{A2A_AGENT_CARD_TYPE, AI_CATALOG_MEDIA_TYPE};
use serde::Deserialize;
use serde_json::{Value, json};

/// The registry `up` starts.
pub const REGISTRY_URL_DEFAULT: &str = "http://127.0.0.1:8000";
/// The catalog major version read: a higher one may mean something else, and is refused, as the
/// AI Catalog's version handling asks.
const SPEC_MAJOR_VERSION: &str = "1";
/// Time to fetch a catalog from a URL.
const CATALOG_FETCH_TIMEOUT_MS: u64 = 30_000;
/// The largest catalog file read: what the HTTP client takes from a URL.
const CATALOG_FILE_BYTES_MAX: u64 = 8 * 1024 * 1024;
/// Time one registration may take: the registry fetches and checks the card meanwhile (5 s at
/// most by default).
const REGISTER_TIMEOUT_MS: u64 = 15_000;
/// Registrations in flight at once: a large catalog imports in parallel without crowding the
/// registry, which fetches a card for each.
const REGISTRATIONS_IN_FLIGHT_MAX: usize = 8;

/// A catalog as either format has it; fields this command does not use are ignored, as both
/// formats ask of readers.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Catalog {
    pub spec_version: String,
    pub entries: Vec<Entry>,
}

/// One entry of a catalog.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub identifier: Option<String>,
    pub display_name: Option<String>,
    #[serde(rename = "type")]
    pub media_type: Option<String>,
    pub url: Option<String>,
    pub data: Option<Value>,
}

impl Entry {
    /// How the report names the entry: its display name, else its identifier.
    fn label(&self, index: usize) -> String {
        self.display_name.clone().or_else(|| self.identifier.clone()).unwrap_or_else(|| format!("entry {index}"))
    }
}

/// What became of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Registered from the card at this URL.
    Registered(String),
    Failed(String),
    /// Not an agent to register (another artifact type), with why.
    Skipped(String),
}

/// Reads the catalog at `source`: an `http://` or `https://` URL (fetched with `http`), else a
/// file path.
pub async fn load(source: &str, http: &HttpClient) -> anyhow::Result<Catalog> {
    let document: Value = if source.starts_with("http://") || source.starts_with("https://") {
        http.get_json(source, Duration::from_millis(CATALOG_FETCH_TIMEOUT_MS))
            .await
            .with_context(|| format!("cannot fetch the catalog at {source}"))?
    } else {
        let path = Path::new(source);
        let size = std::fs::metadata(path).with_context(|| format!("cannot read {source}"))?.len();
        anyhow::ensure!(size <= CATALOG_FILE_BYTES_MAX, "{source} is larger than {CATALOG_FILE_BYTES_MAX} bytes");
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {source}"))?;
        serde_json::from_str(&text).with_context(|| format!("{source} is not JSON"))?
    };
    let catalog: Catalog = serde_json::from_value(document)
        .with_context(|| format!("{source} is not an AI Catalog ({AI_CATALOG_MEDIA_TYPE}) nor an ARD manifest"))?;
    let major = catalog.spec_version.split('.').next().unwrap_or_default();
    anyhow::ensure!(
        major == SPEC_MAJOR_VERSION,
        "{source} is a catalog of specVersion {}; this command reads {SPEC_MAJOR_VERSION}.x",
        catalog.spec_version
    );
    Ok(catalog)
}

/// Registers every A2A agent of `catalog` with the registry at `registry_url` through `http`
/// (which carries the credential to register with); each entry's label and outcome, in the
/// catalog's order.
pub async fn import(catalog: &Catalog, registry_url: &str, http: &HttpClient) -> Vec<(String, Outcome)> {
    let register_url = format!("{}/register", registry_url.trim_end_matches('/'));
    futures::stream::iter(catalog.entries.iter().enumerate())
        .map(|(index, entry)| {
            let register_url = register_url.as_str();
            async move { (entry.label(index), import_entry(entry, register_url, http).await) }
        })
        .buffered(REGISTRATIONS_IN_FLIGHT_MAX)
        .collect()
        .await
}

async fn import_entry(entry: &Entry, register_url: &str, http: &HttpClient) -> Outcome {
    let media_type = entry.media_type.as_deref().unwrap_or_default();
    if media_type != A2A_AGENT_CARD_TYPE {
        return Outcome::Skipped(format!("not an A2A agent card (type {media_type:?})"));
    }
    let Some(card_url) = entry.url.as_deref() else {
        let why = if entry.data.is_some() {
            "its card is inline (data): the registry reads an agent's card where the agent serves it"
        } else {
            "neither url nor data"
        };
        return Outcome::Failed(why.to_owned());
    };
    let body = json!({ "agent_card_url": card_url });
    let answer: Result<StatusMessage, ClientError> =
        http.call_json(Method::POST, register_url, Some(&body), Duration::from_millis(REGISTER_TIMEOUT_MS)).await;
    match answer {
        Ok(_) => Outcome::Registered(card_url.to_owned()),
        Err(ClientError::Status { status, body: Some(error), .. }) => {
            Outcome::Failed(format!("{status} {}: {}", error.error_code, error.error_message))
        }
        Err(error) => Outcome::Failed(error.to_string()),
    }
}

/// The report's lines (one per entry, then the counts), and whether every agent registered.
pub fn report(outcomes: &[(String, Outcome)]) -> (Vec<String>, bool) {
    let mut lines = Vec::with_capacity(outcomes.len() + 1);
    let (mut registered, mut failed, mut skipped) = (0, 0, 0);
    for (label, outcome) in outcomes {
        lines.push(match outcome {
            Outcome::Registered(card_url) => {
                registered += 1;
                format!("registered  {label}  ({card_url})")
            }
            Outcome::Failed(why) => {
                failed += 1;
                format!("failed      {label}: {why}")
            }
            Outcome::Skipped(why) => {
                skipped += 1;
                format!("skipped     {label}: {why}")
            }
        });
    }
    lines.push(format!("{registered} registered, {failed} failed, {skipped} skipped"));
    (lines, failed == 0)
}
