//! Turning a `POST /register` body into a stored agent: validation, endpoint resolution and the
//! optional card check.

use std::sync::Arc;
use std::time::Duration;

use mesh_auth::CardVerifier;
use mesh_client::HttpClient;
use mesh_protocol::registry::{AGENT_CARD_PATH, DEFAULT_HEALTH_PATH, DEFAULT_PROCESS_PATH, Registration};
use serde::Deserialize;
use url::Url;

use crate::card::{
    self, AgentInterfaceRecord, CardProblem, CardProfile, FetchedCard, base_url_of, capabilities_of,
    check_interfaces_on, interfaces_of, is_path_form, on_origin_of, path_form, profile_of,
};
use crate::config::RegistryConfig;
use crate::directory::Directory;
use crate::error::RegistryError;
use crate::health::HealthProbe;
use crate::store::StoredAgent;

/// Longest accepted agent name, in characters.
pub const AGENT_NAME_CHARS_MAX: usize = 128;
/// Longest accepted capability name, in characters.
pub const CAPABILITY_CHARS_MAX: usize = 64;
/// Most capabilities one agent may declare.
pub const CAPABILITIES_MAX: usize = 64;

/// Body of `POST /register`: the seed's registration (`name`, `url`, `capabilities`, endpoints),
/// or a standard A2A agent's `agent_card_url` alone, which registers it under its card's name with
/// the capabilities of its skills and the endpoints of its interfaces.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
pub struct RegisterRequest {
    /// Unique name of this agent instance (with `url`); from the card when only
    /// `agent_card_url` is given.
    #[serde(default)]
    pub name: Option<String>,
    /// Base URL the agent serves on, e.g. `http://127.0.0.1:8002` (with `name`).
    #[serde(default)]
    pub url: Option<String>,
    /// Capabilities offered; with a card registration, added to those of the card's skills.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Default `/health`; when a card registration leaves it out, the card is polled instead.
    #[serde(default)]
    pub health_endpoint: Option<String>,
    /// Default `/tasks/send`; for a card registration, the card's first interface.
    #[serde(default)]
    pub process_endpoint: Option<String>,
    /// Where the card is; alone, the registration is read from it. Defaults to the well-known path.
    #[serde(default)]
    pub agent_card_url: Option<String>,
    /// The agent's name in URL paths (letters, digits, `-`, `_`, `.`, `~`, at most 64); defaults to
    /// the name when it is URL-safe, else a path form of it.
    #[serde(default)]
    pub path: Option<String>,
}

/// The two ways to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrationForm {
    /// The seed's: the registrant names itself and its URL.
    Seed(Registration),
    /// A standard A2A agent's: everything is read from the card at this URL.
    Card(Url),
}

impl RegisterRequest {
    /// Which form this is: `name` and `url` together, or `agent_card_url` alone.
    pub fn form(&self) -> Result<RegistrationForm, RegistryError> {
        let invalid = |m: String| RegistryError::InvalidRegistration(m);
        match (&self.name, &self.url, &self.agent_card_url) {
            (Some(name), Some(url), card_url) => Ok(RegistrationForm::Seed(Registration {
                name: name.clone(),
                url: url.clone(),
                capabilities: self.capabilities.clone(),
                health_endpoint: self.health_endpoint.clone().unwrap_or_else(|| DEFAULT_HEALTH_PATH.to_owned()),
                process_endpoint: self.process_endpoint.clone().unwrap_or_else(|| DEFAULT_PROCESS_PATH.to_owned()),
                agent_card_url: card_url.clone(),
            })),
            (None, None, Some(card_url)) => http_url(card_url)
                .map(RegistrationForm::Card)
                .map_err(|e| invalid(format!("agent_card_url {card_url:?}: {e}"))),
            _ => Err(invalid(
                "give name and url (with capabilities), or agent_card_url alone to register by the agent's card".into(),
            )),
        }
    }

