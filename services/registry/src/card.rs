//! What the registry reads from an agent's card (issue #36): its name, the capabilities its
//! skills offer, and the interfaces it serves (A2A 1.0 `supportedInterfaces`, and 0.3 `url`,
//! `preferredTransport` and `additionalInterfaces`), so a standard A2A agent registers by its card
//! alone; and the fetch itself, bounded in time and size, shared with the health poll of agents
//! that have no `/health`.

use std::time::Duration;

use axum::body::Bytes;
use mesh_client::HttpClient;
use mesh_protocol::a2a::binding;
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::registry::SkillProfile;
use serde::{Deserialize, Serialize};
use url::Url;

use crate::intake::{CAPABILITIES_MAX, is_capability_name};

/// Largest card the registry reads; a bigger one is refused (cards are a few kilobytes).
pub const CARD_BYTES_MAX: usize = 256 * 1024;
/// Most interfaces kept of one card.
pub const INTERFACES_MAX: usize = 16;
/// The protocol version a 0.3 card's interfaces speak when it does not say.
const LEGACY_PROTOCOL_VERSION: &str = "0.3";

/// One interface an agent serves, as its card declares it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AgentInterfaceRecord {
    /// `JSONRPC`, `HTTP+JSON`, `GRPC` or a custom binding URI.
    pub protocol_binding: String,
    /// The A2A version spoken there: `1.0` or `0.3`.
    pub protocol_version: String,
    /// Absolute, on the agent's own origin.
    pub url: String,
}

/// Why a card could not be read. The words are the registry's own: nothing of the fetched
/// document is quoted back (a registrant may point the registry at a document it should not
/// show), the details go to the logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CardProblem {
    /// No answer (a timeout, a refused connection).
    Unreachable(String),
    /// An answer other than `200`.
    Status(u16),
    /// The outbound address policy refused the address.
    AddressRefused(String),
    TooLarge,
    NotJson(String),
    NotACard(String),
    NoName,
}

impl CardProblem {
    /// The problem in words a caller may read.
    pub fn words(&self) -> String {
        match self {
            // Which it was stays in the logs: it would tell a caller which internal hosts answer.
            Self::Unreachable(_) | Self::Status(_) => "it cannot be fetched".into(),
            Self::AddressRefused(_) => "its address is refused by the outbound address policy".into(),
            Self::TooLarge => format!("it is larger than {CARD_BYTES_MAX} bytes"),
            Self::NotJson(_) => "it is not JSON".into(),
            Self::NotACard(_) => "it does not parse as an A2A agent card".into(),
            Self::NoName => "it names no agent (its name is empty)".into(),
        }
    }
}

/// A fetched card: the typed card, and the document as served (its signatures cover that).
#[derive(Debug, Clone)]
pub struct FetchedCard {
    pub card: AgentCard,
    pub document: serde_json::Value,
}

/// Fetches and parses the card at `url` (no redirects, no proxy: the registry's client follows
/// neither; every address goes through its outbound address policy).
pub async fn fetch_card(http: &HttpClient, url: &str, timeout: Duration) -> Result<FetchedCard, CardProblem> {
    let request = http::Request::get(url)
        .header(http::header::ACCEPT, "application/json")
        .body(Bytes::new())
        .map_err(|e| CardProblem::Unreachable(e.to_string()))?;
    let response = http.send(request, timeout).await.map_err(|error| match error {
        refused if refused.is_refused_address() => CardProblem::AddressRefused(refused.to_string()),
        other => CardProblem::Unreachable(other.to_string()),
    })?;
    if response.status() != http::StatusCode::OK {
        return Err(CardProblem::Status(response.status().as_u16()));
    }
    let document = parse_document(response.body())?;
    Ok(FetchedCard { card: card_from(&document)?, document })
}

/// A document of at most [`CARD_BYTES_MAX`] that is JSON.
fn parse_document(body: &[u8]) -> Result<serde_json::Value, CardProblem> {
    if body.len() > CARD_BYTES_MAX {
        return Err(CardProblem::TooLarge);
    }
    serde_json::from_slice(body).map_err(|e| CardProblem::NotJson(e.to_string()))
}

/// An A2A card (1.0, 0.3 or both) with a name.
fn card_from(document: &serde_json::Value) -> Result<AgentCard, CardProblem> {
    let card = AgentCard::deserialize(document).map_err(|e| CardProblem::NotACard(e.to_string()))?;
    if card.name.trim().is_empty() {
        return Err(CardProblem::NoName);
    }
    Ok(card)
}

