//! Signed agent cards (A2A 1.0 §8.4): each entry of a card's `signatures` is a JWS with a detached
//! payload, the card's RFC 8785 canonical form. The signer puts `alg` and `kid` in the protected
//! header; a verifier finds its key by `kid`.
//!
//! The canonical form is the one the official SDKs sign: the card without `signatures`, with
//! every empty string, empty list, empty object and null dropped, recursively (an object or list
//! left empty by that is dropped too), then serialized by RFC 8785. So a card signed here verifies
//! there, and the other way round, whichever empty fields either side's serializer writes.

use std::path::PathBuf;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::AuthError;
use crate::config::{JwtPublicKey, KeyAlgorithm, read_key};
use crate::token::PublicKey;

/// The card field that holds the signatures, left out of what they sign.
pub const SIGNATURES_FIELD: &str = "signatures";
/// The JWS `typ` of a card signature, as the spec's example and the SDKs write it.
const SIGNATURE_TYPE: &str = "JOSE";
/// Deepest nesting canonicalized: a card's extension parameters are free JSON, and a verifier
/// must not recurse without bound on what a registrant sent.
const CARD_DEPTH_MAX: usize = 128;

/// The key an agent signs its card with.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardSigningKey {
    /// Put in the protected header: verifiers look their key up by it.
    pub kid: String,
    pub algorithm: KeyAlgorithm,
    /// The private key, PKCS#8 PEM.
    pub pem_file: PathBuf,
}

/// The protected header of a card signature.
#[derive(Debug, Serialize, Deserialize)]
struct ProtectedHeader {
    alg: Algorithm,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    typ: Option<String>,
}

/// Signs agent cards with one private key.
pub struct CardSigner {
    kid: String,
    algorithm: Algorithm,
    key: EncodingKey,
}

impl std::fmt::Debug for CardSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CardSigner").field("kid", &self.kid).field("algorithm", &self.algorithm).finish()
    }
}

impl CardSigner {
    pub fn load(configured: &CardSigningKey) -> Result<Self, AuthError> {
        let (algorithm, key) =
            read_key(&configured.pem_file, configured.algorithm, EncodingKey::from_ed_pem, EncodingKey::from_ec_pem)?;
        Ok(Self { kid: configured.kid.clone(), algorithm, key })
    }

    /// Adds this key's signature to `card` (a JSON object), after any it holds already.
    pub fn sign(&self, card: &mut Value) -> Result<(), AuthError> {
        let header =
            ProtectedHeader { alg: self.algorithm, kid: Some(self.kid.clone()), typ: Some(SIGNATURE_TYPE.to_owned()) };
        let header = serde_json::to_vec(&header).map_err(|e| AuthError::Config(e.to_string()))?;
        let protected = URL_SAFE_NO_PAD.encode(header);
        let signing_input = format!("{protected}.{}", URL_SAFE_NO_PAD.encode(canonical_form(card)?));
        let signature = jsonwebtoken::crypto::sign(signing_input.as_bytes(), &self.key, self.algorithm)
            .map_err(|e| AuthError::Config(format!("cannot sign the card: {e}")))?;
        let Some(fields) = card.as_object_mut() else {
            return Err(AuthError::Config("an agent card is a JSON object".into()));
        };
        let signatures = fields.entry(SIGNATURES_FIELD).or_insert_with(|| Value::Array(Vec::new()));
        let Some(signatures) = signatures.as_array_mut() else {
            return Err(AuthError::Config(format!("the card's {SIGNATURES_FIELD:?} is not a list")));
        };
        signatures.push(serde_json::json!({ "protected": protected, "signature": signature }));
        Ok(())
    }
}

/// Verifies card signatures against trusted public keys.
pub struct CardVerifier {
    keys: Vec<PublicKey>,
}

impl std::fmt::Debug for CardVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<_> = self.keys.iter().map(|k| (k.kid.clone(), k.algorithm)).collect();
        f.debug_struct("CardVerifier").field("keys", &kids).finish()
    }
}

impl CardVerifier {
    /// A verifier trusting `keys`; each needs a `kid`, as card signatures name their key by it.
    pub fn load(keys: &[JwtPublicKey]) -> Result<Self, AuthError> {
        if let Some(unnamed) = keys.iter().find(|k| k.kid.is_none()) {
            return Err(AuthError::Config(format!(
                "the trusted card key {} needs a kid: card signatures name their key by it",
                unnamed.pem_file.display()
            )));
        }
        Ok(Self { keys: keys.iter().map(PublicKey::load).collect::<Result<_, _>>()? })
    }

