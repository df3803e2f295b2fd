//! Seed 003's response envelope in one shape, whatever the outcome: `status` SUCCESS | PARTIAL |
//! ERROR | TIMEOUT, `error_code`, `error_message`, `warnings`, `confidence_level`,
//! `metadata.processing_time_ms` and the echoed `request_id`.
//!
//! The seed format carries it spread over [`TaskResponse`] (answers) and [`ErrorBody`] (failures);
//! the A2A bindings carry it as task metadata under [`ENVELOPE_METADATA_KEY`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{ErrorBody, FailureStatus};
use crate::seed::{ConfidenceLevel, ResponseStatus, TaskResponse};

/// Key of the envelope inside A2A task metadata.
pub const ENVELOPE_METADATA_KEY: &str = "urn:a2a-mesh:envelope:v1";

/// Every outcome word of seed 003.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EnvelopeStatus {
    Success,
    Partial,
    Error,
    Timeout,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvelopeMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processing_time_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseEnvelope {
    pub status: EnvelopeStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence_level: Option<ConfidenceLevel>,
    pub metadata: EnvelopeMetadata,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl From<&TaskResponse> for ResponseEnvelope {
    fn from(response: &TaskResponse) -> Self {
        Self {
            status: match response.status {
                ResponseStatus::Success => EnvelopeStatus::Success,
                ResponseStatus::Partial => EnvelopeStatus::Partial,
            },
            error_code: None,
            error_message: None,
            warnings: response.warnings.clone(),
            confidence_level: Some(
                response.confidence_level.unwrap_or_else(|| ConfidenceLevel::for_status(response.status)),
            ),
            metadata: EnvelopeMetadata { processing_time_ms: Some(response.metadata.processing_time_ms) },
            request_id: response.request_id.clone().or_else(|| response.metadata.request_id.clone()),
        }
    }
}

impl From<&ErrorBody> for ResponseEnvelope {
    fn from(error: &ErrorBody) -> Self {
        Self {
            status: match error.status {
                FailureStatus::Error => EnvelopeStatus::Error,
                FailureStatus::Timeout => EnvelopeStatus::Timeout,
            },
            error_code: Some(error.error_code.clone()),
            error_message: Some(error.error_message.clone()),
            warnings: Vec::new(),
            confidence_level: None,
            metadata: EnvelopeMetadata { processing_time_ms: None },
            request_id: error.request_id.clone(),
        }
    }
}

impl ResponseEnvelope {
    /// Puts the envelope into A2A task metadata, under [`ENVELOPE_METADATA_KEY`].
    pub fn write_metadata(&self, metadata: &mut Map<String, Value>) {
        if let Ok(value) = serde_json::to_value(self) {
            metadata.insert(ENVELOPE_METADATA_KEY.to_owned(), value);
        }
    }

    /// The envelope carried in A2A task metadata, if any.
    pub fn from_metadata(metadata: &Map<String, Value>) -> Result<Option<Self>, serde_json::Error> {
        metadata.get(ENVELOPE_METADATA_KEY).map(Self::deserialize).transpose()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::seed::{Message, Part, ResponseMetadata, Role};

    fn partial_answer() -> TaskResponse {
        TaskResponse {
            id: "t1".into(),
            status: ResponseStatus::Partial,
            confidence_level: None,
            request_id: Some("req-7".into()),
            messages: vec![Message { role: Role::Agent, parts: vec![Part::Data { data: json!({}) }] }],
            warnings: vec!["entity_extraction unavailable".into()],
            metadata: ResponseMetadata { agent: "orchestrator".into(), processing_time_ms: 12.5, request_id: None },
        }
    }

    #[test]
    fn an_answer_becomes_the_seed_003_envelope() {
        let envelope = ResponseEnvelope::from(&partial_answer());
        assert_eq!(
            serde_json::to_value(&envelope).unwrap(),
            json!({
                "status": "PARTIAL",
                "warnings": ["entity_extraction unavailable"],
                "confidence_level": "MEDIUM",
                "metadata": {"processing_time_ms": 12.5},
                "request_id": "req-7"
            })
        );
    }

    #[test]
    fn a_failure_becomes_the_seed_003_envelope() {
        let mut body = ErrorBody::new(FailureStatus::Timeout, "AGENT_TIMEOUT", "no answer in 50 ms");
        body.request_id = Some("req-8".into());
        let envelope = ResponseEnvelope::from(&body);
        assert_eq!(envelope.status, EnvelopeStatus::Timeout);
        assert_eq!(envelope.error_code.as_deref(), Some("AGENT_TIMEOUT"));
        assert_eq!(envelope.request_id.as_deref(), Some("req-8"));
        assert_eq!(envelope.confidence_level, None);
    }

    #[test]
    fn the_envelope_round_trips_through_a2a_task_metadata() {
        let envelope = ResponseEnvelope::from(&partial_answer());
        let mut metadata = Map::new();
        envelope.write_metadata(&mut metadata);
        assert_eq!(metadata[ENVELOPE_METADATA_KEY]["status"], "PARTIAL");
        assert_eq!(ResponseEnvelope::from_metadata(&metadata).unwrap(), Some(envelope));
        assert_eq!(ResponseEnvelope::from_metadata(&Map::new()).unwrap(), None);
        metadata.insert(ENVELOPE_METADATA_KEY.into(), json!({"status": "MAYBE"}));
        assert!(ResponseEnvelope::from_metadata(&metadata).is_err());
    }
}
