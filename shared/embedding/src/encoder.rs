//! all-MiniLM-L6-v2, computing what sentence-transformers computes: the BERT encoder's token
//! states, averaged over the real (unpadded) tokens, scaled to unit length. The encoder runs on one
//! of two engines: ONNX Runtime (the fast one, a library fetched on first use) or candle (pure
//! Rust, always there); tokenisation and pooling are the same for both.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use serde::{Deserialize, Serialize};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::error::EmbeddingError;
use crate::onnx::{Lane, OnnxBert};

/// Files a model directory must hold (the layout of a sentence-transformers model folder).
pub const MODEL_FILES: &[&str] = &["config.json", "tokenizer.json", "model.safetensors"];
/// Longest input the model reads, in tokens; longer texts are cut, as sentence-transformers does
/// (its `max_seq_length` for this model; the bundled tokenizer.json says 128, which would differ).
const SEQUENCE_TOKENS_MAX_DEFAULT: usize = 256;
/// Name stored beside every vector, so vectors of another model are never mixed with these. Both
/// engines compute the same model (their vectors agree to within `f32` rounding, which a test
/// checks), so it does not name the engine.
pub const MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// What computes the encoder's forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// ONNX Runtime's fused transformer kernels: several times faster on a CPU.
    Onnx,
    /// candle: pure Rust, no library to fetch; the fallback.
    Candle,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Onnx => "onnx",
            Self::Candle => "candle",
        }
    }
}

enum Network {
    Candle(BertModel),
    Onnx(OnnxBert),
}

/// A loaded sentence encoder. Thread-safe: several threads may encode at once.
pub struct Encoder {
    network: Network,
    tokenizer: Tokenizer,
    dimensions: usize,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("engine", &self.engine())
            .field("dimensions", &self.dimensions)
            .finish_non_exhaustive()
    }
}

/// What both engines read from a model folder.
struct ModelFolder {
    config_json: String,
    tokenizer: Tokenizer,
    weights: Vec<u8>,
}

impl ModelFolder {
    fn read(dir: &Path) -> Result<Self, EmbeddingError> {
        for file in MODEL_FILES {
            if !dir.join(file).is_file() {
                return Err(EmbeddingError::MissingFile { dir: dir.display().to_string(), file });
            }
        }
        let config_json = read(dir, "config.json")?;
        let sequence_tokens_max = sequence_tokens_max(dir)?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| EmbeddingError::Model(format!("tokenizer.json: {e}")))?;
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: sequence_tokens_max, ..TruncationParams::default() }))
            .map_err(|e| EmbeddingError::Model(format!("tokenizer truncation: {e}")))?;
        // Pad each batch to its longest member only, at the end of each row; the attention mask
        // hides the padding (ONNX Runtime's kernels rely on it being at the end).
        tokenizer
            .with_padding(Some(PaddingParams { strategy: PaddingStrategy::BatchLongest, ..PaddingParams::default() }));
        // Read rather than memory-mapped: mapping is `unsafe`, which this workspace forbids.
        let weights = std::fs::read(dir.join("model.safetensors")).map_err(|source| EmbeddingError::Io {
            path: dir.join("model.safetensors").display().to_string(),
            source,
        })?;
        Ok(Self { config_json, tokenizer, weights })
    }
}

impl Encoder {
    /// Loads the model on candle from a sentence-transformers folder (`config.json`,
    /// `tokenizer.json`, `model.safetensors`, optionally `sentence_bert_config.json`).
    pub fn load(dir: &Path) -> Result<Self, EmbeddingError> {
        let folder = ModelFolder::read(dir)?;
        let config: Config = serde_json::from_str(&folder.config_json)
            .map_err(|e| EmbeddingError::Model(format!("config.json is not a BERT configuration: {e}")))?;
        let builder = VarBuilder::from_buffered_safetensors(folder.weights, DType::F32, &Device::Cpu)?;
        let model = BertModel::load(builder, &config)?;
        Ok(Self { network: Network::Candle(model), tokenizer: folder.tokenizer, dimensions: config.hidden_size })
    }

    /// Loads the model from the same folder on ONNX Runtime, the shared library at `library`,
    /// each forward pass spread over `threads` threads.
    pub fn load_onnx(dir: &Path, library: &Path, threads: usize) -> Result<Self, EmbeddingError> {
        let folder = ModelFolder::read(dir)?;
        let network = OnnxBert::load(library, &folder.config_json, &folder.weights, threads)?;
        let dimensions = network.hidden_size();
        Ok(Self { network: Network::Onnx(network), tokenizer: folder.tokenizer, dimensions })
    }

    /// The engine computing this encoder's vectors.
    pub fn engine(&self) -> Engine {
        match self.network {
            Network::Candle(_) => Engine::Candle,
            Network::Onnx(_) => Engine::Onnx,
        }
    }

    /// Length of every vector this encoder returns.
    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// One unit-length vector per text, row after row in one flat buffer (`texts.len() × dimensions`).
    /// For batches of documents; a query someone waits on goes through [`Self::encode_one`].
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<f32>, EmbeddingError> {
        self.encode_on(Lane::Batch, texts)
    }

    /// The vector of one text, a query: on ONNX Runtime it never waits behind a batch of documents.
    pub fn encode_one(&self, text: &str) -> Result<Vec<f32>, EmbeddingError> {
        self.encode_on(Lane::Interactive, &[text])
    }

