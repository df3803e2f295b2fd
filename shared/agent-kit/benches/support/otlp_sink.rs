//! An OTLP/HTTP trace sink for the benchmarks that measure the cost of tracing (included by
//! path from `send_message` and the suite's `query_flow`).

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::routing::post;
use bytes::Bytes;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A local OTLP/HTTP trace receiver for the traced servers of a benchmark: answers every export
/// `200` and counts it, so the exporters do their whole work (encoding, batching, sending) and
/// the run can show they did.
pub struct OtlpSink {
    pub url: String,
    exports: std::sync::Arc<std::sync::atomic::AtomicU64>,
    bytes: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl OtlpSink {
    pub async fn start() -> Result<Self, BoxError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        let (exports, bytes) = (std::sync::Arc::new(AtomicU64::new(0)), std::sync::Arc::new(AtomicU64::new(0)));
        let (counted, sized) = (exports.clone(), bytes.clone());
        let router = Router::new().route(
            "/v1/traces",
            post(move |body: Bytes| {
                counted.fetch_add(1, Ordering::Relaxed);
                sized.fetch_add(body.len() as u64, Ordering::Relaxed);
                async { [(CONTENT_TYPE, "application/x-protobuf")] }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok(Self { url, exports, bytes })
    }

    pub fn received(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering;
        (self.exports.load(Ordering::Relaxed), self.bytes.load(Ordering::Relaxed))
    }
}
