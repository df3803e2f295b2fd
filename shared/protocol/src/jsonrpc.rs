//! JSON-RPC 2.0 envelope, the A2A method names, and the A2A error catalogue with its two renderings:
//! the JSON-RPC error object and the HTTP+JSON (AIP-193 `google.rpc.Status`) error body. Both
//! renderings live here because they share one table of codes, reasons and statuses.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Number, Value, json};

/// The `"jsonrpc": "2.0"` member; anything else fails to parse, which is an invalid request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Version {
    #[default]
    #[serde(rename = "2.0")]
    V2,
}

/// A request id: string, number or `null`. Numbers keep their exact JSON form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    String(String),
    Number(Number),
    /// Answers to requests whose id could not be read (e.g. parse errors) carry `"id": null`.
    Null,
}

impl From<String> for Id {
    fn from(id: String) -> Self {
        Self::String(id)
    }
}

impl From<&str> for Id {
    fn from(id: &str) -> Self {
        Self::String(id.to_owned())
    }
}

impl From<i64> for Id {
    fn from(id: i64) -> Self {
        Self::Number(id.into())
    }
}

/// Deserializes a present field as `Some`, even when it is `null`, so that an absent member
/// (`None`) and an explicit `null` (`Some(null)`) stay distinct: a request without `id` is a
/// notification, and the 0.3 SDK writes `"data": null` in its errors.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// A JSON-RPC request. `params` stay raw JSON until the method is known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub jsonrpc: Version,
    /// `None` for a notification (no `id` member); `Some(Id::Null)` for an explicit `null`.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub id: Option<Id>,
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl Request {
    /// A call (not a notification) of `method`.
    pub fn new(id: impl Into<Id>, method: impl Into<String>, params: Option<Value>) -> Self {
        Self { jsonrpc: Version::V2, id: Some(id.into()), method: method.into(), params }
    }
}

/// What a response carries: exactly one of `result` and `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome<T> {
    Result(T),
    Error(ErrorObject),
}

/// A JSON-RPC response, generic over the result type so a caller can read typed results
/// (`Response<v1::SendMessageResponse>`) or raw JSON (the default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response<T = Value> {
    pub jsonrpc: Version,
    pub id: Id,
    #[serde(flatten)]
    pub outcome: Outcome<T>,
}

impl<T> Response<T> {
    /// A successful answer to request `id`.
    pub fn result(id: Id, result: T) -> Self {
        Self { jsonrpc: Version::V2, id, outcome: Outcome::Result(result) }
    }

    /// A failed answer to request `id` (`Id::Null` when the id could not be read).
    pub fn error(id: Id, error: ErrorObject) -> Self {
        Self { jsonrpc: Version::V2, id, outcome: Outcome::Error(error) }
    }

    /// The result, or the error the server answered with.
    pub fn into_result(self) -> Result<T, ErrorObject> {
        match self.outcome {
            Outcome::Result(result) => Ok(result),
            Outcome::Error(error) => Err(error),
        }
    }
}

/// The JSON-RPC `error` member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    /// 1.0: an array of `google.rpc` detail objects (see [`ErrorObject::with_error_info`]);
    /// 0.3: anything, `null` included.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error without `data`, as the SDK answers protocol-level failures (parse error, unknown
    /// method) in both versions.
    pub fn new(code: A2aErrorCode, message: impl Into<String>) -> Self {
        Self { code: code.code(), message: message.into(), data: None }
    }

    /// A 1.0 A2A error: `data` is `[ErrorInfo]` naming the reason, as the spec (§9.5) requires.
    pub fn with_error_info(code: A2aErrorCode, message: impl Into<String>) -> Self {
        Self { data: Some(Value::Array(code.error_details())), ..Self::new(code, message) }
    }

    /// A 0.3 A2A error as the SDK's 0.3 handler writes it, with an explicit `"data": null`.
    pub fn with_null_data(code: A2aErrorCode, message: impl Into<String>) -> Self {
        Self { data: Some(Value::Null), ..Self::new(code, message) }
    }

    /// An error in the shape each version's SDK writes it: protocol-level errors (parse error,
    /// invalid request, unknown method) without `data`; the others with `[ErrorInfo]` in 1.0
    /// (`v1`) and `"data": null` in 0.3.
    pub fn in_version(code: A2aErrorCode, message: impl Into<String>, v1: bool) -> Self {
        match code {
            A2aErrorCode::ParseError | A2aErrorCode::InvalidRequest | A2aErrorCode::MethodNotFound => {
                Self::new(code, message)
            }
            _ if v1 => Self::with_error_info(code, message),
            _ => Self::with_null_data(code, message),
        }
    }
}

