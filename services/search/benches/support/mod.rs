//! What the SciFact benchmarks start from.

use std::path::PathBuf;
use std::sync::Arc;

use mesh_embedding::Encoder;
use search::eval::{Collection, load_beir, scifact_dir};
use search::{DenseConfig, load_encoder};

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
