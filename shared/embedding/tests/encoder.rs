//! The encoder against sentence-transformers' own outputs for all-MiniLM-L6-v2, on both engines.
//! Uses the model in `MESH_EMBEDDING_MODEL_DIR` or the default cache folder and the ONNX Runtime
//! library in the default cache folder, downloading them there when absent; skips with a message
//! on a machine that can neither find nor download them, and fails under CI.

use std::path::PathBuf;

use mesh_embedding::{
    Encoder, Engine, default_model_dir, default_onnx_runtime_dir, dot, ensure_model, ensure_onnx_runtime,
};

async fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("MESH_EMBEDDING_MODEL_DIR").map(PathBuf::from).unwrap_or_else(default_model_dir);
    let found = ensure_model(&dir, "python3")
        .await
        .map_err(|error| format!("none at {} and none could be downloaded: {error}", dir.display()));
    mesh_test_support::require("the embedding model", found)?;
    Some(dir)
}

/// The model on candle, and on ONNX Runtime when its library can be had (always under CI).
async fn encoders() -> Vec<Encoder> {
    let Some(dir) = model_dir().await else { return Vec::new() };
    let mut encoders = vec![Encoder::load(&dir).expect("the model loads on candle")];
    let runtime_dir = default_onnx_runtime_dir();
    let library = ensure_onnx_runtime(&runtime_dir, "python3")
        .await
        .map_err(|error| format!("none at {} and none could be downloaded: {error}", runtime_dir.display()));
    if let Some(library) = mesh_test_support::require("the ONNX Runtime library", library) {
        let encoder = Encoder::load_onnx(&dir, &library, 2).expect("the model loads on ONNX Runtime");
        assert_eq!(encoder.engine(), Engine::Onnx);
        encoders.push(encoder);
    }
    encoders
}

#[tokio::test]
async fn reproduces_sentence_transformers_similarities() {
    for encoder in encoders().await {
        assert_eq!(encoder.dimensions(), 384);
        let vectors = encoder
            .encode(&["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."])
            .unwrap();
        let (weather, sunny, stadium) = (&vectors[0..384], &vectors[384..768], &vectors[768..1152]);
        let close = dot(weather, sunny);
        let far = dot(weather, stadium);
        assert!((close - 0.666).abs() <= 0.005, "{encoder:?}: cosine(weather, sunny) = {close}");
        assert!((far - 0.105).abs() <= 0.005, "{encoder:?}: cosine(weather, stadium) = {far}");
        for row in vectors.chunks(384) {
            assert!((dot(row, row) - 1.0).abs() < 1e-4, "unit length");
        }
    }
}

#[tokio::test]
async fn both_engines_compute_the_same_vectors() {
    let encoders = encoders().await;
    let [candle, onnx] = &encoders[..] else { return };
    let texts = [
        "Robots playing soccer.",
        "A much longer sentence about humanoid robots that play football in a league, which pads the others.",
        "Ünïcödé, émojis 🤖 and numbers 3.14159 too",
        &"protein folding ".repeat(300),
    ];
    let (a, b) = (candle.encode(&texts).unwrap(), onnx.encode(&texts).unwrap());
    assert_eq!(a.len(), b.len());
    for (row, (x, y)) in a.chunks(384).zip(b.chunks(384)).enumerate() {
        let largest = x.iter().zip(y).map(|(p, q)| (p - q).abs()).fold(0.0_f32, f32::max);
        assert!(
            largest < 1e-4 && dot(x, y) > 0.99999,
            "text {row}: largest difference {largest}, cosine {}",
            dot(x, y)
        );
    }
}

#[tokio::test]
async fn batching_and_padding_do_not_change_a_vector() {
    for encoder in encoders().await {
        let short = "Robots playing soccer.";
        let long = "A much longer sentence about humanoid robots that play football in a league, \
                    which forces the short one in the same batch to be padded.";
        let alone = encoder.encode_one(short).unwrap();
        let batched = encoder.encode(&[long, short]).unwrap();
        assert!(dot(&alone, &batched[384..]) > 0.9999, "{encoder:?}: padding leaked into the mean");
        assert!(encoder.encode(&[]).unwrap().is_empty());
    }
}

#[tokio::test]
async fn long_texts_are_truncated_not_refused() {
    for encoder in encoders().await {
        let long = "protein folding ".repeat(2000);
        let vector = encoder.encode_one(&long).unwrap();
        assert_eq!(vector.len(), 384);
    }
}
