//! Search as the corpus grows: synthetic corpora of 10,000, 100,000 and 1,000,000 documents,
//! searched with SciFact's 300 test queries. For each size, in one run:
//!
//! 1. `dense` query latency p50/p99 with every vector scored exactly, beside the sign first pass
//!    (one bit a dimension, the best candidates rescored exactly) on the same index, and the sign pass's
//!    recall@10 against the exact top 10;
//! 2. `bm25+dense` (the fusion) latency p50/p99 as the agent serves it at that size, beside
//!    `bm25` alone;
//! 3. the memory the index takes: the process's resident memory before and after building it,
//!    per document.
//!
//! `cargo bench -p search --bench search_scale -- [--sizes 10000,100000,1000000] [--rounds 2]`
//!
//! The documents follow SciFact's: their lengths are drawn from SciFact's abstracts and their
//! words from SciFact's word frequencies; each vector mixes two SciFact abstracts' vectors with
//! noise, so neighbourhoods are as crowded as a real corpus's, which evenly spread random vectors
//! are not. Query vectors come from the query cache (filled by a pass that is not timed): these
//! figures are the search's, and `search_speed` has the embedding's. Needs SciFact and the model,
//! as `search_speed` does; SciFact's vectors are computed once per machine (about 15 minutes on
//! two cores) and kept where `a2a-mesh eval` keeps them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use search::eval::{eval_data_dir, index_collection, prepare_eval_data_dir, quantile};
use search::{
    Change, DENSE_PROFILE, DenseConfig, DenseMethod, Document, DocumentVector, IndexLocation, SearchAgent, SearchIndex,
    SearchSettings, index_directory,
};

mod support;

use support::TOP_K;

const SIZES_DEFAULT: [usize; 3] = [10_000, 100_000, 1_000_000];
/// Documents per commit while building a synthetic corpus.
const BUILD_BATCH_DOCUMENTS: usize = 25_000;
/// Words of a synthetic title.
const TITLE_WORDS: usize = 10;
/// How far a synthetic vector strays from its two SciFact parents (per dimension, before
/// normalising): about as far as two abstracts on one topic are apart.
const VECTOR_NOISE: f32 = 0.03;

fn args() -> (Vec<usize>, usize) {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let sizes = value("--sizes")
        .map(|v| v.split(',').map(|n| n.trim().parse().expect("--sizes takes numbers")).collect())
        .unwrap_or_else(|| SIZES_DEFAULT.to_vec());
    let rounds = value("--rounds").map_or(2, |v| v.parse().expect("--rounds takes a number"));
    (sizes, rounds)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let Some((dataset, collection, encoder)) = support::scifact_with_model().await else { return };
    let (sizes, rounds) = args();
    let threads = DenseConfig::default().threads();
    let data_dir = eval_data_dir(&dataset);
    prepare_eval_data_dir(&data_dir, Some(&encoder)).expect("the index's folder is ready");
    let scifact =
        SearchIndex::open(&IndexLocation::Directory(index_directory(&data_dir)), Some(encoder.clone()), threads)
            .expect("SciFact's index opens");
    index_collection(&scifact, &collection, &|_| {}).expect("SciFact indexed");
    let parents: Vec<DocumentVector> = scifact
        .changes()
        .into_iter()
        .filter_map(|change| match change {
            Change::Upsert { vector, .. } => vector,
            Change::Delete { .. } => None,
        })
        .collect();
    drop(scifact);
    let words = Words::of(&collection.documents);
    let queries: Vec<&str> = collection.queries.iter().map(|(_, text)| text.as_str()).collect();
    println!(
        "synthetic corpora from SciFact ({} abstracts, {} distinct words), {} test queries, {rounds} rounds, {threads} cores",
        parents.len(),
        words.distinct(),
        queries.len()
    );
    println!(
        "{:>9} {:>9} {:>17} {:>17} {:>8} {:>10} {:>17} {:>17} {:>10} {:>10}",
        "documents",
        "build s",
        "exact p50/p99 ms",
        "signs p50/p99 ms",
        "exact/sg",
        "recall@10",
        "bm25 p50/p99 ms",
        "fused p50/p99 ms",
        "MiB",
        "bytes/doc"
    );
    for size in sizes {
        let resident_before = support::resident_bytes("self");
        let started = Instant::now();
        let index = SearchIndex::open(&IndexLocation::Memory, Some(encoder.clone()), threads).expect("index opens");
        index.set_query_cache_entries(queries.len() * 2);
        let mut random = SplitMix64(size as u64);
        for first in (0..size).step_by(BUILD_BATCH_DOCUMENTS) {
            let batch = (first..(first + BUILD_BATCH_DOCUMENTS).min(size))
                .map(|i| synthetic(i, &words, &parents, &mut random))
                .collect();
            index.apply(batch, 0).expect("synthetic documents indexed");
        }
        let build_s = started.elapsed().as_secs_f64();
        let resident = support::resident_bytes("self").saturating_sub(resident_before);
        let index = Arc::new(index);
        let default_method = index.dense_method();
        // One untimed pass puts every query's vector in the cache.
        for query in &queries {
            index.rank_timed(DENSE_PROFILE, query, None, TOP_K, None).expect("dense search");
        }
        let agent = SearchAgent::new(
            index.clone(),
            SearchSettings { rrf_k: 60.0, top_k_default: TOP_K, top_k_max: 100, candidates_per_profile: 100 },
        );
        let mut samples: HashMap<&str, Vec<f64>> = HashMap::new();
        let mut recall = (0_usize, 0_usize);
        for _ in 0..rounds {
            for (name, min_documents) in [("exact", usize::MAX), ("signs", 0)] {
                index.set_quantized_min_documents(min_documents);
                samples
                    .entry(name)
                    .or_default()
                    .extend(support::latencies_ms(&agent, &[DENSE_PROFILE], &queries).await);
            }
        }
        for query in &queries {
            index.set_quantized_min_documents(usize::MAX);
            let (exact, _) = index.rank_timed(DENSE_PROFILE, query, None, TOP_K, None).expect("dense search");
            index.set_quantized_min_documents(0);
            let (signs, _) = index.rank_timed(DENSE_PROFILE, query, None, TOP_K, None).expect("dense search");
            recall.0 += signs.iter().filter(|(key, _)| exact.iter().any(|(k, _)| k == key)).count();
            recall.1 += exact.len();
        }
        // The fusion as served at this size, beside bm25 alone, interleaved.
        index.set_quantized_min_documents(search::QUANTIZED_MIN_ROWS_DEFAULT);
        for _ in 0..rounds {
            samples.entry("bm25").or_default().extend(support::latencies_ms(&agent, &["bm25"], &queries).await);
            let fused = support::latencies_ms(&agent, &["bm25", DENSE_PROFILE], &queries).await;
            samples.entry("fused").or_default().extend(fused);
        }
        let mut figures = |name: &str| {
            let values = samples.get_mut(name).expect("sampled");
            (quantile(values, 0.5), quantile(values, 0.99))
        };
        let (exact, signs, bm25, fused) = (figures("exact"), figures("signs"), figures("bm25"), figures("fused"));
        println!(
            "{size:>9} {build_s:>9.1} {:>17} {:>17} {:>8.1} {:>10.4} {:>17} {:>17} {:>10.0} {:>10.0}",
            pair(exact),
            pair(signs),
            exact.0 / signs.0,
            recall.0 as f64 / recall.1.max(1) as f64,
            pair(bm25),
            pair(fused),
            resident as f64 / (1 << 20) as f64,
            resident as f64 / size as f64,
        );
        let served = match default_method {
            DenseMethod::Exact => "exact",
            DenseMethod::Quantized => "signs",
        };
        println!("{:>9} the agent's default at this size: {served}", "");
    }
}