    /// The path asked for, checked.
    fn path(&self) -> Result<Option<&str>, RegistryError> {
        match self.path.as_deref() {
            Some(path) if !is_path_form(path) => Err(RegistryError::InvalidRegistration(format!(
                "path {path:?} must be 1 to {} of letters, digits, '-', '_', '.' or '~'",
                card::PATH_CHARS_MAX
            ))),
            path => Ok(path),
        }
    }
}

/// A seed registration, checked, with its path: the card is not read here ([`verify_card`] does
/// when registrations are verified).
pub fn seed_agent(
    request: &RegisterRequest,
    registration: &Registration,
    now: &str,
) -> Result<StoredAgent, RegistryError> {
    let mut agent = validate(registration, now)?;
    agent.path = request.path()?.map_or_else(|| path_form(&agent.name), str::to_owned);
    Ok(agent)
}

/// A standard A2A agent registered by its card alone: named after the card, its capabilities
/// from its skills (and the request's), called at its first 1.0 HTTP+JSON interface (else its
/// first), polled on its card unless the request names a health endpoint. Every interface must be
/// on the card's origin.
pub async fn card_agent(
    http: &HttpClient,
    request: &RegisterRequest,
    card_url: &Url,
    policy: &IntakePolicy,
    now: &str,
) -> Result<StoredAgent, RegistryError> {
    let fetched = fetch_verified(http, card_url.as_str(), policy).await?;
    let card = &fetched.card;
    let interfaces = interfaces_of(card);
    check_interfaces_on(card_url, &interfaces).map_err(|problem| RegistryError::CardInvalid {
        url: card_url.to_string(),
        problem: problem.clone(),
        reason: problem,
    })?;
    let origin = card_url.origin().ascii_serialization();
    let base = base_url_of(&interfaces).unwrap_or(origin.as_str()).to_owned();
    let mut capabilities = capabilities_of(card);
    capabilities.extend(request.capabilities.iter().cloned());
    let registration = Registration {
        name: card.name.clone(),
        process_endpoint: request.process_endpoint.clone().unwrap_or_else(|| {
            interfaces
                .first()
                .filter(|i| i.protocol_binding != mesh_protocol::a2a::binding::GRPC)
                .map_or_else(|| base.clone(), |i| i.url.clone())
        }),
        url: base,
        capabilities,
        health_endpoint: request.health_endpoint.clone().unwrap_or_else(|| card_url.to_string()),
        agent_card_url: Some(card_url.to_string()),
    };
    let mut agent = seed_agent(request, &registration, now)?;
    agent.health_probe = if request.health_endpoint.is_some() { HealthProbe::Health } else { HealthProbe::Card };
    agent.interfaces = interfaces;
    agent.profile = profile_of(card);
    Ok(agent)
}

