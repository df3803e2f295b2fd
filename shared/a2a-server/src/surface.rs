//! The policy every A2A binding applies to a call, from plain inputs (the request's headers and
//! its [`Inbound`]), so that JSON-RPC, HTTP+JSON and gRPC refuse and serve alike:
//!
//! - **required extensions** (spec §3.3.4): a call that does not activate, in its `A2A-Extensions`
//!   header (or the 0.3 `X-A2A-Extensions`, which the SDK's 0.3 clients send), every extension
//!   the card marks `required` is refused `ExtensionSupportRequired` (-32008); the card's
//!   extensions a call activates are listed back in the answer's header;
//! - **streaming**: an agent whose card says `capabilities.streaming: false` refuses the
//!   streaming methods (`SendStreamingMessage`, `SubscribeToTask`; 0.3 `message/stream`,
//!   `tasks/resubscribe`) `UnsupportedOperation` (-32004), in the official SDK's words;
//! - **the authenticated extended card** (§3.1.11): served to authenticated callers only: with
//!   access control on, any caller the trust layer let in; with it off, a caller presenting the
//!   configured token. A card that does not announce it (`capabilities.extendedAgentCard`)
//!   answers `UnsupportedOperation` as §3.3.4 and the SDK do; one that announces it without one
//!   configured, `ExtendedAgentCardNotConfigured` (-32007).
//!
//! The bindings check the version first (each knows which one a request's form speaks), then call
//! [`Surface::check_call`] before anything else.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use mesh_auth::{AuthError, Caller};
use mesh_protocol::a2a::{EXTENSIONS_HEADER, EXTENSIONS_HEADER_0_3};
use mesh_protocol::jsonrpc::A2aErrorCode;

use crate::card::CardDocument;
use crate::{Failure, Inbound};

/// The official SDK's message for a streaming call to an agent that does not stream.
const STREAMING_UNSUPPORTED_MESSAGE: &str = "Streaming is not supported by the agent";
/// The official SDK's message for the extended card of an agent that does not announce one.
const EXTENDED_CARD_UNSUPPORTED_MESSAGE: &str = "The agent does not support authenticated extended cards";

/// What the A2A bindings of one agent serve and refuse, read from its card once at start.
#[derive(Debug, Clone)]
pub struct Surface {
    card: Arc<CardDocument>,
    /// The card's extensions, in card order: URI, and whether calls must activate it.
    extensions: Vec<(String, bool)>,
    /// The card does not say `streaming: false` (absent means the kit's default: it streams).
    streaming: bool,
    /// The card says `extendedAgentCard: true`.
    extended_announced: bool,
    extended: Option<ExtendedCard>,
}

/// The extended card, and the token that opens it when access control is off.
#[derive(Debug, Clone)]
struct ExtendedCard {
    document: Arc<CardDocument>,
    /// Hex SHA-256 of the token, compared in constant time with the presented credential's.
    token_sha256: Option<String>,
}

/// Why the extended card is not served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CardRefusal {
    /// The caller did not prove who it is: answered as the trust layer answers (HTTP 401, JSON-RPC
    /// `AUTH_REQUIRED_JSONRPC_CODE`; gRPC `UNAUTHENTICATED`), see [`mesh_server::auth::credential_refusal`].
    Unauthenticated(AuthError),
    /// An A2A error, in the binding's shape.
    Failure(Failure),
}

impl From<Failure> for CardRefusal {
    fn from(failure: Failure) -> Self {
        Self::Failure(failure)
    }
}

/// The extensions a call activated: those it asked for that the card declares, in card order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ActivatedExtensions {
    uris: Vec<String>,
    /// The call asked under the 0.3 header name, so the answer lists them under it too.
    legacy_header: bool,
}

impl ActivatedExtensions {
    /// Lists the activated extensions in `headers` (an answer's), as the extensions topic of the
    /// spec says an agent should; nothing when none was activated.
    pub(super) fn echo(&self, headers: &mut HeaderMap) {
        if self.uris.is_empty() {
            return;
        }
        // The URIs came in a header and equal the card's, so they make a header value again.
        let Ok(value) = HeaderValue::from_str(&self.uris.join(", ")) else { return };
        if self.legacy_header {
            headers.insert(HeaderName::from_static("x-a2a-extensions"), value.clone());
        }
        headers.insert(HeaderName::from_static("a2a-extensions"), value);
    }
}

impl From<CardDocument> for Surface {
    fn from(card: CardDocument) -> Self {
        Self::new(card)
    }
}

impl Surface {
    /// The surface the public `card` describes, with no extended card configured.
    pub fn new(card: CardDocument) -> Self {
        let capabilities = &card.card().capabilities;
        let extensions = capabilities.extensions.iter().map(|e| (e.uri.clone(), e.required)).collect();
        let streaming = capabilities.streaming != Some(false);
        let extended_announced = capabilities.extended_agent_card == Some(true);
        Self { card: Arc::new(card), extensions, streaming, extended_announced, extended: None }
    }

