use std::path::PathBuf;

use serde::Deserialize;

use crate::{AuthError, Claims, Role, mint_hs256};

/// How a service authenticates its callers, and the credential it presents to others. In every
/// service's configuration as its `auth` section (e.g. `MESH_REGISTRY_AUTH__API_KEYS_FILE`), and
/// for the whole suite under `up` as `MESH_AUTH_*`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// HS256 tokens: the shared secret (at least 32 bytes), or a file holding it.
    pub jwt_hs256_secret: Option<String>,
    /// A file holding the HS256 secret, instead of `jwt_hs256_secret`.
    pub jwt_hs256_secret_file: Option<PathBuf>,
    /// EdDSA or ES256 tokens: public keys in PEM files, each under the `kid` tokens name it by.
    pub jwt_public_keys: Vec<JwtPublicKey>,
    /// When set, tokens must carry this `iss`.
    pub jwt_issuer: Option<String>,
    /// When set, tokens must carry this `aud`.
    pub jwt_audience: Option<String>,
    /// Static API keys, kept hashed (SHA-256) with their principals: see [`crate::ApiKeyFile`].
    pub api_keys_file: Option<PathBuf>,
    /// The credential (a token or an API key) this service presents to the registry and to other
    /// agents, or a file holding it.
    pub credential: Option<String>,
    /// A file holding that credential, re-read every 30 s so a deployment can rotate it.
    pub credential_file: Option<PathBuf>,
    /// Instead of a given credential, an agent mints its own: an `agent` token naming it, signed
    /// with `jwt_hs256_secret`, valid this many seconds and renewed halfway (what `up` gives its
    /// agents). A credential file, by contrast, is re-read as a deployment rotates it.
    pub credential_self_issued_ttl_s: Option<u64>,
    /// Runs open (no authentication) even on an address other than loopback.
    pub insecure: bool,
    /// Signs this agent's card (A2A 1.0 §8.4) with this private key.
    pub card_signing_key: Option<crate::CardSigningKey>,
}

/// A public key that verifies tokens.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtPublicKey {
    /// The `kid` of the tokens it verifies; a token without `kid` is tried against the keys of
    /// its algorithm.
    pub kid: Option<String>,
    pub algorithm: KeyAlgorithm,
    pub pem_file: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum KeyAlgorithm {
    EdDSA,
    ES256,
}

impl AuthConfig {
    /// Whether it configures a way to verify callers (a secret, public keys or an API keys
    /// file); a service without one is open.
    pub fn verifies_callers(&self) -> bool {
        self.jwt_hs256_secret.is_some()
            || self.jwt_hs256_secret_file.is_some()
            || !self.jwt_public_keys.is_empty()
            || self.api_keys_file.is_some()
    }

    /// The HS256 secret, from the value or its file.
    pub fn hs256_secret(&self) -> Result<Option<Vec<u8>>, AuthError> {
        let secret = match (&self.jwt_hs256_secret, &self.jwt_hs256_secret_file) {
            (Some(secret), _) => secret.clone().into_bytes(),
            (None, Some(path)) => read_trimmed(path)?.into_bytes(),
            (None, None) => return Ok(None),
        };
        if secret.len() < crate::token::HS256_SECRET_BYTES_MIN {
            return Err(AuthError::Config(format!(
                "the HS256 secret must hold at least {} bytes",
                crate::token::HS256_SECRET_BYTES_MIN
            )));
        }
        Ok(Some(secret))
    }

    /// A token for `subject` in `tenant` with `roles`, valid `ttl_s` seconds, signed with the
    /// configured HS256 secret and naming the configured issuer and audience, so the services
    /// configured alike accept it; `None` when no secret is configured.
    pub fn mint(&self, subject: &str, tenant: &str, roles: &[Role], ttl_s: u64) -> Result<Option<String>, AuthError> {
        let Some(secret) = self.hs256_secret()? else { return Ok(None) };
        let claims = Claims {
            iss: self.jwt_issuer.clone(),
            aud: self.jwt_audience.clone(),
            ..Claims::new(subject, tenant, roles, ttl_s)
        };
        mint_hs256(&secret, &claims).map(Some)
    }

    /// The credential this service presents to others, from the value or its file.
    pub fn outbound_credential(&self) -> Result<Option<String>, AuthError> {
        match (&self.credential, &self.credential_file) {
            (Some(credential), _) => Ok(Some(credential.trim().to_owned())),
            (None, Some(path)) => read_trimmed(path).map(Some),
            (None, None) => Ok(None),
        }
    }
}

pub(crate) fn read_trimmed(path: &std::path::Path) -> Result<String, AuthError> {
    std::fs::read_to_string(path)
        .map(|text| text.trim().to_owned())
        .map_err(|e| AuthError::Config(format!("cannot read {}: {e}", path.display())))
}

/// The key in `pem_file`, of `algorithm`, read by `ed` (EdDSA) or `ec` (ES256): one reader for the
/// public keys that verify and the private keys that sign.
pub(crate) fn read_key<K>(
    pem_file: &std::path::Path,
    algorithm: KeyAlgorithm,
    ed: impl FnOnce(&[u8]) -> jsonwebtoken::errors::Result<K>,
    ec: impl FnOnce(&[u8]) -> jsonwebtoken::errors::Result<K>,
) -> Result<(jsonwebtoken::Algorithm, K), AuthError> {
    let pem = read_trimmed(pem_file)?;
    let (algorithm, key) = match algorithm {
        KeyAlgorithm::EdDSA => (jsonwebtoken::Algorithm::EdDSA, ed(pem.as_bytes())),
        KeyAlgorithm::ES256 => (jsonwebtoken::Algorithm::ES256, ec(pem.as_bytes())),
    };
    key.map(|key| (algorithm, key)).map_err(|e| AuthError::Config(format!("{}: {e}", pem_file.display())))
}
