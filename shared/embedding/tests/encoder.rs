//! The encoder against sentence-transformers' own outputs for all-MiniLM-L6-v2. Uses the model
//! in `MESH_EMBEDDING_MODEL_DIR` or the default cache folder, downloading it there when absent;
//! skips with a message on a machine that can neither find nor download it, and fails under CI.

use std::path::PathBuf;

use mesh_embedding::{Encoder, default_model_dir, dot, ensure_model};

async fn encoder() -> Option<Encoder> {
    let dir = std::env::var_os("MESH_EMBEDDING_MODEL_DIR").map(PathBuf::from).unwrap_or_else(default_model_dir);
    let found = ensure_model(&dir, "python3")
        .await
        .map_err(|error| format!("none at {} and none could be downloaded: {error}", dir.display()));
    mesh_test_support::require("the embedding model", found)?;
    Some(Encoder::load(&dir).expect("the model loads"))
}

#[tokio::test]
async fn reproduces_sentence_transformers_similarities() {
    let Some(encoder) = encoder().await else { return };
    assert_eq!(encoder.dimensions(), 384);
    let vectors = encoder
        .encode(&["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."])
        .unwrap();
    let (weather, sunny, stadium) = (&vectors[0..384], &vectors[384..768], &vectors[768..1152]);
    let close = dot(weather, sunny);
    let far = dot(weather, stadium);
    assert!((close - 0.666).abs() <= 0.005, "cosine(weather, sunny) = {close}");
    assert!((far - 0.105).abs() <= 0.005, "cosine(weather, stadium) = {far}");
    for row in vectors.chunks(384) {
        assert!((dot(row, row) - 1.0).abs() < 1e-4, "unit length");
    }
}

#[tokio::test]
async fn batching_and_padding_do_not_change_a_vector() {
    let Some(encoder) = encoder().await else { return };
    let short = "Robots playing soccer.";
    let long = "A much longer sentence about humanoid robots that play football in a league, \
                which forces the short one in the same batch to be padded.";
    let alone = encoder.encode_one(short).unwrap();
    let batched = encoder.encode(&[long, short]).unwrap();
    assert!(dot(&alone, &batched[384..]) > 0.9999, "padding leaked into the mean");
    assert!(encoder.encode(&[]).unwrap().is_empty());
}

#[tokio::test]
async fn long_texts_are_truncated_not_refused() {
    let Some(encoder) = encoder().await else { return };
    let long = "protein folding ".repeat(2000);
    let vector = encoder.encode_one(&long).unwrap();
    assert_eq!(vector.len(), 384);
}