    /// Serves `document` as the extended card: to any caller the trust layer authenticated, or,
    /// with access control off, to one presenting `token` as `Authorization: Bearer` (or
    /// `X-API-Key`). Without a token and with access control off, nobody can read it.
    pub fn with_extended_card(mut self, document: CardDocument, token: Option<&str>) -> Self {
        let token_sha256 = token.map(mesh_auth::hash_api_key);
        self.extended = Some(ExtendedCard { document: Arc::new(document), token_sha256 });
        self
    }

    /// The public card.
    pub fn card(&self) -> &Arc<CardDocument> {
        &self.card
    }

    /// Admits a call (any method, any binding) by its `headers`: refused when it does not
    /// activate every required extension, or when it is a `streaming` one and the agent does not
    /// stream. Gives the extensions it activated, for [`ActivatedExtensions::echo`].
    pub(super) fn check_call(&self, headers: &HeaderMap, streaming: bool) -> Result<ActivatedExtensions, Failure> {
        let (requested, legacy_header) = requested_extensions(headers);
        let missing: Vec<&str> = self
            .extensions
            .iter()
            .filter(|(uri, required)| *required && !requested.contains(&uri.as_str()))
            .map(|(uri, _)| uri.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(Failure::new(
                A2aErrorCode::ExtensionSupportRequired,
                format!(
                    "this agent requires the extension(s) {}: activate them in the {EXTENSIONS_HEADER} header",
                    missing.join(", ")
                ),
            ));
        }
        if streaming && !self.streaming {
            return Err(Failure::new(A2aErrorCode::UnsupportedOperation, STREAMING_UNSUPPORTED_MESSAGE));
        }
        let uris = self
            .extensions
            .iter()
            .filter(|(uri, _)| requested.contains(&uri.as_str()))
            .map(|(uri, _)| uri.clone())
            .collect();
        Ok(ActivatedExtensions { uris, legacy_header })
    }

    /// The extended card for the caller of a request (`headers`, `inbound`), or why not.
    pub(super) fn extended_card(&self, headers: &HeaderMap, inbound: &Inbound) -> Result<&CardDocument, CardRefusal> {
        if !self.extended_announced {
            return Err(Failure::new(A2aErrorCode::UnsupportedOperation, EXTENDED_CARD_UNSUPPORTED_MESSAGE).into());
        }
        let Some(extended) = &self.extended else {
            return Err(Failure::standard(A2aErrorCode::ExtendedAgentCardNotConfigured).into());
        };
        match (&inbound.caller, &extended.token_sha256) {
            // The trust layer verified its credentials (and the route its role).
            (Caller::Authenticated(_), _) => Ok(&extended.document),
            // Access control is off: the configured token is the only credential.
            (Caller::Open, Some(token_sha256)) => {
                let presented = mesh_auth::presented_credential(headers)
                    .map_err(CardRefusal::Unauthenticated)?
                    .ok_or(CardRefusal::Unauthenticated(AuthError::Missing))?;
                match same_bytes(mesh_auth::hash_api_key(presented).as_bytes(), token_sha256.as_bytes()) {
                    true => Ok(&extended.document),
                    false => Err(CardRefusal::Unauthenticated(AuthError::Invalid(
                        "the credential does not open the extended agent card".into(),
                    ))),
                }
            }
            (Caller::Open | Caller::Anonymous, _) => Err(CardRefusal::Unauthenticated(AuthError::Missing)),
        }
    }
}

/// The extension URIs a request activates, from both header names (each possibly repeated, each
/// a comma-separated list), and whether it used the 0.3 name. Values that are not text are skipped.
fn requested_extensions(headers: &HeaderMap) -> (Vec<&str>, bool) {
    let mut uris = Vec::new();
    let mut legacy_header = false;
    for (name, legacy) in [(EXTENSIONS_HEADER, false), (EXTENSIONS_HEADER_0_3, true)] {
        for value in headers.get_all(name).iter().filter_map(|v| v.to_str().ok()) {
            legacy_header |= legacy;
            uris.extend(value.split(',').map(str::trim).filter(|uri| !uri.is_empty()));
        }
    }
    (uris, legacy_header)
}

/// Whether `a` equals `b`, in a time that depends on their lengths only, so that timing does not
/// tell a caller how much of a secret it guessed.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && std::hint::black_box(a.iter().zip(b).fold(0u8, |differ, (x, y)| differ | (x ^ y))) == 0
}

#[cfg(test)]
mod tests {
    use mesh_auth::Principal;
    use mesh_protocol::a2a::v1::AgentCard;
    use serde_json::json;

    use super::*;

    const TOKEN: &str = "the-extended-card-token";

