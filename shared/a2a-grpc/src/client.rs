//! A client of the A2A gRPC binding that speaks ProtoJSON: requests and answers are the same
//! JSON documents as in the JSON-RPC binding's 1.0 methods. For the mesh's tests and benchmarks.

use std::time::Duration;

use futures::{Stream, StreamExt};
use http::uri::PathAndQuery;
use serde_json::Value;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

use crate::{BytesCodec, MethodDescriptor, SERVICE, WireError, decode_json, encode_json};

/// How long connecting may take.
const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// How long a call may take to be answered (for a stream: to start).
const CALL_TIMEOUT_MS: u64 = 30_000;

#[derive(Debug, Clone)]
pub struct GrpcClient {
    inner: tonic::client::Grpc<Channel>,
}

impl GrpcClient {
    /// Connects to an agent's gRPC binding at `address` (`http://host:port`; a bare `host:port`,
    /// as cards announce it, is taken as plaintext HTTP/2).
    pub async fn connect(address: &str) -> Result<Self, WireError> {
        let uri = if address.contains("://") { address.to_owned() } else { format!("http://{address}") };
        let invalid = |e: &dyn std::fmt::Display| WireError::Address(address.to_owned(), e.to_string());
        let channel = Endpoint::from_shared(uri)
            .map_err(|e| invalid(&e))?
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
            .timeout(Duration::from_millis(CALL_TIMEOUT_MS))
            .connect()
            .await
            .map_err(|e| invalid(&e))?;
        Ok(Self { inner: tonic::client::Grpc::new(channel) })
    }

    /// Calls unary `method` with a ProtoJSON request and `metadata` (names in lower case, e.g.
    /// `a2a-version`); the answer in ProtoJSON.
    pub async fn unary(&mut self, method: &str, request: Value, metadata: &[(&str, &str)]) -> Result<Value, Status> {
        let (descriptor, path, request) = prepare(method, request, metadata)?;
        self.ready().await?;
        let answer = self.inner.unary(request, path, BytesCodec).await?.into_inner();
        decode_json(&descriptor.output(), answer).map_err(|e| Status::internal(e.to_string()))
    }

    /// Calls server-streaming `method`; each event in ProtoJSON, then the stream's end (or its
    /// final error status).
    pub async fn stream(
        &mut self,
        method: &str,
        request: Value,
        metadata: &[(&str, &str)],
    ) -> Result<impl Stream<Item = Result<Value, Status>> + Send + 'static, Status> {
        let (descriptor, path, request) = prepare(method, request, metadata)?;
        self.ready().await?;
        let events = self.inner.server_streaming(request, path, BytesCodec).await?.into_inner();
        let output = descriptor.output();
        Ok(events.map(move |event| {
            event.and_then(|bytes| decode_json(&output, bytes).map_err(|e| Status::internal(e.to_string())))
        }))
    }

    async fn ready(&mut self) -> Result<(), Status> {
        self.inner.ready().await.map_err(|e| Status::unavailable(format!("the agent is not reachable: {e}")))
    }
}

/// The method's descriptor, path and encoded request with its metadata.
fn prepare(
    method: &str,
    request: Value,
    metadata: &[(&str, &str)],
) -> Result<(MethodDescriptor, PathAndQuery, Request<bytes::Bytes>), Status> {
    let descriptor =
        crate::method(method).ok_or_else(|| Status::unimplemented(format!("{SERVICE} has no method {method:?}")))?;
    let path = PathAndQuery::try_from(format!("/{SERVICE}/{method}")).map_err(|e| Status::internal(e.to_string()))?;
    let bytes = encode_json(&descriptor.input(), request).map_err(|e| Status::invalid_argument(e.to_string()))?;
    let mut request = Request::new(bytes);
    for (name, value) in metadata {
        let name = MetadataKey::from_bytes(name.as_bytes()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let value = MetadataValue::try_from(*value).map_err(|e| Status::invalid_argument(e.to_string()))?;
        request.metadata_mut().insert(name, value);
    }
    Ok((descriptor, path, request))
}