/// Whether a `Content-Type` value declares JSON (`application/json` or any `+json` type), as a
/// JSON-RPC or HTTP+JSON request body must.
pub fn is_json_content_type(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// `@type` of a `google.rpc.ErrorInfo` detail.
pub const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
/// `domain` of every A2A `ErrorInfo`.
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";

/// Every error the A2A bindings define: the five standard JSON-RPC errors and the nine A2A ones
/// (spec §3.3.2, §5.4, §9.5), with their renderings in each binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum A2aErrorCode {
    ParseError,
    InvalidRequest,
    MethodNotFound,
    InvalidParams,
    InternalError,
    TaskNotFound,
    TaskNotCancelable,
    PushNotificationNotSupported,
    UnsupportedOperation,
    ContentTypeNotSupported,
    InvalidAgentResponse,
    ExtendedAgentCardNotConfigured,
    ExtensionSupportRequired,
    VersionNotSupported,
}

/// The properties of one [`A2aErrorCode`], kept in one row so the bindings cannot drift apart.
struct ErrorSpec {
    code: i64,
    message: &'static str,
    reason: &'static str,
    http_status: u16,
    grpc_status: &'static str,
}

impl A2aErrorCode {
    /// All codes, for lookups by number or reason.
    pub const ALL: [Self; 14] = [
        Self::ParseError,
        Self::InvalidRequest,
        Self::MethodNotFound,
        Self::InvalidParams,
        Self::InternalError,
        Self::TaskNotFound,
        Self::TaskNotCancelable,
        Self::PushNotificationNotSupported,
        Self::UnsupportedOperation,
        Self::ContentTypeNotSupported,
        Self::InvalidAgentResponse,
        Self::ExtendedAgentCardNotConfigured,
        Self::ExtensionSupportRequired,
        Self::VersionNotSupported,
    ];

    /// Codes and statuses from spec §5.4 / §9.5; messages are the SDK's where traffic showed
    /// them, the spec's otherwise; reasons are the SDK's, which follow the spec's rule (the error
    /// name in UPPER_SNAKE_CASE without `Error`), applied by us to `JSONParseError`.
    #[rustfmt::skip]
    const fn spec(self) -> ErrorSpec {
        let (code, message, reason, http_status, grpc_status) = match self {
            Self::ParseError => (-32700, "Invalid JSON payload", "JSON_PARSE", 400, "INVALID_ARGUMENT"),
            Self::InvalidRequest => (-32600, "Request payload validation error", "INVALID_REQUEST", 400, "INVALID_ARGUMENT"),
            Self::MethodNotFound => (-32601, "Method not found", "METHOD_NOT_FOUND", 404, "NOT_FOUND"),
            Self::InvalidParams => (-32602, "Invalid parameters", "INVALID_PARAMS", 400, "INVALID_ARGUMENT"),
            Self::InternalError => (-32603, "Internal error", "INTERNAL_ERROR", 500, "INTERNAL"),
            Self::TaskNotFound => (-32001, "Task not found", "TASK_NOT_FOUND", 404, "NOT_FOUND"),
            Self::TaskNotCancelable => (-32002, "Task cannot be canceled", "TASK_NOT_CANCELABLE", 409, "FAILED_PRECONDITION"),
            Self::PushNotificationNotSupported => (-32003, "Push notifications are not supported by the agent", "PUSH_NOTIFICATION_NOT_SUPPORTED", 400, "FAILED_PRECONDITION"),
            Self::UnsupportedOperation => (-32004, "This operation is not supported", "UNSUPPORTED_OPERATION", 400, "FAILED_PRECONDITION"),
            Self::ContentTypeNotSupported => (-32005, "Incompatible content types", "CONTENT_TYPE_NOT_SUPPORTED", 415, "INVALID_ARGUMENT"),
            Self::InvalidAgentResponse => (-32006, "Invalid agent response", "INVALID_AGENT_RESPONSE", 502, "INTERNAL"),
            Self::ExtendedAgentCardNotConfigured => (-32007, "Extended agent card is not configured", "EXTENDED_AGENT_CARD_NOT_CONFIGURED", 400, "FAILED_PRECONDITION"),
            Self::ExtensionSupportRequired => (-32008, "Extension support required", "EXTENSION_SUPPORT_REQUIRED", 400, "FAILED_PRECONDITION"),
            Self::VersionNotSupported => (-32009, "Version not supported", "VERSION_NOT_SUPPORTED", 400, "FAILED_PRECONDITION"),
        };
        ErrorSpec {
            code,
            message,
            reason,
            http_status,
            grpc_status,
        }
    }