    fn surface(capabilities: serde_json::Value) -> Surface {
        let card: AgentCard = serde_json::from_value(json!({
            "name": "a", "description": "d", "version": "1", "capabilities": capabilities,
            "defaultInputModes": [], "defaultOutputModes": [], "skills": []
        }))
        .unwrap();
        Surface::new(CardDocument::new(card).unwrap())
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    fn inbound(caller: Caller) -> Inbound {
        Inbound { scope: crate::unscoped_call(), caller }
    }

    #[test]
    fn a_call_must_activate_every_required_extension_and_gets_the_activated_ones_back() {
        let surface = surface(json!({"extensions": [
            {"uri": "urn:a", "required": true}, {"uri": "urn:b"}, {"uri": "urn:c", "required": true}
        ]}));
        let refused = surface.check_call(&headers(&[("a2a-extensions", "urn:c")]), false).unwrap_err();
        assert_eq!(refused.code, A2aErrorCode::ExtensionSupportRequired);
        assert!(refused.message.contains("urn:a") && !refused.message.contains("urn:c"), "{}", refused.message);
        // Repeated headers and lists, spaces, the 0.3 name and unknown URIs all count.
        let asked = headers(&[("a2a-extensions", " urn:c ,urn:x"), ("x-a2a-extensions", "urn:a,,urn:b")]);
        let activated = surface.check_call(&asked, true).unwrap();
        let mut answer = HeaderMap::new();
        activated.echo(&mut answer);
        assert_eq!(answer["a2a-extensions"], "urn:a, urn:b, urn:c", "the card's order, the unknown left out");
        assert_eq!(answer["x-a2a-extensions"], "urn:a, urn:b, urn:c", "under the name it was asked with too");
    }

    #[test]
    fn nothing_is_echoed_when_nothing_is_activated() {
        let activated = surface(json!({})).check_call(&headers(&[("a2a-extensions", "urn:x")]), false).unwrap();
        let mut answer = HeaderMap::new();
        activated.echo(&mut answer);
        assert!(answer.is_empty());
    }

    #[test]
    fn only_a_card_saying_streaming_false_refuses_streams() {
        for (capabilities, streams) in
            [(json!({}), true), (json!({"streaming": true}), true), (json!({"streaming": false}), false)]
        {
            let surface = surface(capabilities);
            assert!(surface.check_call(&HeaderMap::new(), false).is_ok());
            match surface.check_call(&HeaderMap::new(), true) {
                Ok(_) => assert!(streams),
                Err(failure) => {
                    assert!(!streams);
                    assert_eq!(failure.code, A2aErrorCode::UnsupportedOperation);
                    assert_eq!(failure.message, STREAMING_UNSUPPORTED_MESSAGE);
                }
            }
        }
    }

    #[test]
    fn the_extended_card_needs_the_flag_then_a_card_then_a_credential() {
        let none = HeaderMap::new();
        let refused = surface(json!({})).extended_card(&none, &inbound(Caller::Open)).unwrap_err();
        let unsupported = Failure::new(A2aErrorCode::UnsupportedOperation, EXTENDED_CARD_UNSUPPORTED_MESSAGE);
        assert_eq!(refused, CardRefusal::Failure(unsupported));
        let announced = surface(json!({"extendedAgentCard": true}));
        let refused = announced.extended_card(&none, &inbound(Caller::Open)).unwrap_err();
        assert_eq!(refused, CardRefusal::Failure(Failure::standard(A2aErrorCode::ExtendedAgentCardNotConfigured)));

        let extended = announced.card().as_ref().clone();
        let with_token = announced.clone().with_extended_card(extended.clone(), Some(TOKEN));
        let open = inbound(Caller::Open);
        let bearer = |token: &str| headers(&[("authorization", &format!("Bearer {token}"))]);
        assert!(with_token.extended_card(&bearer(TOKEN), &open).is_ok());
        assert!(with_token.extended_card(&headers(&[("x-api-key", TOKEN)]), &open).is_ok());
        assert_eq!(
            with_token.extended_card(&none, &open).unwrap_err(),
            CardRefusal::Unauthenticated(AuthError::Missing)
        );
        for wrong in [&bearer("the-extended-card-tokeN"), &bearer("x"), &headers(&[("authorization", TOKEN)])] {
            assert!(matches!(
                with_token.extended_card(wrong, &open),
                Err(CardRefusal::Unauthenticated(AuthError::Invalid(_)))
            ));
        }

        // Behind the trust layer, its verdict is the credential; without it nobody gets in.
        let principal = Principal { subject: "s".into(), tenant: "t".into(), roles: vec![mesh_auth::Role::User] };
        let without_token = announced.with_extended_card(extended, None);
        assert!(without_token.extended_card(&none, &inbound(Caller::Authenticated(principal))).is_ok());
        for caller in [Caller::Open, Caller::Anonymous] {
            assert_eq!(
                without_token.extended_card(&bearer(TOKEN), &inbound(caller)).unwrap_err(),
                CardRefusal::Unauthenticated(AuthError::Missing)
            );
        }
    }

    #[test]
    fn bytes_are_the_same_only_when_equal() {
        assert!(same_bytes(b"abc", b"abc"));
        assert!(same_bytes(b"", b""));
        assert!(!same_bytes(b"abc", b"abd"));
        assert!(!same_bytes(b"abc", b"ab"));
    }
}
