//! Bearer JWTs: HS256 with a shared secret, EdDSA or ES256 with public keys. `exp` and `sub` are
//! required, `nbf` is checked when present; `iss` and `aud` are checked when configured.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, decode, decode_header, encode};
use serde::{Deserialize, Serialize};

use crate::config::{JwtPublicKey, read_key};
use crate::verified::{VERIFIED_TOKENS_CACHED_MAX, VerifiedTokens};
use crate::{AuthConfig, AuthError, Principal, Role};

/// Shortest HS256 secret accepted: the key must be as long as the hash (RFC 7518 §3.2).
pub(crate) const HS256_SECRET_BYTES_MIN: usize = 32;
/// Clock skew tolerated on `exp` and `nbf` between the issuer and this service.
const CLOCK_LEEWAY_S: u64 = 30;

/// The claims of a mesh token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    #[serde(default)]
    pub tenant: String,
    /// Role names; those the mesh does not know are ignored.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    /// Not before, seconds since the Unix epoch: a token is refused until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<String>,
}

impl Claims {
    /// The claims of `subject` in `tenant` with `roles`, expiring `ttl_s` seconds from now.
    pub fn new(subject: &str, tenant: &str, roles: &[Role], ttl_s: u64) -> Self {
        let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Self {
            sub: subject.to_owned(),
            tenant: tenant.to_owned(),
            roles: roles.iter().map(|role| role.as_str().to_owned()).collect(),
            exp: now_s.saturating_add(ttl_s),
            nbf: Some(now_s),
            iss: None,
            aud: None,
        }
    }
}

/// Signs `claims` with an HS256 `secret`: for `a2a-mesh auth token` and tests.
pub fn mint_hs256(secret: &[u8], claims: &Claims) -> Result<String, AuthError> {
    encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(secret))
        .map_err(|e| AuthError::Config(format!("cannot sign the token: {e}")))
}

/// A configured public key.
pub(crate) struct PublicKey {
    pub(crate) kid: Option<String>,
    pub(crate) algorithm: Algorithm,
    pub(crate) key: DecodingKey,
}

impl PublicKey {
    /// Reads the PEM file of `configured`.
    pub(crate) fn load(configured: &JwtPublicKey) -> Result<Self, AuthError> {
        let (algorithm, key) =
            read_key(&configured.pem_file, configured.algorithm, DecodingKey::from_ed_pem, DecodingKey::from_ec_pem)?;
        Ok(Self { kid: configured.kid.clone(), algorithm, key })
    }
}

pub(crate) struct JwtVerifier {
    hs256: Option<DecodingKey>,
    public: Vec<PublicKey>,
    /// The checks of each accepted algorithm, built once rather than per request.
    validations: Vec<(Algorithm, Validation)>,
    /// Tokens already verified. It belongs to this verifier, so verifiers built from new keys
    /// start with none: a token is never accepted on a key that is no longer configured.
    verified: VerifiedTokens,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<_> = self.public.iter().map(|k| (k.kid.clone(), k.algorithm)).collect();
        f.debug_struct("JwtVerifier")
            .field("hs256", &self.hs256.is_some())
            .field("public", &kids)
            .field("validations", &self.validations)
            .finish_non_exhaustive()
    }
}

impl JwtVerifier {
    pub(crate) fn from_config(config: &AuthConfig) -> Result<Option<Self>, AuthError> {
        let hs256 = config.hs256_secret()?.map(|secret| DecodingKey::from_secret(&secret));
        let public = config.jwt_public_keys.iter().map(PublicKey::load).collect::<Result<Vec<_>, _>>()?;
        if hs256.is_none() && public.is_empty() {
            return Ok(None);
        }
        let (issuer, audience) = (config.jwt_issuer.as_deref(), config.jwt_audience.as_deref());
        let validations = [Algorithm::HS256, Algorithm::EdDSA, Algorithm::ES256]
            .into_iter()
            .map(|algorithm| (algorithm, validation(algorithm, issuer, audience)))
            .collect();
        Ok(Some(Self { hs256, public, validations, verified: VerifiedTokens::new(VERIFIED_TOKENS_CACHED_MAX) }))
    }

