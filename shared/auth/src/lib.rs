//! Who is calling. Every service takes one identity model: a principal `{subject, tenant, roles}`
//! from a bearer JWT (HS256 with a shared secret, or EdDSA / ES256 with public keys; `exp`
//! required) or from a static API key kept hashed in a keys file. The HTTP layers that use it
//! live in the agent kit; this crate has no server code.
//!
//! Roles:
//! - `admin`: the registry's admin API, links, documents, any tenant;
//! - `agent`: registers itself under its own subject's name only, and calls other agents; the
//!   tenant a call context carries is trusted only from an agent;
//! - `user`: sends tasks, and reads, lists, subscribes to and cancels its own tenant's tasks.
//!
//! With no credentials configured a service is open (every caller is trusted, as on a developer's
//! loopback); [`check_exposure`] refuses that on any other address unless asked explicitly.

mod card_signature;
mod config;
mod keys;
mod local;
mod token;
mod verified;

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

pub use card_signature::{CardSigner, CardSigningKey, CardVerifier, SIGNATURES_FIELD, canonical_form};
pub use config::{AuthConfig, JwtPublicKey, KeyAlgorithm};
pub use keys::{ApiKeyEntry, ApiKeyFile, hash_api_key, new_api_key};
pub use local::{LOCAL_CARD_KEY_ID, LocalKeys};
pub use token::{Claims, mint_hs256};

use keys::ApiKeys;
use token::JwtVerifier;

/// The header an API key may come in, besides `Authorization: Bearer`.
pub const API_KEY_HEADER: &str = "x-api-key";
/// The realm named in `WWW-Authenticate`.
pub const AUTH_REALM: &str = "a2a-mesh";

/// What a principal may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Agent,
    User,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Agent => "agent",
            Self::User => "user",
        }
    }

    /// A role by its name; unknown names are `None` (a token may carry roles of other systems).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "admin" => Some(Self::Admin),
            "agent" => Some(Self::Agent),
            "user" => Some(Self::User),
            _ => None,
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub subject: String,
    /// `""` for none (the default tenant).
    pub tenant: String,
    pub roles: Vec<Role>,
}

impl Principal {
    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

/// Who a request comes from, as the access checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Authentication is off (a service on loopback with no credentials): every caller is
    /// trusted as before, tenants included.
    Open,
    /// A request with no credentials to a public route of a protected service.
    Anonymous,
    Authenticated(Principal),
}

impl Caller {
    /// Whether the caller holds one of `roles` (always on an open service).
    pub fn holds_any(&self, roles: &[Role]) -> bool {
        match self {
            Self::Open => true,
            Self::Anonymous => false,
            Self::Authenticated(principal) => roles.iter().any(|role| principal.has(*role)),
        }
    }

    pub fn principal(&self) -> Option<&Principal> {
        match self {
            Self::Authenticated(principal) => Some(principal),
            Self::Open | Self::Anonymous => None,
        }
    }

    /// The tenant a request acts in, given the tenant it names (`requested`, `""` for none) and
    /// the one its call context carries from an upstream agent (`carried`).
    /// - open service: the named tenant, as without authentication;
    /// - `admin`: the named one, else the carried one, else its own;
    /// - `agent`: the carried one (the user's, forwarded), else the named one, else its own;
    /// - `user`: its own; naming another is refused.
    pub fn tenant(&self, requested: &str, carried: Option<&str>) -> Result<String, AuthError> {
        let carried = carried.filter(|t| !t.is_empty());
        let requested = Some(requested).filter(|t| !t.is_empty());
        match self {
            Self::Open => Ok(requested.unwrap_or_default().to_owned()),
            Self::Anonymous => Err(AuthError::Missing),
            Self::Authenticated(p) if p.has(Role::Admin) => Ok(requested.or(carried).unwrap_or(&p.tenant).to_owned()),
            Self::Authenticated(p) if p.has(Role::Agent) => Ok(carried.or(requested).unwrap_or(&p.tenant).to_owned()),
            Self::Authenticated(p) => match requested {
                Some(other) if other != p.tenant => Err(AuthError::TenantForbidden(other.to_owned())),
                _ => Ok(p.tenant.clone()),
            },
        }
    }
}

/// Why a caller was not let in, or a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("authentication required: send `Authorization: Bearer <token or API key>`")]
    Missing,
    #[error("invalid credentials: {0}")]
    Invalid(String),
    #[error("this needs one of the roles {0}")]
    Forbidden(String),
    #[error("the credentials do not grant tenant {0:?}")]
    TenantForbidden(String),
    #[error("invalid authentication configuration: {0}")]
    Config(String),
    #[error(
        "refusing to listen on {0} with no credentials configured: anyone who can reach it could use it. Configure \
         `auth` (a JWT secret or keys, or an API keys file), bind to 127.0.0.1, or pass --insecure to run open anyway"
    )]
    Exposed(String),
    #[error("the agent card is not signed")]
    CardUnsigned,
    #[error("no signature of the agent card verifies with a trusted key: {0}")]
    CardSignatureInvalid(String),
}