/// Checks a registration and resolves its endpoints against its URL; `now` stamps it.
pub fn validate(registration: &Registration, now: &str) -> Result<StoredAgent, RegistryError> {
    let invalid = |m: String| RegistryError::InvalidRegistration(m);
    let name = registration.name.trim();
    if name.is_empty() || name.chars().count() > AGENT_NAME_CHARS_MAX || name.chars().any(char::is_control) {
        return Err(invalid(format!("name must be 1 to {AGENT_NAME_CHARS_MAX} printable characters")));
    }
    if registration.capabilities.len() > CAPABILITIES_MAX {
        return Err(invalid(format!("at most {CAPABILITIES_MAX} capabilities may be declared")));
    }
    if let Some(bad) = registration.capabilities.iter().find(|c| !is_capability_name(c)) {
        return Err(invalid(format!(
            "capability {bad:?} must be 1 to {CAPABILITY_CHARS_MAX} characters of letters, digits, '_', '-', '.' or ':'"
        )));
    }
    let mut base = http_url(&registration.url).map_err(|e| invalid(format!("url {:?}: {e}", registration.url)))?;
    if !base.path().ends_with('/') {
        // Endpoint paths are relative to the agent's URL, path prefix included.
        let path = format!("{}/", base.path());
        base.set_path(&path);
    }
    let resolve = |field: &str, value: &str| {
        base.join(value.trim_start_matches('/'))
            .map_err(|e| e.to_string())
            .and_then(|u| http_url(u.as_str()))
            .map(String::from)
            .map_err(|e| invalid(format!("{field} {value:?}: {e}")))
    };
    // Every endpoint on the registrant's own origin: the card vouches for the agent only if the
    // agent serves it (from another origin anybody could register any name by publishing a
    // card that names it), and a health or task endpoint elsewhere would make the registry, and
    // the agents it hands the endpoint to, send requests wherever a registrant likes.
    let on_origin = |field: &str, value: &str| {
        let url = resolve(field, value)?;
        if Url::parse(&url).map(|u| u.origin()).ok() != Some(base.origin()) {
            return Err(invalid(format!("{field} {value:?} must be on the agent's own origin")));
        }
        Ok(url)
    };
    let card_url = registration.agent_card_url.clone().unwrap_or_else(|| AGENT_CARD_PATH.to_owned());
    let agent_card_url = on_origin("agent_card_url", &card_url)?;
    let mut capabilities = registration.capabilities.clone();
    capabilities.sort();
    capabilities.dedup();
    Ok(StoredAgent {
        name: name.to_owned(),
        url: registration.url.trim_end_matches('/').to_owned(),
        capabilities,
        health_endpoint: on_origin("health_endpoint", &registration.health_endpoint)?,
        process_endpoint: on_origin("process_endpoint", &registration.process_endpoint)?,
        agent_card_url,
        registered_at: now.to_owned(),
        updated_at: now.to_owned(),
        owner: None,
        path: path_form(name),
        health_probe: HealthProbe::Health,
        interfaces: Vec::new(),
        profile: CardProfile::default(),
        tenant: String::new(),
    })
}

/// What a registration must pass, from the registry's configuration.
#[derive(Debug, Clone)]
pub struct IntakePolicy {
    /// How long fetching a card may take.
    pub card_fetch_timeout: Duration,
    /// Whether a seed registration's card is fetched and checked (a card registration's always is).
    pub verify_cards: bool,
    pub registrations_max: usize,
    pub registrations_per_identity_max: usize,
    /// Checks card signatures when keys are trusted.
    pub card_verifier: Option<Arc<CardVerifier>>,
    pub require_signed_cards: bool,
}

impl IntakePolicy {
    pub fn from_config(config: &RegistryConfig) -> Result<Self, RegistryError> {
        let card_verifier = match config.trusted_card_keys.as_slice() {
            [] => None,
            keys => Some(Arc::new(CardVerifier::load(keys).map_err(|e| RegistryError::Startup(e.to_string()))?)),
        };
        if config.require_signed_cards && (card_verifier.is_none() || !config.verify_registrations) {
            return Err(RegistryError::Startup(
                "require_signed_cards needs trusted_card_keys to check signatures with, and verify_registrations \
                 to fetch the cards"
                    .into(),
            ));
        }
        Ok(Self {
            card_fetch_timeout: Duration::from_millis(config.card_fetch_timeout_ms),
            verify_cards: config.verify_registrations,
            registrations_max: config.registrations_max,
            registrations_per_identity_max: config.registrations_per_identity_max,
            card_verifier,
            require_signed_cards: config.require_signed_cards,
        })
    }
}

/// Whether a registration of `agent` fits the registry's capacity: re-registering a known name
/// always does; a new name only below `registrations_max` in all, and below
/// `registrations_per_identity_max` of its registering identity. Registrations of new names
/// racing each other may overshoot by as many as are in flight (bounded by the server's
/// concurrency limit).
pub fn admit_registration(
    directory: &Directory,
    agent: &StoredAgent,
    policy: &IntakePolicy,
) -> Result<(), RegistryError> {
    if directory.get(&agent.name).is_ok() {
        return Ok(());
    }
    if directory.count() >= policy.registrations_max {
        return Err(RegistryError::RegistrationsFull(policy.registrations_max));
    }
    if let Some(owner) = &agent.owner
        && directory.count_owned_by(owner) >= policy.registrations_per_identity_max
    {
        return Err(RegistryError::IdentityRegistrationsFull(policy.registrations_per_identity_max));
    }
    Ok(())
}