/// Skills of a card the registry keeps for search: a card lists a few; one listing more is
/// searched by its first ones.
pub const PROFILE_SKILLS_MAX: usize = 32;
/// Examples and tags kept per skill.
pub const PROFILE_LIST_ITEMS_MAX: usize = 16;
/// Characters kept of a description, a name, a tag or an example: enough for any real one.
pub const PROFILE_TEXT_CHARS_MAX: usize = 1_000;

/// What the registry searches an agent by: its card's description and skills, bounded, so a
/// card cannot grow the registry's memory or its index beyond a few kilobytes an agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CardProfile {
    /// The card's description.
    #[serde(default)]
    pub description: String,
    /// The card's skills, in its order.
    #[serde(default)]
    pub skills: Vec<SkillProfile>,
}

/// The searchable part of `card`, bounded by the `PROFILE_*` limits.
pub fn profile_of(card: &AgentCard) -> CardProfile {
    let text = |value: &str| value.chars().take(PROFILE_TEXT_CHARS_MAX).collect::<String>();
    let list = |values: &[String]| values.iter().take(PROFILE_LIST_ITEMS_MAX).map(|v| text(v)).collect::<Vec<_>>();
    CardProfile {
        description: text(&card.description),
        skills: card
            .skills
            .iter()
            .take(PROFILE_SKILLS_MAX)
            .map(|skill| SkillProfile {
                id: text(&skill.id),
                name: text(&skill.name),
                description: text(&skill.description),
                tags: list(&skill.tags),
                examples: list(&skill.examples),
            })
            .collect(),
    }
}

/// The capabilities a card's skills offer: each skill's id, then their tags, in the registry's
/// capability form (characters it does not take become `-`; one longer than it takes is left
/// out), without duplicates, at most [`CAPABILITIES_MAX`] (ids first, so every skill stays
/// discoverable by its id).
pub fn capabilities_of(card: &AgentCard) -> Vec<String> {
    let ids = card.skills.iter().map(|skill| skill.id.as_str());
    let tags = card.skills.iter().flat_map(|skill| skill.tags.iter().map(String::as_str));
    let mut capabilities: Vec<String> = Vec::new();
    for capability in ids.chain(tags).filter_map(capability_form) {
        if capabilities.len() == CAPABILITIES_MAX {
            break;
        }
        if !capabilities.contains(&capability) {
            capabilities.push(capability);
        }
    }
    capabilities
}

fn capability_form(word: &str) -> Option<String> {
    let word = word.trim();
    let form: String = word
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':') { c } else { '-' })
        .collect();
    is_capability_name(&form).then_some(form)
}

/// The interfaces a card declares, in its order of preference: the 1.0 list first, then the 0.3
/// `url` (in its `preferredTransport`, JSON-RPC when unsaid) and `additionalInterfaces`; each
/// (binding, version, URL) once, at most [`INTERFACES_MAX`].
pub fn interfaces_of(card: &AgentCard) -> Vec<AgentInterfaceRecord> {
    let legacy_version = card.protocol_version.clone().unwrap_or_else(|| LEGACY_PROTOCOL_VERSION.to_owned());
    let declared = card.supported_interfaces.iter().map(|i| AgentInterfaceRecord {
        protocol_binding: i.protocol_binding.clone(),
        protocol_version: i.protocol_version.clone(),
        url: i.url.clone(),
    });
    let preferred = card.url.iter().map(|url| AgentInterfaceRecord {
        protocol_binding: card.preferred_transport.clone().unwrap_or_else(|| binding::JSONRPC.to_owned()),
        protocol_version: legacy_version.clone(),
        url: url.clone(),
    });
    let additional = card.additional_interfaces.iter().flatten().map(|i| AgentInterfaceRecord {
        protocol_binding: i.transport.clone(),
        protocol_version: legacy_version.clone(),
        url: i.url.clone(),
    });
    let mut interfaces: Vec<AgentInterfaceRecord> = Vec::new();
    for interface in declared.chain(preferred).chain(additional) {
        if interfaces.len() == INTERFACES_MAX {
            break;
        }
        if !interfaces.contains(&interface) {
            interfaces.push(interface);
        }
    }
    interfaces
}

/// Whether `interface` is where the card was fetched from (`card_url`): an http(s) URL on its
/// origin, or for gRPC (whose cards give `host:port`) on its host. The registry and the gateway
/// reach an agent only where it registered.
pub fn on_origin_of(card_url: &Url, interface: &AgentInterfaceRecord) -> bool {
    if interface.protocol_binding == binding::GRPC {
        let address = match interface.url.contains("://") {
            true => interface.url.clone(),
            false => format!("http://{}", interface.url),
        };
        return Url::parse(&address).is_ok_and(|url| url.host() == card_url.host());
    }
    Url::parse(&interface.url)
        .is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.origin() == card_url.origin())
}

