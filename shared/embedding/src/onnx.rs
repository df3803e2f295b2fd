//! all-MiniLM-L6-v2 on ONNX Runtime: the same BERT encoder as candle's, built in memory from the
//! same safetensors weights with ONNX Runtime's model editor, out of the fused transformer kernels
//! ONNX Runtime ships for BERT (`com.microsoft` operators: embedding plus layer norm, multi-head
//! attention, bias plus GELU, residual plus layer norm). Those kernels are what ONNX Runtime's own
//! BERT optimiser would turn an exported model into; naming them directly needs no exported model
//! file (none is published on PyPI in `f32`) and no pattern matching that could silently not fire.
//!
//! The library is loaded at run time from a path (see `runtime.rs`), so nothing is linked and a
//! machine without it falls back to candle.

use std::path::Path;
use std::sync::{Mutex, OnceLock, PoisonError};

use ort::editor::{Graph, Model, Node, ONNX_DOMAIN, Opset, Outlet};
use ort::memory::Allocator;
use ort::operator::attribute::Attribute;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{RunOptions, Session};
use ort::tensor::{Shape, SymbolicDimensions, TensorElementType};
use ort::value::{Tensor, ValueType};
use safetensors::SafeTensors;
use serde::Deserialize;

use crate::error::EmbeddingError;

/// Domain of ONNX Runtime's own operators, where its fused transformer kernels live.
const CONTRIB_DOMAIN: &str = "com.microsoft";
/// Version of that domain the kernels below are registered under.
const CONTRIB_OPSET: u32 = 1;
/// ONNX operator set of the plain operators (`MatMul`).
const ONNX_OPSET: u32 = 17;
/// Name of the graph's output: the last layer's token states, `batch × sequence × hidden`.
const STATES: &str = "states";

/// The dimensions of a BERT encoder, from its `config.json`.
#[derive(Debug, Clone, Deserialize)]
struct BertShape {
    hidden_size: usize,
    num_attention_heads: usize,
    num_hidden_layers: usize,
    layer_norm_eps: f64,
    hidden_act: String,
}

/// Who a forward pass is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// A query someone is waiting on.
    Interactive,
    /// Documents being ingested, a batch at a time.
    Batch,
}

/// The MiniLM encoder, as two sessions of the same graph. `ort` runs a session exclusively, so
/// callers of one session take turns; with a single session a query would wait behind the batch
/// of documents in progress (half a second for 16 abstracts) whenever documents are ingested while
/// the agent serves. Queries have a session of their own, at the cost of a second copy of the
/// weights in ONNX Runtime. Each run spreads its matrix products over its session's threads.
pub(crate) struct OnnxBert {
    interactive: Mutex<LaneSession>,
    batch: Mutex<LaneSession>,
    hidden: usize,
}

/// A session and the options its runs are made with, set once at load.
struct LaneSession {
    session: Session,
    options: RunOptions,
}

impl OnnxBert {
    /// Loads the ONNX Runtime library at `library` (once per process; later calls reuse the first
    /// library loaded), then builds the encoder from `config.json` and the safetensors `weights`.
    pub(crate) fn load(
        library: &Path,
        config_json: &str,
        weights: &[u8],
        threads: usize,
    ) -> Result<Self, EmbeddingError> {
        start_runtime(library)?;
        let shape: BertShape = serde_json::from_str(config_json)
            .map_err(|e| EmbeddingError::Model(format!("config.json is not a BERT configuration: {e}")))?;
        // The fused kernel computes the exact (erf) GELU, which is what BERT's "gelu" names.
        if shape.hidden_act != "gelu" {
            return Err(EmbeddingError::Model(format!("activation {:?} is not BERT's gelu", shape.hidden_act)));
        }
        let weights = Weights(
            SafeTensors::deserialize(weights).map_err(|e| EmbeddingError::Model(format!("model.safetensors: {e}")))?,
        );
        let session = |lane: Lane| -> Result<Mutex<LaneSession>, EmbeddingError> {
            let builder = Session::builder()?
                .with_optimization_level(GraphOptimizationLevel::Level3)?
                .with_intra_threads(threads.max(1))?
                // Spinning threads would hold the cores between queries, which the agent's other
                // work (BM25, serving requests) needs; measured, it made indexing no faster.
                .with_intra_op_spinning(false)?;
            let session = build_model(&shape, &weights)?.into_session(builder)?;
            let mut options = RunOptions::new()?;
            // After a batch, the memory its intermediate tensors took (about 150 MB for 16
            // abstracts) goes back: ingestion is occasional, and the arena would otherwise keep
            // its peak for good.
            if lane == Lane::Batch {
                options.add_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")?;
            }
            Ok(Mutex::new(LaneSession { session, options }))
        };
        Ok(Self { interactive: session(Lane::Interactive)?, batch: session(Lane::Batch)?, hidden: shape.hidden_size })
    }