/// Checks that the registrant's origin is an address the registry may reach (the outbound
/// address policy, on what its name resolves to now), so an agent nobody could call is not
/// handed out, and nobody is pointed at an internal address through the registry.
pub async fn vet_address(http: &HttpClient, agent: &StoredAgent) -> Result<(), RegistryError> {
    http.vet(&agent.url)
        .await
        .map_err(|e| RegistryError::AddressRefused { url: agent.url.clone(), reason: e.to_string() })
}

/// Fetches the agent's card and checks it names the registering agent, so nobody registers an
/// agent that is not there or registers under another agent's name; keeps the card's interfaces
/// that are on the agent's origin (others are left out, and logged).
pub async fn verify_card(
    http: &HttpClient,
    agent: &mut StoredAgent,
    policy: &IntakePolicy,
) -> Result<(), RegistryError> {
    let url = agent.agent_card_url.clone();
    let fetched = fetch_verified(http, &url, policy).await?;
    if fetched.card.name != agent.name {
        return Err(RegistryError::CardMismatch { url, expected: agent.name.clone(), found: fetched.card.name });
    }
    let card_url = Url::parse(&url).map_err(|e| RegistryError::InvalidRegistration(format!("agent_card_url: {e}")))?;
    let (kept, left): (Vec<AgentInterfaceRecord>, Vec<_>) =
        interfaces_of(&fetched.card).into_iter().partition(|interface| on_origin_of(&card_url, interface));
    if !left.is_empty() {
        tracing::warn!(agent = %agent.name, left_out = ?left, "card interfaces off the agent's origin are not listed");
    }
    agent.interfaces = kept;
    agent.profile = profile_of(&fetched.card);
    Ok(())
}

/// Fetches the card at `url` and checks its signature when keys are trusted.
async fn fetch_verified(http: &HttpClient, url: &str, policy: &IntakePolicy) -> Result<FetchedCard, RegistryError> {
    let fetched =
        card::fetch_card(http, url, policy.card_fetch_timeout).await.map_err(|problem| card_error(url, problem))?;
    if let Some(verifier) = &policy.card_verifier {
        match verifier.verify(&fetched.document) {
            Ok(kid) => tracing::debug!(%url, %kid, "agent card signature verified"),
            Err(mesh_auth::AuthError::CardUnsigned) if !policy.require_signed_cards => {}
            Err(error) => return Err(RegistryError::CardSignature { url: url.to_owned(), reason: error.to_string() }),
        }
    }
    Ok(fetched)
}

/// The refusal for a card that could not be read.
fn card_error(url: &str, problem: CardProblem) -> RegistryError {
    let url = url.to_owned();
    match problem {
        CardProblem::AddressRefused(reason) => RegistryError::AddressRefused { url, reason },
        CardProblem::Unreachable(reason) => RegistryError::CardUnreachable { url, reason },
        CardProblem::Status(status) => RegistryError::CardUnreachable { url, reason: format!("answered {status}") },
        CardProblem::TooLarge | CardProblem::NoName => {
            RegistryError::CardInvalid { url, problem: problem.words(), reason: problem.words() }
        }
        CardProblem::NotJson(ref reason) | CardProblem::NotACard(ref reason) => {
            RegistryError::CardInvalid { url, problem: problem.words(), reason: reason.clone() }
        }
    }
}

pub(crate) fn is_capability_name(capability: &str) -> bool {
    (1..=CAPABILITY_CHARS_MAX).contains(&capability.chars().count())
        && capability.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
}

