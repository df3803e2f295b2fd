//! Static API keys, kept hashed: the keys file holds the SHA-256 of each key with its principal,
//! never the key itself. API keys are random 256-bit strings, so a plain SHA-256 (not a password
//! hash) is what protects them at rest.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::read_trimmed;
use crate::{AuthError, Principal, Role};

/// Prefix of the keys [`new_api_key`] makes, so a leaked one is recognisable in a scan.
const API_KEY_PREFIX: &str = "mesh_";

/// The keys file (TOML): one `[[keys]]` table per key.
///
/// ```toml
/// [[keys]]
/// sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
/// subject = "orchestrator"
/// tenant = ""
/// roles = ["agent"]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyFile {
    #[serde(default)]
    pub keys: Vec<ApiKeyEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyEntry {
    /// Lowercase hex SHA-256 of the key ([`hash_api_key`]).
    pub sha256: String,
    pub subject: String,
    #[serde(default)]
    pub tenant: String,
    pub roles: Vec<Role>,
}

/// The hex SHA-256 of an API key, as the keys file stores it.
pub fn hash_api_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A new random API key (244 random bits from two v4 UUIDs).
pub fn new_api_key() -> String {
    format!("{API_KEY_PREFIX}{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// The loaded keys, by hash.
#[derive(Debug, Default)]
pub(crate) struct ApiKeys {
    by_hash: HashMap<String, Principal>,
}

impl ApiKeys {
    pub(crate) fn load(path: &Path) -> Result<Self, AuthError> {
        let text = read_trimmed(path)?;
        let file: ApiKeyFile =
            toml::from_str(&text).map_err(|e| AuthError::Config(format!("{}: {e}", path.display())))?;
        Self::from_file(file).map_err(|e| AuthError::Config(format!("{}: {e}", path.display())))
    }

    fn from_file(file: ApiKeyFile) -> Result<Self, String> {
        let mut by_hash = HashMap::new();
        for entry in file.keys {
            let hash = entry.sha256.to_ascii_lowercase();
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("the key of {:?} is not a hex SHA-256", entry.subject));
            }
            if entry.roles.is_empty() {
                return Err(format!("the key of {:?} grants no role", entry.subject));
            }
            let principal = Principal { subject: entry.subject, tenant: entry.tenant, roles: entry.roles };
            if by_hash.insert(hash, principal).is_some() {
                return Err("a key is listed twice".into());
            }
        }
        Ok(Self { by_hash })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    pub(crate) fn principal(&self, key: &str) -> Option<Principal> {
        self.by_hash.get(&hash_api_key(key)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_by_their_hash_only() {
        let key = new_api_key();
        assert!(key.starts_with(API_KEY_PREFIX) && key.len() == API_KEY_PREFIX.len() + 64);
        let file = ApiKeyFile {
            keys: vec![ApiKeyEntry {
                sha256: hash_api_key(&key).to_uppercase(),
                subject: "search".into(),
                tenant: "acme".into(),
                roles: vec![Role::Agent],
            }],
        };
        let text = toml::to_string(&file).unwrap();
        assert!(!text.contains(&key), "the file never holds the key");
        let keys = ApiKeys::from_file(toml::from_str(&text).unwrap()).unwrap();
        assert_eq!(keys.principal(&key).unwrap().subject, "search");
        assert_eq!(keys.principal("mesh_guess"), None);
        assert_eq!(hash_api_key("test"), "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
    }

    #[test]
    fn a_bad_keys_file_is_refused() {
        let entry = |sha256: &str, roles: Vec<Role>| ApiKeyEntry {
            sha256: sha256.into(),
            subject: "x".into(),
            tenant: String::new(),
            roles,
        };
        assert!(ApiKeys::from_file(ApiKeyFile { keys: vec![entry("abc", vec![Role::User])] }).is_err());
        assert!(ApiKeys::from_file(ApiKeyFile { keys: vec![entry(&hash_api_key("k"), vec![])] }).is_err());
        let twice = vec![entry(&hash_api_key("k"), vec![Role::User]), entry(&hash_api_key("k"), vec![Role::Admin])];
        assert!(ApiKeys::from_file(ApiKeyFile { keys: twice }).is_err());
        assert!(toml::from_str::<ApiKeyFile>("[[keys]]\nsha256 = \"a\"\nsubject = \"x\"\nroles = [\"root\"]").is_err());
    }
}