    /// The `kid` of the first signature of `card` made by a trusted key over the card as it is.
    /// [`AuthError::CardUnsigned`] when the card holds no signature,
    /// [`AuthError::CardSignatureInvalid`] when none verifies.
    pub fn verify(&self, card: &Value) -> Result<String, AuthError> {
        let signatures = match card.get(SIGNATURES_FIELD) {
            None | Some(Value::Null) => return Err(AuthError::CardUnsigned),
            Some(Value::Array(signatures)) if signatures.is_empty() => return Err(AuthError::CardUnsigned),
            Some(Value::Array(signatures)) => signatures,
            Some(_) => return Err(AuthError::CardSignatureInvalid(format!("{SIGNATURES_FIELD:?} is not a list"))),
        };
        let payload = URL_SAFE_NO_PAD.encode(canonical_form(card)?);
        let mut reasons = Vec::new();
        for signature in signatures {
            match self.verify_one(signature, &payload) {
                Ok(kid) => return Ok(kid),
                Err(reason) => reasons.push(reason),
            }
        }
        Err(AuthError::CardSignatureInvalid(reasons.join("; ")))
    }

    fn verify_one(&self, signature: &Value, payload: &str) -> Result<String, String> {
        let field = |name: &str| signature.get(name).and_then(Value::as_str).ok_or(format!("no {name:?}"));
        let (protected, value) = (field("protected")?, field("signature")?);
        let header = URL_SAFE_NO_PAD.decode(protected).map_err(|e| format!("protected header: {e}"))?;
        let header: ProtectedHeader = serde_json::from_slice(&header).map_err(|e| format!("protected header: {e}"))?;
        let kid = header.kid.ok_or("the protected header names no kid")?;
        let key = self
            .keys
            .iter()
            .find(|k| k.kid.as_deref() == Some(kid.as_str()))
            .ok_or(format!("no trusted key has kid {kid:?}"))?;
        // The key decides the algorithm: a header cannot talk a verifier into another one.
        if key.algorithm != header.alg {
            return Err(format!("kid {kid:?} is a {:?} key, the signature says {:?}", key.algorithm, header.alg));
        }
        let signing_input = format!("{protected}.{payload}");
        match jsonwebtoken::crypto::verify(value, signing_input.as_bytes(), &key.key, key.algorithm) {
            Ok(true) => Ok(kid),
            Ok(false) => Err(format!("the signature of kid {kid:?} does not match the card")),
            Err(e) => Err(format!("the signature of kid {kid:?}: {e}")),
        }
    }
}

/// The bytes a card signature covers (see the module docs).
pub fn canonical_form(card: &Value) -> Result<Vec<u8>, AuthError> {
    let mut card = card.clone();
    if let Some(fields) = card.as_object_mut() {
        fields.remove(SIGNATURES_FIELD);
    }
    let cleaned = without_empty(card, 1)?.unwrap_or_else(|| Value::Object(Map::new()));
    serde_json_canonicalizer::to_vec(&cleaned).map_err(|e| AuthError::CardSignatureInvalid(e.to_string()))
}