/// Verifies credentials against the configured secret, keys and API keys.
#[derive(Debug)]
pub struct Authenticator {
    jwt: Option<JwtVerifier>,
    api_keys: ApiKeys,
}

impl Authenticator {
    /// The authenticator `config` describes; `None` when it configures no way to authenticate
    /// (the service is then open).
    pub fn from_config(config: &AuthConfig) -> Result<Option<Self>, AuthError> {
        let jwt = JwtVerifier::from_config(config)?;
        let api_keys = match &config.api_keys_file {
            Some(path) => ApiKeys::load(path)?,
            None => ApiKeys::default(),
        };
        if jwt.is_none() && api_keys.is_empty() {
            return Ok(None);
        }
        Ok(Some(Self { jwt, api_keys }))
    }

    /// The principal the request's credentials name: `Ok(None)` when it carries none.
    pub fn authenticate(&self, headers: &http::HeaderMap) -> Result<Option<Principal>, AuthError> {
        let Some(credential) = presented_credential(headers)? else { return Ok(None) };
        self.verify(credential).map(Some)
    }

    /// The principal of a bearer credential: a JWT (three dot-separated parts) or an API key.
    pub fn verify(&self, credential: &str) -> Result<Principal, AuthError> {
        if credential.split('.').count() == 3 {
            return match &self.jwt {
                Some(jwt) => jwt.verify(credential),
                None => Err(AuthError::Invalid("this service accepts no tokens, only API keys".into())),
            };
        }
        self.api_keys.principal(credential).ok_or_else(|| AuthError::Invalid("unknown API key".into()))
    }
}

/// The credential a request presents: `Authorization: Bearer X`, else `X-API-Key: X`;
/// `Ok(None)` when it presents none, an error when the header is not of that form.
pub fn presented_credential(headers: &http::HeaderMap) -> Result<Option<&str>, AuthError> {
    if let Some(value) = headers.get(http::header::AUTHORIZATION) {
        let value = value.to_str().map_err(|_| AuthError::Invalid("the Authorization header is not text".into()))?;
        let (scheme, credential) = value.split_once(' ').unwrap_or((value, ""));
        if !scheme.eq_ignore_ascii_case("bearer") || credential.trim().is_empty() {
            return Err(AuthError::Invalid("expected `Authorization: Bearer <token or API key>`".into()));
        }
        return Ok(Some(credential.trim()));
    }
    match headers.get(API_KEY_HEADER) {
        Some(value) => {
            value.to_str().map(|v| Some(v.trim())).map_err(|_| AuthError::Invalid("the API key is not text".into()))
        }
        None => Ok(None),
    }
}

/// Protected mode, as Redis and Jupyter have it: a service bound to an address other than
/// loopback with no way to authenticate is refused, unless the operator passed `insecure`.
pub fn check_exposure(host: &str, auth_enabled: bool, insecure: bool) -> Result<(), AuthError> {
    if auth_enabled || insecure || is_loopback_host(host) {
        return Ok(());
    }
    Err(AuthError::Exposed(host.to_owned()))
}