fn pair((p50, p99): (f64, f64)) -> String {
    format!("{p50:.2} / {p99:.2}")
}

/// Document `i` of a synthetic corpus, with its vector.
fn synthetic(i: usize, words: &Words, parents: &[DocumentVector], random: &mut SplitMix64) -> Change {
    let length = words.lengths[random.below(words.lengths.len())];
    let document = Document {
        id: format!("synthetic-{i:07}"),
        title: words.sentence(TITLE_WORDS, random),
        text: words.sentence(length, random),
        modality: None,
        tags: Vec::new(),
    };
    let (a, b) = (&parents[random.below(parents.len())], &parents[random.below(parents.len())]);
    let share = 0.5 + 0.5 * random.unit();
    let mixed: Vec<f32> = a
        .values
        .iter()
        .zip(&b.values)
        .map(|(x, y)| share * x + (1.0 - share) * y + VECTOR_NOISE * (random.unit() - 0.5))
        .collect();
    let norm = mixed.iter().map(|v| v * v).sum::<f32>().sqrt();
    let values = mixed.iter().map(|v| v / norm).collect();
    Change::Upsert { tenant: None, document, vector: Some(DocumentVector { values, model: a.model.clone() }) }
}

/// SciFact's words by frequency, and its abstracts' lengths in words.
struct Words {
    words: Vec<String>,
    /// Running totals of the words' counts, for drawing a word as often as SciFact uses it.
    cumulative: Vec<u64>,
    lengths: Vec<usize>,
}

impl Words {
    fn of(documents: &[Document]) -> Self {
        let mut counts: HashMap<&str, u64> = HashMap::new();
        let mut lengths = Vec::with_capacity(documents.len());
        for document in documents {
            let words: Vec<&str> = document.text.split_whitespace().collect();
            lengths.push(words.len().max(1));
            for word in words {
                *counts.entry(word).or_default() += 1;
            }
        }
        let mut counted: Vec<(&str, u64)> = counts.into_iter().collect();
        counted.sort_unstable();
        let mut total = 0;
        let cumulative = counted
            .iter()
            .map(|(_, count)| {
                total += count;
                total
            })
            .collect();
        Self { words: counted.into_iter().map(|(word, _)| word.to_owned()).collect(), cumulative, lengths }
    }

    fn distinct(&self) -> usize {
        self.words.len()
    }

    /// `length` words drawn by their frequency, space-separated.
    fn sentence(&self, length: usize, random: &mut SplitMix64) -> String {
        let total = *self.cumulative.last().unwrap_or(&1);
        let mut sentence = String::with_capacity(length * 8);
        for n in 0..length {
            let pick = random.next() % total;
            let word = &self.words[self.cumulative.partition_point(|&running| running <= pick)];
            if n > 0 {
                sentence.push(' ');
            }
            sentence.push_str(word);
        }
        sentence
    }
}

/// SplitMix64: a seeded generator, so every run builds the same corpora.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`.
    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    /// A number in `0.0..1.0`.
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1_u64 << 24) as f32
    }
}
