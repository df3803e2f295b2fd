//! The A2A data model in its two wire spellings.
//!
//! - [`v1`]: A2A 1.0 (ProtoJSON: camelCase fields, `TASK_STATE_*` / `ROLE_*` enums, `oneof` as a
//!   single named key). The server's one internal model.
//! - [`v03`]: A2A 0.3 (`"kind"` discriminators, kebab-case states), plus lossless-as-possible
//!   conversions to and from [`v1`], so 0.3 clients are served from the same model.

pub mod v03;
pub mod v03_rest;
pub mod v1;

/// Header (service parameter) carrying the protocol version a client speaks. Per the 1.0 spec a
/// request without it is a 0.3 request, which the SDK answers with `VersionNotSupported` on 1.0
/// methods.
pub const VERSION_HEADER: &str = "A2A-Version";

/// Header (service parameter) listing the extensions a client activates for a request, as
/// comma-separated URIs; an agent's answer lists under it the ones it activated (spec §3.2.6).
pub const EXTENSIONS_HEADER: &str = "A2A-Extensions";

/// The 0.3 name of [`EXTENSIONS_HEADER`], which 0.3 clients (the SDK's 0.3 transports) send.
pub const EXTENSIONS_HEADER_0_3: &str = "X-A2A-Extensions";

/// Value of [`VERSION_HEADER`], `protocolVersion` and `AgentInterface.protocolVersion` for 1.0.
pub const PROTOCOL_VERSION_1_0: &str = "1.0";

/// Value of [`VERSION_HEADER`], `protocolVersion` and `AgentInterface.protocolVersion` for 0.3.
pub const PROTOCOL_VERSION_0_3: &str = "0.3";

/// Content type of HTTP+JSON binding responses (`application/a2a+json`, spec §14.1).
pub const MEDIA_TYPE: &str = "application/a2a+json";

/// Names of the standard protocol bindings, as used in `AgentInterface.protocolBinding` (1.0) and
/// `preferredTransport` / `additionalInterfaces[].transport` (0.3). The field is an open string,
/// so these are constants rather than a closed enum.
pub mod binding {
    /// JSON-RPC 2.0 over HTTP, with Server-Sent Events for streaming.
    pub const JSONRPC: &str = "JSONRPC";
    /// The RESTful HTTP+JSON binding (`/message:send`, `/tasks/{id}`, ...).
    pub const HTTP_JSON: &str = "HTTP+JSON";
    /// gRPC.
    pub const GRPC: &str = "GRPC";
}