    /// The JSON-RPC `error.code`.
    pub const fn code(self) -> i64 {
        self.spec().code
    }

    /// A generic `error.message` for when there is nothing more specific to say.
    pub const fn default_message(self) -> &'static str {
        self.spec().message
    }

    /// The `google.rpc.ErrorInfo` reason, e.g. `TASK_NOT_FOUND`.
    pub const fn reason(self) -> &'static str {
        self.spec().reason
    }

    /// HTTP status of the HTTP+JSON binding, e.g. 404 for `TaskNotFound`.
    pub const fn http_status(self) -> u16 {
        self.spec().http_status
    }

    /// gRPC status name, used as `error.status` in the HTTP+JSON body.
    pub const fn grpc_status(self) -> &'static str {
        self.spec().grpc_status
    }

    /// The code with this JSON-RPC number, if it is one of ours.
    pub fn from_code(code: i64) -> Option<Self> {
        Self::ALL.into_iter().find(|known| known.code() == code)
    }

    /// The code with this `ErrorInfo` reason, for reading HTTP+JSON errors, whose status alone
    /// is ambiguous (several errors share 400).
    pub fn from_reason(reason: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|known| known.reason() == reason)
    }

    /// `[ErrorInfo]` with this reason and empty metadata: 1.0 JSON-RPC `data` and HTTP+JSON
    /// `details`.
    pub fn error_details(self) -> Vec<Value> {
        vec![json!({
            "@type": ERROR_INFO_TYPE,
            "reason": self.reason(),
            "domain": ERROR_DOMAIN,
            "metadata": {},
        })]
    }
}

/// The SDK's message for [`A2aErrorCode::VersionNotSupported`], e.g. `A2A version '0.3' is not
/// supported by this handler. Expected version '1.0'.`, so clients see the same text from us.
pub fn version_not_supported_message(requested: &str, expected: &str) -> String {
    format!("A2A version '{requested}' is not supported by this handler. Expected version '{expected}'.")
}

/// Error body of the HTTP+JSON binding (AIP-193): `{"error": {"code": 404, "status": .., ..}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestErrorBody {
    pub error: RestError,
}

/// The `error` member of a [`RestErrorBody`] (a `google.rpc.Status` in JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestError {
    /// The HTTP status code, repeated in the body.
    pub code: u16,
    /// gRPC status name, e.g. `NOT_FOUND`.
    pub status: String,
    pub message: String,
    /// `google.rpc` detail objects (`ErrorInfo`, `BadRequest`, ...), each with an `@type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<Value>,
}

