//! What the SciFact benchmarks start from.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use mesh_embedding::Encoder;
use mesh_protocol::agents::SearchRequest;
use search::eval::{Collection, load_beir, scifact_dir};
use search::{DenseConfig, SearchAgent, load_encoder};

/// Results asked of every query.
pub const TOP_K: usize = 10;

/// SciFact's folder, its test split and the embedding model; `None`, having said why, when
/// either is missing (the benchmark then has nothing to measure).
pub async fn scifact_with_model() -> Option<(PathBuf, Collection, Arc<Encoder>)> {
    let Some(dataset) = scifact_dir() else {
        eprintln!("skipping: SciFact not found (set MESH_SCIFACT_DIR or place it at ../shared/data/scifact)");
        return None;
    };
    let collection = load_beir(&dataset, "test").expect("SciFact loads");
    let (encoder, status) = load_encoder(&DenseConfig::default()).await;
    let Some(encoder) = encoder else {
        eprintln!("skipping: the dense profile is unavailable: {status:?}");
        return None;
    };
    Some((dataset, collection, encoder))
}

/// The latency of each of `queries` searched with `profiles` through the agent (top
/// [`TOP_K`]), in milliseconds.
pub async fn latencies_ms(agent: &SearchAgent, profiles: &[&str], queries: &[&str]) -> Vec<f64> {
    let request = SearchRequest {
        profiles: profiles.iter().map(|p| p.to_string()).collect(),
        top_k: Some(TOP_K),
        modality: None,
    };
    let mut latencies_ms = Vec::with_capacity(queries.len());
    for text in queries {
        let started = Instant::now();
        agent.search(text, &request, None, None).await.expect("search");
        latencies_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    latencies_ms
}

/// The resident memory of process `pid` (`self`: this one), in bytes; 0 when unreadable.
pub fn resident_bytes(pid: &str) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kib| kib * 1024)
}
