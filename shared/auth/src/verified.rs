//! Tokens verified recently. A caller sends the same bearer token on every request until it
//! expires; verifying it again each time (parse the header and the claims, set up the key, check
//! the signature) was the gateway's largest single cost per request. A token verified once names
//! the same principal until its `exp`, so the principal is kept, bounded, until then.
//!
//! Keyed by the token's SHA-256 rather than the token: the key is fixed-size whatever the token's
//! length, and comparing a presented token with a cached one cannot leak a cached token's bytes
//! through timing, since an attacker controls the presented token's digest no better than chance.
//! Refusals are never kept: a flood of bad tokens must not evict good ones, and an unknown token
//! always reaches the real check.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::Principal;

/// Tokens kept at most; beyond it the least recently presented one goes. A principal and its key
/// take about 200 bytes, so the cache stays under a megabyte.
pub(crate) const VERIFIED_TOKENS_CACHED_MAX: usize = 4096;

/// A verified token's principal and when the token stops being accepted.
#[derive(Debug, Clone)]
struct Verified {
    principal: Principal,
    /// Seconds since the Unix epoch after which the token is refused (its `exp` plus the leeway
    /// the verification allows), so a cached token expires exactly when a fresh check would fail.
    accepted_until_s: u64,
}

#[derive(Debug)]
pub(crate) struct VerifiedTokens {
    entries: Mutex<lru::LruCache<[u8; 32], Verified>>,
}

impl VerifiedTokens {
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self { entries: Mutex::new(lru::LruCache::new(capacity)) }
    }

    /// The principal `token` was verified to name, if it was and is still accepted at `now_s`.
    pub(crate) fn get(&self, token: &str, now_s: u64) -> Option<Principal> {
        let key = digest(token);
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match entries.get(&key) {
            Some(verified) if now_s <= verified.accepted_until_s => Some(verified.principal.clone()),
            Some(_) => {
                entries.pop(&key);
                None
            }
            None => None,
        }
    }

    /// Keeps `principal` for `token` until `accepted_until_s`.
    pub(crate) fn insert(&self, token: &str, principal: Principal, accepted_until_s: u64) {
        let verified = Verified { principal, accepted_until_s };
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner).put(digest(token), verified);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    fn principal(subject: &str) -> Principal {
        Principal { subject: subject.into(), tenant: "acme".into(), roles: vec![Role::User] }
    }

    #[test]
    fn a_token_is_served_until_it_stops_being_accepted() {
        let cache = VerifiedTokens::new(8);
        cache.insert("t1", principal("alice"), 100);
        assert_eq!(cache.get("t1", 99), Some(principal("alice")));
        assert_eq!(cache.get("t1", 100), Some(principal("alice")), "accepted up to and including its last second");
        assert_eq!(cache.get("t1", 101), None);
        assert_eq!(cache.len(), 0, "an expired token is dropped when seen");
        assert_eq!(cache.get("t2", 0), None);
    }

    #[test]
    fn the_least_recently_presented_token_goes_first() {
        let cache = VerifiedTokens::new(2);
        cache.insert("a", principal("a"), 100);
        cache.insert("b", principal("b"), 100);
        assert!(cache.get("a", 0).is_some());
        cache.insert("c", principal("c"), 100);
        assert_eq!(cache.len(), 2);
        assert!(cache.get("b", 0).is_none(), "b was presented least recently");
        assert!(cache.get("a", 0).is_some() && cache.get("c", 0).is_some());
    }
}