impl RestErrorBody {
    /// The body for `code`, with its HTTP status and an `ErrorInfo` detail.
    pub fn new(code: A2aErrorCode, message: impl Into<String>) -> Self {
        Self {
            error: RestError {
                code: code.http_status(),
                status: code.grpc_status().to_owned(),
                message: message.into(),
                details: code.error_details(),
            },
        }
    }
}

/// JSON-RPC method names.
pub mod method {
    /// A2A 1.0 methods (PascalCase, as the gRPC service).
    pub mod v1 {
        pub const SEND_MESSAGE: &str = "SendMessage";
        pub const SEND_STREAMING_MESSAGE: &str = "SendStreamingMessage";
        pub const GET_TASK: &str = "GetTask";
        pub const LIST_TASKS: &str = "ListTasks";
        pub const CANCEL_TASK: &str = "CancelTask";
        pub const SUBSCRIBE_TO_TASK: &str = "SubscribeToTask";
        pub const CREATE_TASK_PUSH_NOTIFICATION_CONFIG: &str = "CreateTaskPushNotificationConfig";
        pub const GET_TASK_PUSH_NOTIFICATION_CONFIG: &str = "GetTaskPushNotificationConfig";
        pub const LIST_TASK_PUSH_NOTIFICATION_CONFIGS: &str = "ListTaskPushNotificationConfigs";
        pub const DELETE_TASK_PUSH_NOTIFICATION_CONFIG: &str = "DeleteTaskPushNotificationConfig";
        pub const GET_EXTENDED_AGENT_CARD: &str = "GetExtendedAgentCard";
    }

    /// A2A 0.3 methods (`category/action`). 0.3 has no task listing.
    pub mod v03 {
        pub const MESSAGE_SEND: &str = "message/send";
        pub const MESSAGE_STREAM: &str = "message/stream";
        pub const TASKS_GET: &str = "tasks/get";
        pub const TASKS_CANCEL: &str = "tasks/cancel";
        pub const TASKS_RESUBSCRIBE: &str = "tasks/resubscribe";
        pub const TASKS_PUSH_NOTIFICATION_CONFIG_SET: &str = "tasks/pushNotificationConfig/set";
        pub const TASKS_PUSH_NOTIFICATION_CONFIG_GET: &str = "tasks/pushNotificationConfig/get";
        pub const TASKS_PUSH_NOTIFICATION_CONFIG_LIST: &str = "tasks/pushNotificationConfig/list";
        pub const TASKS_PUSH_NOTIFICATION_CONFIG_DELETE: &str = "tasks/pushNotificationConfig/delete";
        pub const AGENT_GET_AUTHENTICATED_EXTENDED_CARD: &str = "agent/getAuthenticatedExtendedCard";
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_version_shapes_an_error_as_its_sdk_does() {
        // Protocol-level errors carry no `data` in either version.
        for code in [A2aErrorCode::ParseError, A2aErrorCode::InvalidRequest, A2aErrorCode::MethodNotFound] {
            for v1 in [true, false] {
                assert_eq!(ErrorObject::in_version(code, "m", v1), ErrorObject::new(code, "m"), "{code:?} v1={v1}");
            }
        }
        let code = A2aErrorCode::TaskNotFound;
        let v1 = ErrorObject::in_version(code, "gone", true);
        assert_eq!(v1.data, Some(Value::Array(code.error_details())));
        let v03 = ErrorObject::in_version(code, "gone", false);
        assert_eq!(v03.data, Some(Value::Null));
        assert_eq!((v1.code, v03.code, v03.message.as_str()), (-32001, -32001, "gone"));
    }

    #[test]
    fn json_content_types_are_application_json_and_any_plus_json() {
        for json in
            ["application/json", "application/json; charset=utf-8", " Application/JSON ", "application/a2a+json"]
        {
            assert!(is_json_content_type(json), "{json}");
        }
        for other in ["", "text/plain", "application/jsonl", "text/json", "application/x-www-form-urlencoded"] {
            assert!(!is_json_content_type(other), "{other}");
        }
    }
}