/// `value` without empty strings, lists, objects and nulls, at any depth; `None` when nothing is left.
fn without_empty(value: Value, depth: usize) -> Result<Option<Value>, AuthError> {
    if matches!(value, Value::Array(_) | Value::Object(_)) && depth > CARD_DEPTH_MAX {
        return Err(AuthError::CardSignatureInvalid(format!("the card nests deeper than {CARD_DEPTH_MAX} levels")));
    }
    Ok(match value {
        Value::Null => None,
        Value::String(text) if text.is_empty() => None,
        Value::Array(items) => {
            let mut kept = Vec::with_capacity(items.len());
            for item in items {
                kept.extend(without_empty(item, depth + 1)?);
            }
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        Value::Object(fields) => {
            let mut kept = Map::new();
            for (name, field) in fields {
                if let Some(field) = without_empty(field, depth + 1)? {
                    kept.insert(name, field);
                }
            }
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        other => Some(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-256 key pair made for these tests (`openssl genpkey -algorithm EC -pkeyopt
    /// ec_paramgen_curve:P-256`), and an Ed25519 one.
    const ES256_PRIVATE: &str = include_str!("../testdata/card-es256.key.pem");
    const ES256_PUBLIC: &str = include_str!("../testdata/card-es256.pub.pem");
    const ED25519_PRIVATE: &str = include_str!("../testdata/card-ed25519.key.pem");
    const ED25519_PUBLIC: &str = include_str!("../testdata/card-ed25519.pub.pem");

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn card() -> Value {
        serde_json::json!({
            "name": "search_agent",
            "description": "Searches — über alles",
            "version": "1.0.0",
            "capabilities": {"streaming": true, "pushNotifications": false, "extensions": []},
            "skills": [{"id": "search", "name": "Search", "description": "", "tags": ["search"], "examples": []}],
            "defaultInputModes": ["text/plain"],
            "iconUrl": null,
            "score": 1.5e3
        })
    }

    fn pair(dir: &tempfile::TempDir, kid: &str, algorithm: KeyAlgorithm) -> (CardSigner, JwtPublicKey) {
        let (private, public) = match algorithm {
            KeyAlgorithm::ES256 => (ES256_PRIVATE, ES256_PUBLIC),
            KeyAlgorithm::EdDSA => (ED25519_PRIVATE, ED25519_PUBLIC),
        };
        let signer = CardSigner::load(&CardSigningKey {
            kid: kid.into(),
            algorithm,
            pem_file: write(dir, &format!("{kid}.key"), private),
        })
        .unwrap();
        (signer, JwtPublicKey { kid: Some(kid.into()), algorithm, pem_file: write(dir, &format!("{kid}.pub"), public) })
    }

    #[test]
    fn the_canonical_form_drops_empty_values_and_orders_keys() {
        let form = String::from_utf8(canonical_form(&card()).unwrap()).unwrap();
        assert_eq!(
            form,
            r#"{"capabilities":{"pushNotifications":false,"streaming":true},"defaultInputModes":["text/plain"],"description":"Searches — über alles","name":"search_agent","score":1500,"skills":[{"id":"search","name":"Search","tags":["search"]}],"version":"1.0.0"}"#
        );
        let mut signed = card();
        signed["signatures"] = serde_json::json!([{"protected": "x", "signature": "y"}]);
        assert_eq!(canonical_form(&signed).unwrap(), canonical_form(&card()).unwrap(), "signatures are not signed");
    }

    #[test]
    fn a_signed_card_verifies_with_the_trusted_key_and_fails_once_changed() {
        let dir = tempfile::tempdir().unwrap();
        for (kid, algorithm) in [("es-1", KeyAlgorithm::ES256), ("ed-1", KeyAlgorithm::EdDSA)] {
            let (signer, public) = pair(&dir, kid, algorithm);
            let verifier = CardVerifier::load(&[public]).unwrap();
            let mut signed = card();
            signer.sign(&mut signed).unwrap();
            assert_eq!(verifier.verify(&signed).unwrap(), kid);
            // Serializers that write empty fields or none sign and verify the same card.
            signed["iconUrl"] = Value::String(String::new());
            signed["capabilities"]["extensions"] = Value::Null;
            assert_eq!(verifier.verify(&signed).unwrap(), kid);

            let mut changed = signed.clone();
            changed["skills"][0]["name"] = "Exfiltrate".into();
            assert!(
                matches!(verifier.verify(&changed), Err(AuthError::CardSignatureInvalid(r)) if r.contains("does not match"))
            );
        }
    }

    #[test]
    fn unsigned_unknown_and_mismatched_signatures_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (es, es_public) = pair(&dir, "es-1", KeyAlgorithm::ES256);
        let (ed, _) = pair(&dir, "ed-1", KeyAlgorithm::EdDSA);
        let verifier = CardVerifier::load(std::slice::from_ref(&es_public)).unwrap();
        assert!(matches!(verifier.verify(&card()), Err(AuthError::CardUnsigned)));
        let mut by_stranger = card();
        ed.sign(&mut by_stranger).unwrap();
        assert!(
            matches!(verifier.verify(&by_stranger), Err(AuthError::CardSignatureInvalid(r)) if r.contains("no trusted key"))
        );
        // One good signature among bad ones is enough.
        es.sign(&mut by_stranger).unwrap();
        assert_eq!(verifier.verify(&by_stranger).unwrap(), "es-1");
        // A header claiming another algorithm for a trusted kid is refused before any check.
        let mut lying = card();
        lying["signatures"] = serde_json::json!([{
            "protected": URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","kid":"es-1"}"#),
            "signature": "AAAA"
        }]);
        assert!(
            matches!(verifier.verify(&lying), Err(AuthError::CardSignatureInvalid(r)) if r.contains("is a ES256 key"))
        );
        let nameless = JwtPublicKey { kid: None, ..es_public };
        assert!(matches!(CardVerifier::load(&[nameless]), Err(AuthError::Config(_))));
    }

    #[test]
    fn a_card_nested_without_bound_is_refused_not_recursed_into() {
        let mut deep = Value::Null;
        for _ in 0..(CARD_DEPTH_MAX + 10) {
            deep = serde_json::json!({ "x": [deep] });
        }
        let mut card = card();
        card["capabilities"]["extensions"] = serde_json::json!([{"uri": "urn:x", "params": deep}]);
        assert!(matches!(canonical_form(&card), Err(AuthError::CardSignatureInvalid(r)) if r.contains("deeper")));
    }
}