    /// Length of the token states (and of the pooled vectors).
    pub(crate) fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// Token states (`rows × columns × hidden`, flat) of `ids` with `mask` (`rows × columns`,
    /// padding at the end of each row, marked 0 in the mask).
    pub(crate) fn forward(
        &self,
        lane: Lane,
        ids: Vec<u32>,
        mask: &[u32],
        rows: usize,
        columns: usize,
    ) -> Result<Vec<f32>, EmbeddingError> {
        let to_i32 = |v: u32| i32::try_from(v).map_err(|_| EmbeddingError::Model(format!("token id {v} is too large")));
        let ids: Vec<i32> = ids.into_iter().map(to_i32).collect::<Result<_, _>>()?;
        let mask: Vec<i32> = mask.iter().map(|&m| i32::from(m != 0)).collect();
        let inputs = ort::inputs![
            "input_ids" => Tensor::from_array(([rows, columns], ids))?,
            "token_type_ids" => Tensor::from_array(([rows, columns], vec![0_i32; rows * columns]))?,
            "attention_mask" => Tensor::from_array(([rows, columns], mask))?,
        ];
        let session = match lane {
            Lane::Interactive => &self.interactive,
            Lane::Batch => &self.batch,
        };
        let mut lane = session.lock().unwrap_or_else(PoisonError::into_inner);
        let LaneSession { session, options } = &mut *lane;
        let outputs = session.run_with_options(inputs, options)?;
        let (shape, states) = outputs[STATES].try_extract_tensor::<f32>()?;
        let expected = [rows, columns, self.hidden].map(|d| d as i64);
        if shape[..] != expected {
            return Err(EmbeddingError::Model(format!("the encoder returned shape {shape}, not {expected:?}")));
        }
        Ok(states.to_vec())
    }
}

/// Points `ort` at the library once per process. Loading a library that is not ONNX Runtime
/// panics inside `ort`; that is caught and returned, so the caller can fall back to candle.
fn start_runtime(library: &Path) -> Result<(), EmbeddingError> {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    let library = library.display().to_string();
    STARTED
        .get_or_init(|| {
            let start = std::panic::AssertUnwindSafe(|| ort::init_from(&library).with_name("mesh-embedding").commit());
            match std::panic::catch_unwind(start) {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err(format!("{library} could not be loaded as ONNX Runtime")),
            }
        })
        .clone()
        .map_err(EmbeddingError::Runtime)
}

/// A weight's shape and values.
type Array = (Vec<usize>, Vec<f32>);

/// The safetensors weights, read by the names Hugging Face's BERT gives them.
struct Weights<'a>(SafeTensors<'a>);

impl Weights<'_> {
    /// The `f32` values of `name`, with its shape.
    fn get(&self, name: &str) -> Result<Array, EmbeddingError> {
        let view = self.0.tensor(name).map_err(|e| EmbeddingError::Model(format!("weight {name}: {e}")))?;
        if view.dtype() != safetensors::Dtype::F32 {
            return Err(EmbeddingError::Model(format!("weight {name} is {:?}, not F32", view.dtype())));
        }
        let values = view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok((view.shape().to_vec(), values))
    }

    /// A linear layer's weight as `MatMul` wants it, `in × out` (PyTorch stores `out × in`).
    fn linear(&self, name: &str) -> Result<Array, EmbeddingError> {
        let (shape, values) = self.get(name)?;
        let [out, input] = shape[..] else {
            return Err(EmbeddingError::Model(format!("weight {name} has shape {shape:?}, not two dimensions")));
        };
        let mut transposed = vec![0.0; values.len()];
        for (row, chunk) in values.chunks_exact(input).enumerate() {
            for (column, value) in chunk.iter().enumerate() {
                transposed[column * out + row] = *value;
            }
        }
        Ok((vec![input, out], transposed))
    }
}

/// Adds `values` of `shape` to `graph` as the constant `name`.
fn constant(graph: &mut Graph, name: &str, (shape, values): Array) -> Result<(), EmbeddingError> {
    let mut tensor = Tensor::<f32>::new(&Allocator::default(), shape)?;
    tensor.extract_tensor_mut().1.copy_from_slice(&values);
    graph.add_initializer(name, tensor, false)?;
    Ok(())
}

