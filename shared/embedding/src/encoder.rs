//! all-MiniLM-L6-v2 on candle, computing what sentence-transformers computes: the BERT encoder's
//! token states, averaged over the real (unpadded) tokens, scaled to unit length.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::error::EmbeddingError;

/// Files a model directory must hold (the layout of a sentence-transformers model folder).
pub const MODEL_FILES: &[&str] = &["config.json", "tokenizer.json", "model.safetensors"];
/// Longest input the model reads, in tokens; longer texts are cut, as sentence-transformers does
/// (its `max_seq_length` for this model; the bundled tokenizer.json says 128, which would differ).
const SEQUENCE_TOKENS_MAX_DEFAULT: usize = 256;
/// Name stored beside every vector, so vectors of another model are never mixed with these.
pub const MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2";

/// A loaded sentence encoder. Thread-safe: several threads may encode at once.
pub struct Encoder {
    model: BertModel,
    tokenizer: Tokenizer,
    dimensions: usize,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder").field("dimensions", &self.dimensions).finish_non_exhaustive()
    }
}

impl Encoder {
    /// Loads the model from a sentence-transformers folder (`config.json`, `tokenizer.json`,
    /// `model.safetensors`, optionally `sentence_bert_config.json`).
    pub fn load(dir: &Path) -> Result<Self, EmbeddingError> {
        for file in MODEL_FILES {
            if !dir.join(file).is_file() {
                return Err(EmbeddingError::MissingFile { dir: dir.display().to_string(), file });
            }
        }
        let config_json = read(dir, "config.json")?;
        let config: Config = serde_json::from_str(&config_json)
            .map_err(|e| EmbeddingError::Model(format!("config.json is not a BERT configuration: {e}")))?;
        let sequence_tokens_max = sequence_tokens_max(dir)?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| EmbeddingError::Model(format!("tokenizer.json: {e}")))?;
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: sequence_tokens_max, ..TruncationParams::default() }))
            .map_err(|e| EmbeddingError::Model(format!("tokenizer truncation: {e}")))?;
        // Pad each batch to its longest member only; the attention mask hides the padding.
        tokenizer
            .with_padding(Some(PaddingParams { strategy: PaddingStrategy::BatchLongest, ..PaddingParams::default() }));
        let device = Device::Cpu;
        // Read rather than memory-mapped: mapping is `unsafe`, which this workspace forbids.
        let weights = std::fs::read(dir.join("model.safetensors")).map_err(|source| EmbeddingError::Io {
            path: dir.join("model.safetensors").display().to_string(),
            source,
        })?;
        let builder = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)?;
        let model = BertModel::load(builder, &config)?;
        Ok(Self { model, tokenizer, dimensions: config.hidden_size })
    }

    /// Length of every vector this encoder returns.
    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// One unit-length vector per text, row after row in one flat buffer (`texts.len() × dimensions`).
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<f32>, EmbeddingError> {
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
        let device = &self.model.device;
        let ids = Tensor::from_vec(ids, (rows, columns), device)?;
        let mask = Tensor::from_vec(mask, (rows, columns), device)?;
        let token_types = ids.zeros_like()?;
        let states = self.model.forward(&ids, &token_types, Some(&mask))?;
        // Mean over real tokens: padding positions are zeroed by the mask and not counted.
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = states.broadcast_mul(&mask)?.sum(1)?;
        let counts = mask.sum(1)?;
        let means = summed.broadcast_div(&counts)?;
        let norms = means.sqr()?.sum_keepdim(1)?.sqrt()?;
        let unit = means.broadcast_div(&norms.maximum(f32::EPSILON)?)?;
        Ok(unit.flatten_all()?.to_vec1::<f32>()?)
    }

    /// The vector of one text.
    pub fn encode_one(&self, text: &str) -> Result<Vec<f32>, EmbeddingError> {
        self.encode(&[text])
    }
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
    use super::dot;

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