/// `localhost`, `127.0.0.0/8` or `::1`.
fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(roles: &[Role], tenant: &str) -> Caller {
        Caller::Authenticated(Principal { subject: "s".into(), tenant: tenant.into(), roles: roles.to_vec() })
    }

    #[test]
    fn a_user_acts_in_its_own_tenant_only() {
        let user = principal(&[Role::User], "acme");
        assert_eq!(user.tenant("", None), Ok("acme".into()));
        assert_eq!(user.tenant("acme", Some("other")), Ok("acme".into()), "a user's call context is not trusted");
        assert_eq!(user.tenant("other", None), Err(AuthError::TenantForbidden("other".into())));
    }

    #[test]
    fn agents_forward_the_carried_tenant_and_admins_pick_any() {
        let agent = principal(&[Role::Agent], "");
        assert_eq!(agent.tenant("", Some("acme")), Ok("acme".into()));
        assert_eq!(agent.tenant("globex", None), Ok("globex".into()));
        let admin = principal(&[Role::Admin], "ops");
        assert_eq!(admin.tenant("globex", Some("acme")), Ok("globex".into()));
        assert_eq!(admin.tenant("", None), Ok("ops".into()));
        assert_eq!(Caller::Open.tenant("acme", Some("x")), Ok("acme".into()));
        assert_eq!(Caller::Anonymous.tenant("", None), Err(AuthError::Missing));
    }

    #[test]
    fn roles_are_checked() {
        assert!(principal(&[Role::User], "").holds_any(&[Role::User, Role::Admin]));
        assert!(!principal(&[Role::User], "").holds_any(&[Role::Agent]));
        assert!(Caller::Open.holds_any(&[Role::Admin]));
        assert!(!Caller::Anonymous.holds_any(&[Role::User]));
        assert_eq!(Role::parse("agent"), Some(Role::Agent));
        assert_eq!(Role::parse("root"), None);
    }

    #[test]
    fn protected_mode_refuses_an_open_service_off_loopback() {
        assert!(check_exposure("127.0.0.1", false, false).is_ok());
        assert!(check_exposure("::1", false, false).is_ok());
        assert!(check_exposure("localhost", false, false).is_ok());
        assert!(matches!(check_exposure("0.0.0.0", false, false), Err(AuthError::Exposed(_))));
        assert!(matches!(check_exposure("10.0.0.5", false, false), Err(AuthError::Exposed(_))));
        assert!(check_exposure("0.0.0.0", true, false).is_ok());
        assert!(check_exposure("0.0.0.0", false, true).is_ok());
    }

    #[test]
    fn credentials_come_from_bearer_or_the_api_key_header() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(presented_credential(&headers), Ok(None));
        headers.insert(API_KEY_HEADER, "k1".parse().unwrap());
        assert_eq!(presented_credential(&headers), Ok(Some("k1")));
        headers.insert(http::header::AUTHORIZATION, "Bearer t1".parse().unwrap());
        assert_eq!(presented_credential(&headers), Ok(Some("t1")));
        headers.insert(http::header::AUTHORIZATION, "Basic dXNlcg==".parse().unwrap());
        assert!(matches!(presented_credential(&headers), Err(AuthError::Invalid(_))));
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        const SECRET: &str = "a-property-test-secret-of-32-bytes";

        fn authorization(value: &[u8]) -> http::HeaderMap {
            let mut headers = http::HeaderMap::new();
            if let Ok(value) = http::HeaderValue::from_bytes(value) {
                headers.insert(http::header::AUTHORIZATION, value);
            }
            headers
        }

        fn hs256_authenticator() -> Authenticator {
            let config = AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() };
            Authenticator::from_config(&config).unwrap().unwrap()
        }

        proptest! {
            /// `Bearer <credential>` gives back the credential, whatever the scheme's case and
            /// the spaces around the credential.
            #[test]
            fn a_bearer_credential_reads_back(
                scheme in "[bB][eE][aA][rR][eE][rR]",
                credential in "[!-~]{1,80}",
                before in " {1,3}",
                after in " {0,3}",
            ) {
                let headers = authorization(format!("{scheme}{before}{credential}{after}").as_bytes());
                prop_assert_eq!(presented_credential(&headers), Ok(Some(credential.as_str())));
            }

            /// Any Authorization header gives a credential only in the bearer form, and a typed
            /// refusal otherwise; never a panic.
            #[test]
            fn any_authorization_header_gives_a_bearer_credential_or_a_refusal(value in proptest::collection::vec(any::<u8>(), 0..80)) {
                let headers = authorization(&value);
                match presented_credential(&headers) {
                    Ok(Some(credential)) => {
                        let text = std::str::from_utf8(&value).unwrap();
                        prop_assert!(text.len() > 7 && text[..7].eq_ignore_ascii_case("bearer "), "{text:?}");
                        prop_assert_eq!(credential, text[7..].trim());
                        prop_assert!(!credential.is_empty());
                    }
                    Ok(None) => prop_assert!(headers.is_empty(), "a present header is read"),
                    Err(error) => prop_assert!(matches!(error, AuthError::Invalid(_)), "{error:?}"),
                }
            }

            /// No string that is not a token signed with the secret authenticates, JWT-shaped or
            /// not, and the refusal is always "invalid credentials".
            #[test]
            fn arbitrary_credentials_never_authenticate(credential in "\\PC{0,120}|[A-Za-z0-9_-]{0,40}\\.[A-Za-z0-9_-]{0,80}\\.[A-Za-z0-9_-]{0,43}") {
                let refused = hs256_authenticator().verify(&credential);
                prop_assert!(matches!(refused, Err(AuthError::Invalid(_))), "{refused:?}");
            }

            /// A token changed in any one character no longer authenticates.
            #[test]
            fn a_token_changed_anywhere_is_refused(at in any::<prop::sample::Index>(), replacement in "[A-Za-z0-9_.-]") {
                let claims = Claims::new("alice", "acme", &[Role::Admin], 600);
                let token = mint_hs256(SECRET.as_bytes(), &claims).unwrap();
                let authenticator = hs256_authenticator();
                prop_assert_eq!(authenticator.verify(&token).map(|p| p.subject), Ok("alice".to_owned()));
                let at = at.index(token.len());
                let mut changed = token.clone();
                changed.replace_range(at..=at, &replacement);
                prop_assume!(changed != token);
                let refused = authenticator.verify(&changed);
                prop_assert!(matches!(refused, Err(AuthError::Invalid(_))), "{changed}: {refused:?}");
            }
        }
    }
}