fn http_url(value: &str) -> Result<Url, String> {
    let url = Url::parse(value).map_err(|e| e.to_string())?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err("must be an absolute http(s) URL".into());
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(url: &str) -> Registration {
        Registration {
            name: "search_agent".into(),
            url: url.into(),
            capabilities: vec!["search".into(), "search".into(), "rank".into()],
            health_endpoint: "/health".into(),
            process_endpoint: "tasks/send".into(),
            agent_card_url: None,
        }
    }

    #[test]
    fn resolves_relative_endpoints_and_dedups_capabilities() {
        let agent = validate(&registration("http://127.0.0.1:8002/"), "now").unwrap();
        assert_eq!(agent.url, "http://127.0.0.1:8002");
        assert_eq!(agent.capabilities, ["rank", "search"]);
        assert_eq!(agent.health_endpoint, "http://127.0.0.1:8002/health");
        assert_eq!(agent.process_endpoint, "http://127.0.0.1:8002/tasks/send");
        assert_eq!(agent.agent_card_url, "http://127.0.0.1:8002/.well-known/agent-card.json");
    }

    #[test]
    fn keeps_a_path_prefix_for_relative_endpoints_and_accepts_absolute_ones_on_the_origin() {
        let mut reg = registration("http://mesh.local/agents/search");
        reg.health_endpoint = "http://mesh.local/healthz".into();
        let agent = validate(&reg, "now").unwrap();
        assert_eq!(agent.process_endpoint, "http://mesh.local/agents/search/tasks/send");
        assert_eq!(agent.health_endpoint, "http://mesh.local/healthz");
    }

    #[test]
    fn rejects_bad_names_urls_and_capabilities() {
        for (mutate, expected) in [
            (Box::new(|r: &mut Registration| r.name = " ".into()) as Box<dyn Fn(&mut Registration)>, "name"),
            (Box::new(|r: &mut Registration| r.name = "x".repeat(129)), "name"),
            (Box::new(|r: &mut Registration| r.url = "localhost:8002".into()), "url"),
            (Box::new(|r: &mut Registration| r.url = "ftp://h/".into()), "url"),
            (Box::new(|r: &mut Registration| r.capabilities = vec!["has space".into()]), "capability"),
            (Box::new(|r: &mut Registration| r.capabilities = vec![String::new()]), "capability"),
            (Box::new(|r: &mut Registration| r.health_endpoint = "ftp://h/x".into()), "health_endpoint"),
            (
                Box::new(|r: &mut Registration| r.agent_card_url = Some("http://evil.example/card.json".into())),
                "origin",
            ),
            (Box::new(|r: &mut Registration| r.health_endpoint = "http://169.254.169.254/".into()), "origin"),
            (Box::new(|r: &mut Registration| r.process_endpoint = "http://127.0.0.1:8003/x".into()), "origin"),
        ] {
            let mut reg = registration("http://127.0.0.1:8002");
            mutate(&mut reg);
            let err = validate(&reg, "now").unwrap_err();
            assert!(matches!(err, RegistryError::InvalidRegistration(_)), "{err}");
            assert!(err.to_string().contains(expected), "{err} should mention {expected}");
        }
    }

    #[test]
    fn names_and_capability_lists_may_reach_their_bounds_and_no_further() {
        let mut reg = registration("http://127.0.0.1:8002");
        reg.name = "é".repeat(AGENT_NAME_CHARS_MAX);
        assert!(validate(&reg, "now").is_ok(), "the longest name, counted in characters");
        reg.name.push('é');
        assert!(validate(&reg, "now").is_err());
        let mut reg = registration("http://127.0.0.1:8002");
        reg.capabilities = (0..CAPABILITIES_MAX).map(|i| format!("c{i}")).collect();
        assert_eq!(validate(&reg, "now").unwrap().capabilities.len(), CAPABILITIES_MAX);
        reg.capabilities.push("one-more".into());
        let error = validate(&reg, "now").unwrap_err();
        assert!(error.to_string().contains(&format!("at most {CAPABILITIES_MAX}")), "{error}");
    }

    #[test]
    fn a_new_name_is_admitted_below_the_bounds_in_all_and_per_identity() {
        let policy = IntakePolicy {
            card_fetch_timeout: Duration::from_secs(1),
            verify_cards: false,
            registrations_max: 3,
            registrations_per_identity_max: 2,
            card_verifier: None,
            require_signed_cards: false,
        };
        let owned = |name: &str, owner: Option<&str>| {
            let mut agent = StoredAgent::for_test(name, &["search"]);
            agent.owner = owner.map(str::to_owned);
            agent
        };
        let stored = |agent: StoredAgent| crate::store::StoredState {
            agent,
            health: mesh_protocol::registry::HealthStatus::Unknown,
            last_health_check: None,
        };
        let directory = Directory::new(vec![stored(owned("a", Some("alice")))]);
        assert!(admit_registration(&directory, &owned("b", Some("alice")), &policy).is_ok(), "alice's second");
        directory.upsert(owned("b", Some("alice")));
        let refused = admit_registration(&directory, &owned("c", Some("alice")), &policy);
        assert!(matches!(refused, Err(RegistryError::IdentityRegistrationsFull(2))), "{refused:?}");
        assert!(admit_registration(&directory, &owned("a", Some("alice")), &policy).is_ok(), "a re-registration");
        assert!(admit_registration(&directory, &owned("c", Some("bob")), &policy).is_ok());
        assert!(admit_registration(&directory, &owned("c", None), &policy).is_ok(), "authentication off");
        directory.upsert(owned("c", Some("bob")));
        let refused = admit_registration(&directory, &owned("d", Some("carol")), &policy);
        assert!(matches!(refused, Err(RegistryError::RegistrationsFull(3))), "{refused:?}");
    }

    #[test]
    fn names_may_hold_spaces_and_unicode() {
        let mut reg = registration("http://127.0.0.1:8002");
        reg.name = "Échoes Agent ✓".into();
        assert_eq!(validate(&reg, "now").unwrap().name, "Échoes Agent ✓");
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// URLs and endpoints as registrants write them: mostly well formed, on one of two
        /// origins, relative or absolute, with the odd piece of junk.
        fn address() -> impl Strategy<Value = String> {
            prop_oneof![
                "(http|https|ftp)://(a\\.example|b\\.example|127\\.0\\.0\\.1:80[0-9]{2}|\\[::1\\])(/[a-z%.]{0,6}){0,3}/?",
                "/?[a-z.%:?#]{0,12}(/[a-z.]{0,6}){0,2}",
                "\\PC{0,24}",
            ]
        }

        fn registration() -> impl Strategy<Value = Registration> {
            (
                "\\PC{0,140}|[ \\t]{0,2}[a-z_]{1,20}[ \\t]{0,2}",
                address(),
                proptest::collection::vec("[a-z0-9_.:-]{1,8}|\\PC{0,70}", 0..70),
                (address(), address(), proptest::option::of(address())),
            )
                .prop_map(
                    |(name, url, capabilities, (health_endpoint, process_endpoint, agent_card_url))| Registration {
                        name,
                        url,
                        capabilities,
                        health_endpoint,
                        process_endpoint,
                        agent_card_url,
                    },
                )
        }

        proptest! {
            /// Any registration is refused as invalid, or admitted with a printable name of the
            /// allowed length, valid capabilities, and every endpoint the registry will fetch
            /// or hand out on the registrant's own origin.
            #[test]
            fn a_registration_is_refused_or_admitted_with_every_endpoint_on_its_origin(registration in registration()) {
                match validate(&registration, "now") {
                    Err(error) => prop_assert!(matches!(error, RegistryError::InvalidRegistration(_)), "{error}"),
                    Ok(agent) => {
                        prop_assert_eq!(agent.name.as_str(), registration.name.trim());
                        prop_assert!((1..=AGENT_NAME_CHARS_MAX).contains(&agent.name.chars().count()));
                        prop_assert!(!agent.name.chars().any(char::is_control));
                        prop_assert!(agent.capabilities.len() <= CAPABILITIES_MAX);
                        prop_assert!(agent.capabilities.iter().all(|c| is_capability_name(c)));
                        prop_assert!(agent.capabilities.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates");
                        let origin = Url::parse(&agent.url).unwrap().origin();
                        prop_assert!(origin.is_tuple(), "{} has a host", agent.url);
                        for endpoint in [&agent.health_endpoint, &agent.process_endpoint, &agent.agent_card_url] {
                            let endpoint = Url::parse(endpoint).unwrap();
                            prop_assert_eq!(endpoint.origin(), origin.clone(), "{} of {}", endpoint, agent.url);
                        }
                    }
                }
            }
        }
    }
}