/// Checks that every interface is on the card's origin ([`on_origin_of`]); names the first that
/// is not by its place in the list (its URL is the fetched document's, not quoted back).
pub fn check_interfaces_on(card_url: &Url, interfaces: &[AgentInterfaceRecord]) -> Result<(), String> {
    match interfaces.iter().position(|interface| !on_origin_of(card_url, interface)) {
        None => Ok(()),
        Some(index) => {
            Err(format!("interface {} of the card is not on the origin the card was fetched from", index + 1))
        }
    }
}

/// Where a card-registered agent is called: its first 1.0 HTTP+JSON interface (the mesh's own
/// callers send `{url}/message:send`), else its first interface; `None` when it declares none.
pub fn base_url_of(interfaces: &[AgentInterfaceRecord]) -> Option<&str> {
    interfaces
        .iter()
        .find(|i| i.protocol_binding == binding::HTTP_JSON && i.protocol_version.starts_with('1'))
        .or_else(|| interfaces.first())
        .map(|i| i.url.as_str())
}

/// Longest path form, in characters.
pub const PATH_CHARS_MAX: usize = 64;

/// Whether `path` may be used as it is in a URL path segment (`/agents/{path}/`): RFC 3986
/// unreserved characters only, not a dot segment.
pub fn is_path_form(path: &str) -> bool {
    (1..=PATH_CHARS_MAX).contains(&path.len())
        && path.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
        && !matches!(path, "." | "..")
}

