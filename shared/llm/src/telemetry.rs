//! Each call as OpenTelemetry's GenAI semantic conventions describe it: a `chat {model}` span
//! with the `gen_ai.*` attributes, and the client metrics (operation duration, token usage).

use std::time::Instant;

use tracing::Span;
use tracing::field::Empty;

use crate::chat::ChatAnswer;
use crate::error::LlmError;

/// `gen_ai.operation.name` of a chat-completions call.
const OPERATION_CHAT: &str = "chat";
/// `gen_ai.provider.name`: the wire protocol spoken, whoever serves it.
const PROVIDER_OPENAI: &str = "openai";
/// Seconds a call took, by service, operation, model and error type (empty when it succeeded).
pub const DURATION_METRIC: &str = "gen_ai_client_operation_duration_seconds";
/// Tokens used, by service, operation, model and token type (`input` or `output`): a counter, so
/// a rate reads as tokens per second.
pub const TOKEN_USAGE_METRIC: &str = "gen_ai_client_token_usage_total";

/// One call being observed.
#[derive(Debug)]
pub(crate) struct CallTelemetry {
    span: Span,
    started: Instant,
    model: String,
    service: String,
}

impl CallTelemetry {
    pub(crate) fn start(service: &str, model: &str, server: &url::Url, streaming: bool) -> Self {
        let span = tracing::info_span!(
            "gen_ai.chat",
            otel.name = format!("{OPERATION_CHAT} {model}"),
            otel.kind = "client",
            otel.status_code = Empty,
            gen_ai.operation.name = OPERATION_CHAT,
            gen_ai.provider.name = PROVIDER_OPENAI,
            gen_ai.request.model = model,
            gen_ai.request.stream = streaming,
            gen_ai.response.model = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            server.address = server.host_str(),
            server.port = server.port_or_known_default(),
            error.type = Empty,
        );
        Self { span, started: Instant::now(), model: model.to_owned(), service: service.to_owned() }
    }

    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Records the outcome on the span and in the metrics.
    pub(crate) fn finish(&self, outcome: Result<&ChatAnswer, &LlmError>) {
        let error_type = match outcome {
            Ok(answer) => {
                if let Some(model) = &answer.model {
                    self.span.record("gen_ai.response.model", model.as_str());
                }
                if let Some(reason) = &answer.finish_reason {
                    self.span.record("gen_ai.response.finish_reasons", reason.as_str());
                }
                if let Some(usage) = answer.usage {
                    self.span.record("gen_ai.usage.input_tokens", usage.input_tokens);
                    self.span.record("gen_ai.usage.output_tokens", usage.output_tokens);
                    for (token_type, count) in [("input", usage.input_tokens), ("output", usage.output_tokens)] {
                        metrics::counter!(
                            TOKEN_USAGE_METRIC,
                            mesh_telemetry::SERVICE_LABEL => self.service.clone(),
                            "gen_ai_operation_name" => OPERATION_CHAT,
                            "gen_ai_request_model" => self.model.clone(),
                            "gen_ai_token_type" => token_type,
                        )
                        .increment(count);
                    }
                }
                ""
            }
            Err(error) => {
                self.span.record("error.type", error.kind());
                self.span.record("otel.status_code", "ERROR");
                error.kind()
            }
        };
        metrics::histogram!(
            DURATION_METRIC,
            mesh_telemetry::SERVICE_LABEL => self.service.clone(),
            "gen_ai_operation_name" => OPERATION_CHAT,
            "gen_ai_request_model" => self.model.clone(),
            "error_type" => error_type,
        )
        .record(self.started.elapsed().as_secs_f64());
    }
}