/// Query, key and value projections side by side (`hidden × 3·hidden`, then the biases), the
/// layout ONNX Runtime's `Attention` kernel takes them in.
fn attention_projections(weights: &Weights<'_>, prefix: &str, hidden: usize) -> Result<(Array, Array), EmbeddingError> {
    let mut merged = vec![0.0; hidden * 3 * hidden];
    let mut biases = Vec::with_capacity(3 * hidden);
    for (part, name) in ["query", "key", "value"].into_iter().enumerate() {
        let (_, matrix) = weights.linear(&format!("{prefix}.attention.self.{name}.weight"))?;
        for (row, chunk) in matrix.chunks_exact(hidden).enumerate() {
            let start = row * 3 * hidden + part * hidden;
            merged[start..start + hidden].copy_from_slice(chunk);
        }
        biases.extend(weights.get(&format!("{prefix}.attention.self.{name}.bias"))?.1);
    }
    Ok(((vec![hidden, 3 * hidden], merged), (vec![3 * hidden], biases)))
}

fn node(
    operator: &str,
    domain: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attributes: Vec<Attribute>,
) -> Result<Node, EmbeddingError> {
    Ok(Node::new(operator, domain, name, inputs, outputs, attributes)?)
}

/// A `batch × sequence` tensor of `ty`, or `batch × sequence × hidden` when `hidden` is given.
fn outlet(name: &str, ty: TensorElementType, hidden: Option<usize>) -> Result<Outlet, EmbeddingError> {
    let mut dimensions = vec![-1, -1];
    let mut symbols = vec!["batch".to_owned(), "sequence".to_owned()];
    if let Some(hidden) = hidden {
        dimensions.push(hidden as i64);
        symbols.push(String::new());
    }
    let value_type =
        ValueType::Tensor { ty, shape: Shape::new(dimensions), dimension_symbols: SymbolicDimensions::new(symbols) };
    Ok(Outlet::new(name, &value_type)?)
}