/// The path form of an agent name: the name itself when it is URL-safe, else its lowercase
/// letters and digits with every other run of characters one `-` (`Echo Agent` is `echo-agent`),
/// `agent` when nothing is left.
pub fn path_form(name: &str) -> String {
    if is_path_form(name) {
        return name.to_owned();
    }
    let mut slug = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug: String = slug.trim_end_matches('-').chars().take(PATH_CHARS_MAX).collect();
    match slug.trim_end_matches('-') {
        "" => "agent".to_owned(),
        slug => slug.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The official Python SDK's card, as captured (the protocol crate keeps the capture).
    const CAPTURED_CARD: &str = include_str!("../../../shared/protocol/tests/fixtures/card.json");

    /// A card from its bytes, as a fetch reads it.
    fn parse_card(body: &[u8]) -> Result<AgentCard, CardProblem> {
        card_from(&parse_document(body)?)
    }

    /// The captured card without its 1.0 fields: what a 0.3-only SDK serves.
    fn legacy_card() -> Vec<u8> {
        let mut card: serde_json::Value = serde_json::from_str(CAPTURED_CARD).unwrap();
        card.as_object_mut().unwrap().remove("supportedInterfaces");
        serde_json::to_vec(&card).unwrap()
    }

    fn interface(binding: &str, version: &str, url: &str) -> AgentInterfaceRecord {
        AgentInterfaceRecord { protocol_binding: binding.into(), protocol_version: version.into(), url: url.into() }
    }

    #[test]
    fn a_captured_sdk_card_gives_its_name_skills_and_every_interface_once() {
        let card = parse_card(CAPTURED_CARD.as_bytes()).unwrap();
        assert_eq!(card.name, "Echo Agent");
        assert_eq!(capabilities_of(&card), ["echo"], "the skill's id and its tag, once");
        let base = "http://127.0.0.1:18765";
        assert_eq!(
            interfaces_of(&card),
            [
                interface("JSONRPC", "1.0", &format!("{base}/")),
                interface("HTTP+JSON", "1.0", &format!("{base}/rest")),
                interface("JSONRPC", "0.3", &format!("{base}/")),
                interface("HTTP+JSON", "0.3", &format!("{base}/rest")),
            ],
            "the 0.3 url and additionalInterfaces repeat the 1.0 list's 0.3 entries"
        );
        assert_eq!(base_url_of(&interfaces_of(&card)), Some(format!("{base}/rest").as_str()));
        let card_url = Url::parse(&format!("{base}/.well-known/agent-card.json")).unwrap();
        assert!(check_interfaces_on(&card_url, &interfaces_of(&card)).is_ok());
    }

    #[test]
    fn a_legacy_card_gives_its_interfaces_from_url_and_additional_interfaces() {
        let card = parse_card(&legacy_card()).unwrap();
        let base = "http://127.0.0.1:18765";
        assert_eq!(
            interfaces_of(&card),
            [interface("JSONRPC", "0.3", &format!("{base}/")), interface("HTTP+JSON", "0.3", &format!("{base}/rest"))]
        );
        assert_eq!(
            base_url_of(&interfaces_of(&card)),
            Some(format!("{base}/").as_str()),
            "no 1.0 HTTP+JSON: the first"
        );
        let mut unsaid: serde_json::Value = serde_json::from_slice(&legacy_card()).unwrap();
        let fields = unsaid.as_object_mut().unwrap();
        for field in ["preferredTransport", "protocolVersion", "additionalInterfaces"] {
            fields.remove(field);
        }
        let card = parse_card(&serde_json::to_vec(&unsaid).unwrap()).unwrap();
        assert_eq!(interfaces_of(&card), [interface("JSONRPC", "0.3", &format!("{base}/"))], "JSON-RPC when unsaid");
    }

    #[test]
    fn refusals_name_the_problem_in_the_registrys_own_words() {
        assert!(matches!(parse_card(b"<html>"), Err(CardProblem::NotJson(_))));
        assert!(matches!(parse_card(br#"{"name":"x"}"#), Err(CardProblem::NotACard(_))));
        let mut nameless: serde_json::Value = serde_json::from_str(CAPTURED_CARD).unwrap();
        nameless["name"] = serde_json::json!("  ");
        assert_eq!(parse_card(&serde_json::to_vec(&nameless).unwrap()), Err(CardProblem::NoName));
        let mut huge: serde_json::Value = serde_json::from_str(CAPTURED_CARD).unwrap();
        huge["description"] = serde_json::json!("x".repeat(CARD_BYTES_MAX));
        assert_eq!(parse_card(&serde_json::to_vec(&huge).unwrap()), Err(CardProblem::TooLarge));
        for problem in [CardProblem::NotJson("secret".into()), CardProblem::NotACard("secret".into())] {
            assert!(!problem.words().contains("secret"), "nothing of the document is quoted back");
        }
        assert!(CardProblem::TooLarge.words().contains(&CARD_BYTES_MAX.to_string()));
    }

    #[test]
    fn interfaces_off_the_cards_origin_are_named_by_place() {
        let card_url = Url::parse("http://127.0.0.1:9001/.well-known/agent-card.json").unwrap();
        let ok = [interface("JSONRPC", "1.0", "http://127.0.0.1:9001/"), interface("GRPC", "1.0", "127.0.0.1:9002")];
        assert!(check_interfaces_on(&card_url, &ok).is_ok(), "gRPC's host:port, on the card's host");
        for bad in ["http://169.254.169.254/", "ftp://127.0.0.1:9001/", "not a url", "https://127.0.0.1:9001/"] {
            let listed = [ok[0].clone(), interface("JSONRPC", "1.0", bad)];
            let error = check_interfaces_on(&card_url, &listed).unwrap_err();
            assert!(error.contains("interface 2") && !error.contains(bad), "{error}");
        }
        assert!(!on_origin_of(&card_url, &interface("GRPC", "1.0", "10.0.0.1:9002")));
    }

    #[test]
    fn skills_become_capabilities_ids_first_within_bounds() {
        let mut card = parse_card(CAPTURED_CARD.as_bytes()).unwrap();
        let mut skill = card.skills[0].clone();
        skill.id = "summarize text".into();
        skill.tags =
            vec!["Question Answering".into(), "x".repeat(crate::intake::CAPABILITY_CHARS_MAX + 1), "  ".into()];
        card.skills.push(skill);
        assert_eq!(capabilities_of(&card), ["echo", "summarize-text", "Question-Answering"]);
        let template = card.skills[0].clone();
        card.skills = (0..CAPABILITIES_MAX + 5)
            .map(|i| {
                let mut skill = template.clone();
                skill.id = format!("s{i}");
                skill
            })
            .collect();
        let capabilities = capabilities_of(&card);
        assert_eq!(capabilities.len(), CAPABILITIES_MAX);
        assert_eq!(capabilities[0], "s0");
    }

    #[test]
    fn names_that_are_not_url_safe_get_a_path_form() {
        assert_eq!(path_form("entity_extraction"), "entity_extraction", "a URL-safe name is its own path");
        assert_eq!(path_form("Echo Agent"), "echo-agent");
        assert_eq!(path_form("  Échoes / Agent ✓ "), "choes-agent");
        assert_eq!(path_form("✓✓"), "agent");
        assert_eq!(path_form(".."), "agent");
        assert_eq!(path_form(&"a b".repeat(50)).len(), PATH_CHARS_MAX);
        assert!(is_path_form("echo-agent") && is_path_form("a.b~c_d"));
        assert!(!is_path_form("a/b") && !is_path_form("a b") && !is_path_form("") && !is_path_form(".."));
        assert!(!is_path_form(&"a".repeat(PATH_CHARS_MAX + 1)));
        for name in ["Echo Agent", "a/b", "✓", "x y z", &"é".repeat(128)] {
            assert!(is_path_form(&path_form(name)), "{name}");
        }
    }
}
