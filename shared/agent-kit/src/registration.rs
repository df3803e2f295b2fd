use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use mesh_client::{ClientError, RegistryClient};
use mesh_protocol::registry::Registration;

/// First wait after a failed registration attempt.
const REGISTER_RETRY_DELAY_MIN_MS: u64 = 200;
/// Longest wait between attempts while the registry is down.
const REGISTER_RETRY_DELAY_MAX_MS: u64 = 10_000;

/// Registers with the registry, retrying with exponential backoff and jitter while it is
/// unreachable or failing (5xx), for as long as it takes. A refusal (4xx: the registration itself
/// is wrong) is final and returned, since retrying cannot change it.
pub async fn register_until_accepted(
    registry: &RegistryClient,
    registration: &Registration,
) -> Result<(), ClientError> {
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(REGISTER_RETRY_DELAY_MIN_MS))
        .with_max_delay(Duration::from_millis(REGISTER_RETRY_DELAY_MAX_MS))
        .with_jitter()
        .without_max_times();
    (|| registry.register(registration))
        .retry(backoff)
        .when(is_transient)
        .notify(|error, wait| {
            tracing::warn!(agent = %registration.name, registry = registry.base_url(), %error, retry_in_ms = wait.as_millis(), "registration failed; retrying");
        })
        .await?;
    tracing::debug!(agent = %registration.name, registry = registry.base_url(), "registered");
    Ok(())
}

/// Removes this instance (`name` at `url`) from the registry, once, within the client's timeout.
/// An agent already gone, or whose name another instance has taken over since, counts as done.
pub async fn deregister(registry: &RegistryClient, name: &str, url: &str) {
    match registry.deregister(name, Some(url)).await {
        Ok(_) | Err(ClientError::Status { status: 404 | 409, .. }) => tracing::info!(agent = name, "deregistered"),
        Err(error) => tracing::warn!(agent = name, %error, "deregistration failed"),
    }
}

fn is_transient(error: &ClientError) -> bool {
    match error {
        ClientError::Transport { .. } | ClientError::Decode { .. } => true,
        // The registry could not fetch our card: we may not be reachable yet (a name not yet in
        // DNS, a slow start), which time can fix; other refusals cannot be fixed by retrying.
        ClientError::Status { status: 422, body: Some(body), .. } => body.error_code == "AGENT_CARD_UNREACHABLE",
        ClientError::Status { status, .. } => *status >= 500 || *status == 429 || *status == 408,
        ClientError::InvalidUrl { .. } | ClientError::InvalidCredential => false,
    }
}

#[cfg(test)]
mod tests {
    use mesh_client::TransportError;
    use mesh_protocol::error::{ErrorBody, FailureStatus};

    use super::*;

    fn status(status: u16, error_code: Option<&str>) -> ClientError {
        let body = error_code.map(|code| ErrorBody {
            status: FailureStatus::Error,
            error_code: code.to_owned(),
            error_message: "refused".into(),
            request_id: None,
        });
        ClientError::Status { url: "http://registry/register".into(), status, body }
    }

    #[test]
    fn only_what_time_can_fix_is_retried() {
        let url = || "http://registry/register".to_owned();
        let cases = [
            (
                "no connection",
                ClientError::Transport { url: url(), source: TransportError::Connect("refused".into()) },
                true,
            ),
            ("an answer not understood", ClientError::Decode { url: url(), reason: "not JSON".into() }, true),
            ("our card not reachable yet", status(422, Some("AGENT_CARD_UNREACHABLE")), true),
            ("another invalid registration", status(422, Some("REGISTRATION_INVALID")), false),
            ("a 422 without a body", status(422, None), false),
            ("500", status(500, None), true),
            ("503", status(503, None), true),
            ("429", status(429, None), true),
            ("408", status(408, None), true),
            ("400", status(400, None), false),
            ("401", status(401, None), false),
            ("404", status(404, None), false),
            ("499", status(499, None), false),
            ("an invalid URL", ClientError::InvalidUrl { url: url(), reason: "no host".into() }, false),
            ("an invalid credential", ClientError::InvalidCredential, false),
        ];
        for (what, error, transient) in cases {
            assert_eq!(is_transient(&error), transient, "{what}");
        }
    }
}
