//! The one JSON body every HTTP error of the mesh carries, so a client never meets a bare status.

use serde::{Deserialize, Serialize};

/// Outcome word of a failed request, following the inter-agent contract of seed 003.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureStatus {
    /// The request failed.
    Error,
    /// The request ran out of time; kept apart from `Error` so callers never match on message text.
    Timeout,
}

/// Body of every non-2xx answer: `{"status":"ERROR","error_code":"AGENT_NOT_FOUND","error_message":"..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub status: FailureStatus,
    /// Machine-readable code in `CATEGORY_SPECIFIC_ERROR` form.
    pub error_code: String,
    /// Human-readable explanation naming the offending input.
    pub error_message: String,
    /// The `x-request-id` of the failed request, for correlating with logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl ErrorBody {
    pub fn new(status: FailureStatus, error_code: impl Into<String>, error_message: impl Into<String>) -> Self {
        Self { status, error_code: error_code.into(), error_message: error_message.into(), request_id: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_in_the_seed_003_shape() {
        let body = ErrorBody::new(FailureStatus::Timeout, "AGENT_TIMEOUT", "no answer in 5000 ms");
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"status":"TIMEOUT","error_code":"AGENT_TIMEOUT","error_message":"no answer in 5000 ms"})
        );
        assert_eq!(serde_json::from_value::<ErrorBody>(json).unwrap(), body);
    }
}