/// The whole encoder as one graph: inputs `input_ids`, `token_type_ids` and `attention_mask`
/// (`int32`, `batch × sequence`); output [`STATES`].
fn build_model(shape: &BertShape, weights: &Weights<'_>) -> Result<Model, EmbeddingError> {
    let hidden = shape.hidden_size;
    let epsilon = shape.layer_norm_eps as f32;
    let mut graph = Graph::new()?;
    graph.set_inputs([
        outlet("input_ids", TensorElementType::Int32, None)?,
        outlet("token_type_ids", TensorElementType::Int32, None)?,
        outlet("attention_mask", TensorElementType::Int32, None)?,
    ])?;
    graph.set_outputs([outlet(STATES, TensorElementType::Float32, Some(hidden))?])?;

    for name in ["word_embeddings", "position_embeddings", "token_type_embeddings"] {
        constant(&mut graph, name, weights.get(&format!("embeddings.{name}.weight"))?)?;
    }
    constant(&mut graph, "embeddings.gamma", weights.get("embeddings.LayerNorm.weight")?)?;
    constant(&mut graph, "embeddings.beta", weights.get("embeddings.LayerNorm.bias")?)?;
    // Sums the three embeddings, normalises them, and turns the mask into each row's length.
    graph.add_node(node(
        "EmbedLayerNormalization",
        CONTRIB_DOMAIN,
        "embeddings",
        &[
            "input_ids",
            "token_type_ids",
            "word_embeddings",
            "position_embeddings",
            "token_type_embeddings",
            "embeddings.gamma",
            "embeddings.beta",
            "attention_mask",
        ],
        &["layer0.input", "lengths"],
        vec![Attribute::new("epsilon", epsilon)?],
    )?)?;

    for layer in 0..shape.num_hidden_layers {
        let prefix = format!("encoder.layer.{layer}");
        let name = |suffix: &str| format!("layer{layer}.{suffix}");
        let input = name("input");
        let output =
            if layer + 1 == shape.num_hidden_layers { STATES.to_owned() } else { format!("layer{}.input", layer + 1) };

        let (qkv, qkv_bias) = attention_projections(weights, &prefix, hidden)?;
        constant(&mut graph, &name("qkv"), qkv)?;
        constant(&mut graph, &name("qkv.bias"), qkv_bias)?;
        for (ours, theirs) in [
            ("attention.out", "attention.output.dense"),
            ("intermediate", "intermediate.dense"),
            ("out", "output.dense"),
        ] {
            constant(&mut graph, &name(ours), weights.linear(&format!("{prefix}.{theirs}.weight"))?)?;
            constant(&mut graph, &name(&format!("{ours}.bias")), weights.get(&format!("{prefix}.{theirs}.bias"))?)?;
        }
        for (ours, theirs) in [("attention.norm", "attention.output.LayerNorm"), ("norm", "output.LayerNorm")] {
            constant(&mut graph, &name(&format!("{ours}.gamma")), weights.get(&format!("{prefix}.{theirs}.weight"))?)?;
            constant(&mut graph, &name(&format!("{ours}.beta")), weights.get(&format!("{prefix}.{theirs}.bias"))?)?;
        }

        let heads = i64::try_from(shape.num_attention_heads).map_err(|e| EmbeddingError::Model(e.to_string()))?;
        let steps = [
            // Self-attention over each row's real tokens (the lengths hide the padding).
            node(
                "Attention",
                CONTRIB_DOMAIN,
                &name("attention"),
                &[&input, &name("qkv"), &name("qkv.bias"), "lengths"],
                &[&name("attended")],
                vec![Attribute::new("num_heads", heads)?],
            )?,
            node(
                "MatMul",
                ONNX_DOMAIN,
                &name("attention.project"),
                &[&name("attended"), &name("attention.out")],
                &[&name("projected")],
                vec![],
            )?,
            // LayerNorm(projected + bias + input): the residual connection.
            node(
                "SkipLayerNormalization",
                CONTRIB_DOMAIN,
                &name("attention.norm"),
                &[
                    &name("projected"),
                    &input,
                    &name("attention.norm.gamma"),
                    &name("attention.norm.beta"),
                    &name("attention.out.bias"),
                ],
                &[&name("attention.output")],
                vec![Attribute::new("epsilon", epsilon)?],
            )?,
            node(
                "MatMul",
                ONNX_DOMAIN,
                &name("expand"),
                &[&name("attention.output"), &name("intermediate")],
                &[&name("expanded")],
                vec![],
            )?,
            node(
                "BiasGelu",
                CONTRIB_DOMAIN,
                &name("gelu"),
                &[&name("expanded"), &name("intermediate.bias")],
                &[&name("activated")],
                vec![],
            )?,
            node(
                "MatMul",
                ONNX_DOMAIN,
                &name("contract"),
                &[&name("activated"), &name("out")],
                &[&name("contracted")],
                vec![],
            )?,
            node(
                "SkipLayerNormalization",
                CONTRIB_DOMAIN,
                &name("norm"),
                &[
                    &name("contracted"),
                    &name("attention.output"),
                    &name("norm.gamma"),
                    &name("norm.beta"),
                    &name("out.bias"),
                ],
                &[&output],
                vec![Attribute::new("epsilon", epsilon)?],
            )?,
        ];
        for step in steps {
            graph.add_node(step)?;
        }
    }

    let mut model = Model::new([Opset::new(ONNX_DOMAIN, ONNX_OPSET)?, Opset::new(CONTRIB_DOMAIN, CONTRIB_OPSET)?])?;
    model.add_graph(graph)?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Lane, OnnxBert};
    use crate::download::{default_model_dir, default_onnx_runtime_dir, ensure_model, ensure_onnx_runtime};

    /// The model on ONNX Runtime, both fetched when absent; `None` (a failure under CI) without.
    async fn encoder() -> Option<OnnxBert> {
        let (model, runtime) = (default_model_dir(), default_onnx_runtime_dir());
        let parts = async {
            ensure_model(&model, "python3").await?;
            ensure_onnx_runtime(&runtime, "python3").await
        };
        let library = mesh_test_support::require("the embedding model and ONNX Runtime", parts.await)?;
        let config = std::fs::read_to_string(model.join("config.json")).unwrap();
        let weights = std::fs::read(model.join("model.safetensors")).unwrap();
        Some(OnnxBert::load(&library, &config, &weights, 2).expect("the model loads"))
    }

    #[tokio::test]
    async fn a_query_never_waits_behind_a_batch_of_documents() {
        let Some(encoder) = encoder().await else { return };
        // As if a batch of documents were being encoded: its session is taken.
        let batch_in_progress = encoder.batch.lock().unwrap();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            // [CLS] robots [SEP]
            scope.spawn(|| sender.send(encoder.forward(Lane::Interactive, vec![101, 13507, 102], &[1, 1, 1], 1, 3)));
            let answered = receiver.recv_timeout(Duration::from_secs(60));
            // Let a query that did queue behind the batch finish, so the failure is reported.
            drop(batch_in_progress);
            let states = answered.expect("the query waited for the batch's session").unwrap();
            assert_eq!(states.len(), 3 * 384);
        });
    }
}
