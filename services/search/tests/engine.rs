//! The dense profile's engine: ONNX Runtime by default, candle when ONNX Runtime cannot be had,
//! and the status `/health` shows says which one and why. Needs the embedding model (downloaded
//! into the default cache folder when absent); skips without it, and fails under CI.

use mesh_embedding::{Engine, MODEL_ID, default_model_dir, ensure_model};
use search::DenseStatus;
use search::config::DenseConfig;
use search::load_encoder;

async fn model_present() -> bool {
    let dir = default_model_dir();
    let found = ensure_model(&dir, "python3")
        .await
        .map_err(|error| format!("none at {} and none could be downloaded: {error}", dir.display()));
    mesh_test_support::require("the embedding model", found).is_some()
}

#[tokio::test]
async fn the_default_engine_is_onnx_runtime_and_health_names_it() {
    if !model_present().await {
        return;
    }
    let (encoder, status) = load_encoder(&DenseConfig::default()).await;
    let onnx = match &status {
        DenseStatus::Available { engine: Engine::Onnx, .. } => Ok(()),
        other => Err(format!("the dense profile is {other:?}")),
    };
    if mesh_test_support::require("the ONNX Runtime library", onnx).is_none() {
        return;
    }
    assert_eq!(encoder.expect("an encoder").engine(), Engine::Onnx);
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        serde_json::json!({"status": "available", "model": MODEL_ID, "engine": "onnx"})
    );
}

#[tokio::test]
async fn without_its_library_vectors_are_computed_on_candle_and_the_status_says_why() {
    if !model_present().await {
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let config =
        DenseConfig { onnx_runtime_dir: Some(empty.path().to_owned()), download: false, ..DenseConfig::default() };
    let (encoder, status) = load_encoder(&config).await;
    assert_eq!(encoder.expect("the candle fallback").engine(), Engine::Candle);
    let DenseStatus::Available { engine: Engine::Candle, engine_fallback: Some(reason), .. } = &status else {
        panic!("{status:?}")
    };
    assert!(reason.contains("no library at") && reason.contains(&empty.path().display().to_string()), "{reason}");
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!((json["engine"].as_str(), json["engine_fallback"].as_str()), (Some("candle"), Some(reason.as_str())));

    // Asked for candle, candle it is, with nothing to explain.
    let (encoder, status) = load_encoder(&DenseConfig { engine: Engine::Candle, ..DenseConfig::default() }).await;
    assert_eq!(encoder.expect("an encoder").engine(), Engine::Candle);
    assert_eq!(
        status,
        DenseStatus::Available { model: MODEL_ID.to_owned(), engine: Engine::Candle, engine_fallback: None }
    );
}
