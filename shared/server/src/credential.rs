//! The credential an agent presents to the registry and to other agents, kept fresh: a token it
//! mints for itself is renewed halfway through its life, and a credential file is re-read, so a
//! deployment can rotate it (as Kubernetes does with projected service-account tokens) and no
//! credential needs to live long.

use std::time::Duration;

use mesh_auth::{AuthConfig, AuthError, Role};
use mesh_client::{HttpClient, RenewableBearer, WeakBearer};

use crate::error::ServerError;

/// Milliseconds between two reads of a credential file.
const CREDENTIAL_FILE_RECHECK_MS: u64 = 30_000;
/// Shortest renewal interval of a self-issued token, whatever its configured life.
const SELF_ISSUED_RENEW_MS_MIN: u64 = 1_000;

/// Where a renewal gets the credential from: a new token, or the file's contents.
type NextCredential = Box<dyn Fn() -> Result<Option<String>, AuthError> + Send>;

/// `http` presenting the credential `auth` gives the agent named `name`: a token it mints for
/// itself (`credential_self_issued_ttl_s`), renewed halfway through its life; the contents of
/// `credential_file`, re-read every [`CREDENTIAL_FILE_RECHECK_MS`]; or the fixed `credential`.
/// The renewal stops once no client presents the credential any more.
pub fn with_own_credential(http: &HttpClient, auth: &AuthConfig, name: &str) -> Result<HttpClient, ServerError> {
    Ok(match own_credential(auth, name, &[Role::Agent])? {
        Some(bearer) => http.with_renewable_bearer(&bearer),
        None => http.clone(),
    })
}

/// The credential [`with_own_credential`] presents, kept fresh the same way, for a server that
/// sends some requests itself (the gateway streams bodies); a token it mints for itself holds
/// `roles`. `None` when `auth` names no credential.
pub fn own_credential(auth: &AuthConfig, name: &str, roles: &[Role]) -> Result<Option<RenewableBearer>, ServerError> {
    let (credential, renew_every, next): (_, _, NextCredential) =
        match (auth.credential_self_issued_ttl_s, &auth.credential_file) {
            (Some(ttl_s), _) => {
                let (auth, name, roles) = (auth.clone(), name.to_owned(), roles.to_vec());
                let mint = move || auth.mint(&name, "", &roles, ttl_s);
                let Some(token) = mint()? else {
                    return Err(AuthError::Config(
                        "credential_self_issued_ttl_s needs jwt_hs256_secret (or its file) to sign with".into(),
                    )
                    .into());
                };
                let half_life = Duration::from_millis((ttl_s * 1_000 / 2).max(SELF_ISSUED_RENEW_MS_MIN));
                (token, half_life, Box::new(mint))
            }
            (None, Some(_)) => {
                let auth = auth.clone();
                let read = move || auth.outbound_credential();
                let credential =
                    read()?.ok_or_else(|| AuthError::Config("the credential file gave no credential".into()))?;
                (credential, Duration::from_millis(CREDENTIAL_FILE_RECHECK_MS), Box::new(read))
            }
            (None, None) => {
                return match auth.outbound_credential()? {
                    Some(credential) => Ok(Some(RenewableBearer::new(&credential)?)),
                    None => Ok(None),
                };
            }
        };
    let bearer = RenewableBearer::new(&credential)?;
    tokio::spawn(renew(bearer.downgrade(), credential, renew_every, next));
    Ok(Some(bearer))
}

/// Every `every`, asks `next` for the credential and presents it when it changed, until nobody
/// holds `bearer`. A failed renewal keeps the current credential and is tried again next time.
async fn renew(bearer: WeakBearer, mut current: String, every: Duration, next: NextCredential) {
    loop {
        tokio::time::sleep(every).await;
        let Some(bearer) = bearer.upgrade() else { return };
        match next() {
            Ok(Some(credential)) if credential != current => match bearer.renew(&credential) {
                Ok(()) => {
                    tracing::debug!("own credential renewed");
                    current = credential;
                }
                Err(error) => tracing::warn!(%error, "the renewed credential cannot be sent; keeping the current one"),
            },
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "could not renew the own credential; keeping the current one"),
        }
    }
}