    /// The principal `token` names: from the tokens already verified while it is accepted, else
    /// checked in full (and then kept).
    pub(crate) fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        let now_s = jsonwebtoken::get_current_timestamp();
        if let Some(principal) = self.verified.get(token, now_s) {
            return Ok(principal);
        }
        let (principal, exp_s) = self.verify_in_full(token)?;
        // Accepted while `exp >= now - leeway`, as the check above has it.
        self.verified.insert(token, principal.clone(), exp_s.saturating_add(CLOCK_LEEWAY_S));
        Ok(principal)
    }

    /// The principal `token` names and its `exp`, after every check.
    fn verify_in_full(&self, token: &str) -> Result<(Principal, u64), AuthError> {
        let invalid = |e: jsonwebtoken::errors::Error| AuthError::Invalid(e.to_string());
        let header = decode_header(token).map_err(invalid)?;
        let candidates: Vec<&DecodingKey> = match header.alg {
            Algorithm::HS256 => self.hs256.iter().collect(),
            Algorithm::EdDSA | Algorithm::ES256 => self
                .public
                .iter()
                .filter(|k| k.algorithm == header.alg)
                .filter(|k| header.kid.is_none() || k.kid == header.kid)
                .map(|k| &k.key)
                .collect(),
            other => return Err(AuthError::Invalid(format!("algorithm {other:?} is not accepted"))),
        };
        if candidates.is_empty() {
            return Err(AuthError::Invalid(format!("no key verifies {:?} tokens with this kid", header.alg)));
        }
        let Some((_, validation)) = self.validations.iter().find(|(algorithm, _)| *algorithm == header.alg) else {
            return Err(AuthError::Invalid(format!("algorithm {:?} is not accepted", header.alg)));
        };
        let mut last_error = None;
        for key in candidates {
            match decode::<Claims>(token, key, validation) {
                Ok(data) => {
                    let exp_s = data.claims.exp;
                    return principal(data.claims).map(|principal| (principal, exp_s));
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.map(invalid).unwrap_or(AuthError::Missing))
    }
}

/// The checks of `algorithm`'s tokens: `exp` and `sub` always; a configured issuer or audience
/// must be present, not only match when present.
fn validation(algorithm: Algorithm, issuer: Option<&str>, audience: Option<&str>) -> Validation {
    let mut validation = Validation::new(algorithm);
    let mut required = vec!["exp", "sub"];
    required.extend(issuer.map(|_| "iss"));
    required.extend(audience.map(|_| "aud"));
    validation.set_required_spec_claims(&required);
    validation.leeway = CLOCK_LEEWAY_S;
    // Off by default in jsonwebtoken: a token issued for later must not open anything now.
    validation.validate_nbf = true;
    match issuer {
        Some(issuer) => validation.set_issuer(&[issuer]),
        None => validation.iss = None,
    }
    match audience {
        Some(audience) => validation.set_audience(&[audience]),
        None => validation.validate_aud = false,
    }
    validation
}

fn principal(claims: Claims) -> Result<Principal, AuthError> {
    let roles: Vec<Role> = claims.roles.iter().filter_map(|name| Role::parse(name)).collect();
    if roles.is_empty() {
        return Err(AuthError::Invalid("the token grants no mesh role".into()));
    }
    Ok(Principal { subject: claims.sub, tenant: claims.tenant, roles })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KeyAlgorithm;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn now_s() -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
    }

    fn claims(roles: &[&str], exp: u64) -> Claims {
        Claims {
            sub: "alice".into(),
            tenant: "acme".into(),
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
            exp,
            nbf: None,
            iss: None,
            aud: None,
        }
    }

    fn verifier(config: AuthConfig) -> JwtVerifier {
        JwtVerifier::from_config(&config).unwrap().unwrap()
    }

    #[test]
    fn an_hs256_token_names_its_principal_until_it_expires() {
        let jwt = verifier(AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() });
        let token = mint_hs256(SECRET.as_bytes(), &claims(&["user", "other-system"], now_s() + 60)).unwrap();
        let principal = jwt.verify(&token).unwrap();
        assert_eq!((principal.subject.as_str(), principal.tenant.as_str()), ("alice", "acme"));
        assert_eq!(principal.roles, [Role::User]);

        let expired = mint_hs256(SECRET.as_bytes(), &claims(&["user"], now_s() - 3600)).unwrap();
        assert!(matches!(jwt.verify(&expired), Err(AuthError::Invalid(e)) if e.contains("xpired")));
        let forged = mint_hs256(b"another secret of thirty-two bytes!", &claims(&["admin"], now_s() + 60)).unwrap();
        assert!(matches!(jwt.verify(&forged), Err(AuthError::Invalid(_))));
        let roleless = mint_hs256(SECRET.as_bytes(), &claims(&["root"], now_s() + 60)).unwrap();
        assert!(matches!(jwt.verify(&roleless), Err(AuthError::Invalid(e)) if e.contains("no mesh role")));
    }

    #[test]
    fn a_verified_token_is_kept_until_its_expiry_and_refusals_are_not() {
        let jwt = verifier(AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() });
        let exp_s = now_s() + 60;
        let token = mint_hs256(SECRET.as_bytes(), &claims(&["user"], exp_s)).unwrap();
        let principal = jwt.verify(&token).unwrap();
        let last_accepted_s = exp_s + CLOCK_LEEWAY_S;
        assert_eq!(jwt.verified.get(&token, last_accepted_s), Some(principal.clone()));
        assert_eq!(jwt.verified.get(&token, last_accepted_s + 1), None, "gone once a full check would refuse it");
        assert_eq!(jwt.verify(&token), Ok(principal), "checked in full again");

        let forged = mint_hs256(b"another secret of thirty-two bytes!", &claims(&["admin"], exp_s)).unwrap();
        assert!(jwt.verify(&forged).is_err());
        assert_eq!(jwt.verified.get(&forged, now_s()), None);
        let roleless = mint_hs256(SECRET.as_bytes(), &claims(&["root"], exp_s)).unwrap();
        assert!(jwt.verify(&roleless).is_err());
        assert_eq!(
            jwt.verified.get(&roleless, now_s()),
            None,
            "a token refused after its signature checks is not kept"
        );
    }

    #[test]
    fn a_token_is_refused_before_its_not_before_time() {
        let jwt = verifier(AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() });
        let later = Claims { nbf: Some(now_s() + 3600), ..claims(&["user"], now_s() + 7200) };
        let refused = jwt.verify(&mint_hs256(SECRET.as_bytes(), &later).unwrap());
        assert!(matches!(&refused, Err(AuthError::Invalid(e)) if e.contains("mmature")), "{refused:?}");
        let within_leeway = Claims { nbf: Some(now_s() + CLOCK_LEEWAY_S / 2), ..later };
        assert!(jwt.verify(&mint_hs256(SECRET.as_bytes(), &within_leeway).unwrap()).is_ok());
    }

    #[test]
    fn issuer_and_audience_are_checked_when_configured() {
        let jwt = verifier(AuthConfig {
            jwt_hs256_secret: Some(SECRET.into()),
            jwt_issuer: Some("https://idp.example".into()),
            jwt_audience: Some("a2a-mesh".into()),
            ..AuthConfig::default()
        });
        let mut good = claims(&["user"], now_s() + 60);
        good.iss = Some("https://idp.example".into());
        good.aud = Some("a2a-mesh".into());
        assert!(jwt.verify(&mint_hs256(SECRET.as_bytes(), &good).unwrap()).is_ok());
        let wrong_audience = Claims { aud: Some("elsewhere".into()), ..good.clone() };
        assert!(jwt.verify(&mint_hs256(SECRET.as_bytes(), &wrong_audience).unwrap()).is_err());
        let no_issuer = Claims { iss: None, ..good };
        assert!(jwt.verify(&mint_hs256(SECRET.as_bytes(), &no_issuer).unwrap()).is_err());
    }

    #[test]
    fn short_secrets_and_unreadable_keys_are_refused() {
        let short = AuthConfig { jwt_hs256_secret: Some("short".into()), ..AuthConfig::default() };
        assert!(matches!(JwtVerifier::from_config(&short), Err(AuthError::Config(_))));
        let missing = AuthConfig {
            jwt_public_keys: vec![crate::config::JwtPublicKey {
                kid: None,
                algorithm: KeyAlgorithm::EdDSA,
                pem_file: "/nonexistent/key.pem".into(),
            }],
            ..AuthConfig::default()
        };
        assert!(matches!(JwtVerifier::from_config(&missing), Err(AuthError::Config(_))));
        assert!(JwtVerifier::from_config(&AuthConfig::default()).unwrap().is_none());
    }
}