    fn encode_on(&self, lane: Lane, texts: &[&str]) -> Result<Vec<f32>, EmbeddingError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings =
            self.tokenizer.encode_batch(texts.to_vec(), true).map_err(|e| EmbeddingError::Model(e.to_string()))?;
        let rows = encodings.len();
        let columns = encodings[0].get_ids().len();
        let mut ids = Vec::with_capacity(rows * columns);
        let mut mask = Vec::with_capacity(rows * columns);
        for encoding in &encodings {
            ids.extend(encoding.get_ids().iter().copied());
            mask.extend(encoding.get_attention_mask().iter().copied());
        }
        let states = match &self.network {
            Network::Candle(model) => {
                let device = &model.device;
                let ids = Tensor::from_vec(ids, (rows, columns), device)?;
                let mask = Tensor::from_vec(mask.clone(), (rows, columns), device)?;
                let token_types = ids.zeros_like()?;
                model.forward(&ids, &token_types, Some(&mask))?.flatten_all()?.to_vec1::<f32>()?
            }
            Network::Onnx(model) => model.forward(lane, ids, &mask, rows, columns)?,
        };
        Ok(mean_pooled_unit(&states, &mask, columns, self.dimensions))
    }
}

/// Each row's token states (`columns × dimensions`) averaged over its real tokens (mask 1; padding
/// is neither added nor counted), then scaled to unit length.
fn mean_pooled_unit(states: &[f32], mask: &[u32], columns: usize, dimensions: usize) -> Vec<f32> {
    let mut vectors = Vec::with_capacity(states.len() / columns.max(1));
    for (row, row_mask) in states.chunks_exact(columns * dimensions).zip(mask.chunks_exact(columns)) {
        let mut sum = vec![0.0_f32; dimensions];
        let mut tokens = 0_u32;
        for (token, _) in row.chunks_exact(dimensions).zip(row_mask).filter(|(_, m)| **m != 0) {
            tokens += 1;
            for (total, value) in sum.iter_mut().zip(token) {
                *total += value;
            }
        }
        let tokens = tokens.max(1) as f32;
        sum.iter_mut().for_each(|total| *total /= tokens);
        let norm = sum.iter().map(|v| v * v).sum::<f32>().sqrt().max(f32::EPSILON);
        vectors.extend(sum.iter().map(|v| v / norm));
    }
    vectors
}

/// The token limit from `sentence_bert_config.json` when the folder has one.
fn sequence_tokens_max(dir: &Path) -> Result<usize, EmbeddingError> {
    if !dir.join("sentence_bert_config.json").is_file() {
        return Ok(SEQUENCE_TOKENS_MAX_DEFAULT);
    }
    let text = read(dir, "sentence_bert_config.json")?;
    let config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| EmbeddingError::Model(format!("sentence_bert_config.json: {e}")))?;
    Ok(config["max_seq_length"].as_u64().map_or(SEQUENCE_TOKENS_MAX_DEFAULT, |n| n as usize))
}

fn read(dir: &Path, file: &str) -> Result<String, EmbeddingError> {
    let path = dir.join(file);
    std::fs::read_to_string(&path).map_err(|source| EmbeddingError::Io { path: path.display().to_string(), source })
}

/// Independent partial sums of [`dot`]: a single running sum makes every addition wait for the
/// one before (floating-point addition may not be reordered), which no vector unit can speed up.
const DOT_LANES: usize = 8;

/// Dot product; the cosine similarity of two unit vectors. Inlined into its callers, so that a
/// scan compiled for wider vector instructions uses them here too.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0.0_f32; DOT_LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(DOT_LANES), b.chunks_exact(DOT_LANES));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..DOT_LANES {
            sums[lane] += x[lane] * y[lane];
        }
    }
    sums.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::{dot, mean_pooled_unit};

    #[test]
    fn pooling_averages_the_real_tokens_only_and_scales_to_unit_length() {
        // Two rows of three tokens of two dimensions; the second row's last token is padding.
        let states = [3.0, 0.0, 1.0, 4.0, 2.0, 2.0, 0.0, 6.0, 0.0, 2.0, 100.0, 100.0];
        let vectors = mean_pooled_unit(&states, &[1, 1, 1, 1, 1, 0], 3, 2);
        // Row 1: mean (2, 2), unit (0.7071, 0.7071). Row 2: mean (0, 4), unit (0, 1).
        let half = std::f32::consts::FRAC_1_SQRT_2;
        let expected = [half, half, 0.0, 1.0];
        for (got, want) in vectors.iter().zip(expected) {
            assert!((got - want).abs() < 1e-6, "{vectors:?}");
        }
        assert_eq!(vectors.len(), 4);
        // A row of zeros stays zeros (no division by a zero norm).
        assert_eq!(mean_pooled_unit(&[0.0; 4], &[1, 1], 2, 2), vec![0.0, 0.0]);
    }

    #[test]
    fn dot_sums_every_product_whatever_the_length() {
        for length in [0, 1, 7, 8, 9, 384, 389] {
            // Halves and small integers: every partial sum is exact, in any order of addition.
            let a: Vec<f32> = (0..length).map(|i| (i % 5) as f32 - 2.0).collect();
            let b: Vec<f32> = (0..length).map(|i| (i % 3) as f32 * 0.5).collect();
            let expected: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert_eq!(dot(&a, &b), expected, "length {length}");
        }
    }
}
