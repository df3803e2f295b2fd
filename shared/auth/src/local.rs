//! Credentials of a suite run on one machine (`a2a-mesh up --auth`): an HS256 secret every
//! service verifies tokens with, and an Ed25519 key every agent signs its card with and the
//! registry trusts, generated once into a directory only its owner reads. Whoever can read that
//! directory can mint any token, as the owner of a Jupyter server can read its token file; the
//! command line mints its own tokens from it (`a2a-mesh token`, and `ask`, `chat`, `ingest`)
//! through [`LocalKeys::auth_config`].

use std::io::Write;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{EncodePrivateKey, EncodePublicKey};

use crate::{AuthConfig, AuthError, CardSigningKey, JwtPublicKey, KeyAlgorithm};

/// The `kid` of the locally generated card-signing key.
pub const LOCAL_CARD_KEY_ID: &str = "a2a-mesh-local";
const SECRET_FILE: &str = "jwt-hs256.secret";
const CARD_PRIVATE_KEY_FILE: &str = "card-signing.pem";
const CARD_PUBLIC_KEY_FILE: &str = "card-signing.pub.pem";
/// Random bytes of the generated HS256 secret: as long as the hash (RFC 7518 §3.2).
const SECRET_BYTES: usize = 32;
const ED25519_SEED_BYTES: usize = 32;

/// The credentials in one directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalKeys {
    dir: PathBuf,
}

impl LocalKeys {
    /// The keys in `dir`, generating whichever is missing (the directory too, readable by its
    /// owner only). Existing keys are kept, so tokens minted earlier stay valid.
    pub fn ensure(dir: &Path) -> Result<Self, AuthError> {
        create_private_dir(dir)?;
        let keys = Self { dir: dir.to_owned() };
        if !keys.secret_file().exists() {
            write_new(&keys.secret_file(), hex::encode(random_bytes::<SECRET_BYTES>()?).as_bytes())?;
        }
        if !keys.dir.join(CARD_PRIVATE_KEY_FILE).exists() {
            let key = SigningKey::from_bytes(&random_bytes::<ED25519_SEED_BYTES>()?);
            let private = key.to_pkcs8_pem(LineEnding::LF).map_err(|e| config_error("encode the card key", e))?;
            let public = key
                .verifying_key()
                .to_public_key_pem(LineEnding::LF)
                .map_err(|e| config_error("encode the card key", e))?;
            // The public half first: a private key without it would never be trusted.
            write_new(&keys.dir.join(CARD_PUBLIC_KEY_FILE), public.as_bytes())?;
            write_new(&keys.dir.join(CARD_PRIVATE_KEY_FILE), private.as_bytes())?;
        }
        Ok(keys)
    }

    /// The keys in `dir` when `up --auth` generated them there.
    pub fn find(dir: &Path) -> Option<Self> {
        let keys = Self { dir: dir.to_owned() };
        keys.secret_file().is_file().then_some(keys)
    }

    pub fn secret_file(&self) -> PathBuf {
        self.dir.join(SECRET_FILE)
    }

    /// What an agent signs its card with.
    pub fn card_signing_key(&self) -> CardSigningKey {
        CardSigningKey {
            kid: LOCAL_CARD_KEY_ID.to_owned(),
            algorithm: KeyAlgorithm::EdDSA,
            pem_file: self.dir.join(CARD_PRIVATE_KEY_FILE),
        }
    }

    /// What the registry verifies cards with.
    pub fn card_public_key(&self) -> JwtPublicKey {
        JwtPublicKey {
            kid: Some(LOCAL_CARD_KEY_ID.to_owned()),
            algorithm: KeyAlgorithm::EdDSA,
            pem_file: self.dir.join(CARD_PUBLIC_KEY_FILE),
        }
    }

    /// Authentication by the local secret: what verifies and mints the local tokens.
    pub fn auth_config(&self) -> AuthConfig {
        AuthConfig { jwt_hs256_secret_file: Some(self.secret_file()), ..AuthConfig::default() }
    }
}

fn config_error(what: &str, error: impl std::fmt::Display) -> AuthError {
    AuthError::Config(format!("cannot {what}: {error}"))
}

fn random_bytes<const N: usize>() -> Result<[u8; N], AuthError> {
    let mut bytes = [0; N];
    getrandom::getrandom(&mut bytes).map_err(|e| config_error("draw random bytes", e))?;
    Ok(bytes)
}

fn create_private_dir(dir: &Path) -> Result<(), AuthError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|e| config_error(&format!("create {}", dir.display()), e))
}

/// Writes a file that must not exist yet, readable by its owner only.
fn write_new(path: &Path, contents: &[u8]) -> Result<(), AuthError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(|e| config_error(&format!("create {}", path.display()), e))?;
    file.write_all(contents).map_err(|e| config_error(&format!("write {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Authenticator, CardSigner, CardVerifier, Role};

    #[test]
    fn generated_keys_mint_verifiable_tokens_and_sign_verifiable_cards_and_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("auth");
        assert_eq!(LocalKeys::find(&home), None);
        let keys = LocalKeys::ensure(&home).unwrap();
        assert_eq!(LocalKeys::find(&home), Some(keys.clone()));

        let config = keys.auth_config();
        let token = config.mint("alice", "acme", &[Role::User], 60).unwrap().unwrap();
        let principal = Authenticator::from_config(&config).unwrap().unwrap().verify(&token).unwrap();
        assert_eq!((principal.subject.as_str(), principal.tenant.as_str()), ("alice", "acme"));

        let mut card = serde_json::json!({"name": "search", "version": "1.0.0"});
        CardSigner::load(&keys.card_signing_key()).unwrap().sign(&mut card).unwrap();
        let verifier = CardVerifier::load(&[keys.card_public_key()]).unwrap();
        assert_eq!(verifier.verify(&card).unwrap(), LOCAL_CARD_KEY_ID);

        // A second `up --auth` keeps the keys: the token minted before still verifies.
        let secret = std::fs::read(keys.secret_file()).unwrap();
        LocalKeys::ensure(&home).unwrap();
        assert_eq!(std::fs::read(keys.secret_file()).unwrap(), secret);
        assert!(Authenticator::from_config(&config).unwrap().unwrap().verify(&token).is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for path in [home.clone(), keys.secret_file(), keys.card_signing_key().pem_file] {
                let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o077;
                assert_eq!(mode, 0, "{} is readable by others", path.display());
            }
        }
    }
}
