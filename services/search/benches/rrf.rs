//! Reciprocal Rank Fusion of 3 rankings × 1,000 documents, keeping the top 100: the search
//! agent's implementation against a straightforward reference (ordered map, full sort),
//! interleaved in one run.
//!
//! `cargo bench -p search --bench rrf -- [--iterations 2000]`

use std::collections::BTreeMap;
use std::time::Instant;

use mesh_rank::fusion::{RRF_K_DEFAULT, Ranking, reciprocal_rank_fusion};
use search::eval::quantile;

const LISTS: usize = 3;
const LIST_LEN: usize = 1_000;
/// Documents the rankings draw from: about half of each list is shared with the others.
const DOCUMENT_POOL: u64 = 2_000;
/// Calls per side in one round of the interleaving.
const ROUND_ITERATIONS: usize = 200;
/// Results kept after fusion: the search agent's largest `top_k`.
const FUSED_KEPT: usize = 100;

/// A deterministic pseudo-random permutation prefix per list (a fixed-seed LCG), so every run
/// fuses the same input.
fn rankings() -> Vec<Ranking> {
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    (0..LISTS)
        .map(|list| {
            let mut seen = std::collections::HashSet::new();
            let mut hits = Vec::with_capacity(LIST_LEN);
            while hits.len() < LIST_LEN {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let doc = (state >> 33) % DOCUMENT_POOL;
                if seen.insert(doc) {
                    hits.push((format!("doc-{doc}"), 1.0 / (hits.len() + 1) as f64));
                }
            }
            Ranking { profile: format!("profile-{list}"), hits }
        })
        .collect()
}

/// The formula as written, summing into an ordered map, sorting everything, keeping the head.
fn reference_rrf(rankings: &[Ranking], k: f64) -> Vec<(String, f64)> {
    let mut scores: BTreeMap<String, f64> = BTreeMap::new();
    for ranking in rankings {
        for (rank, (key, _)) in ranking.hits.iter().enumerate() {
            *scores.entry(key.clone()).or_insert(0.0) += 1.0 / (k + rank as f64);
        }
    }
    let mut fused: Vec<(String, f64)> = scores.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    fused.truncate(FUSED_KEPT);
    fused
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let iterations = args
        .windows(2)
        .find(|pair| pair[0] == "--iterations")
        .and_then(|pair| pair[1].parse().ok())
        .unwrap_or(2_000usize);
    let input = rankings();
    let ours = reciprocal_rank_fusion(&input, RRF_K_DEFAULT, FUSED_KEPT);
    let reference = reference_rrf(&input, RRF_K_DEFAULT);
    // Same scores in the same order (tied documents may differ: ours breaks ties by best rank).
    assert_eq!(ours.len(), reference.len());
    for (fused, (_, score)) in ours.iter().zip(&reference) {
        assert!((fused.score - score).abs() < 1e-12, "the two implementations agree");
    }

    // Rounds of ROUND_ITERATIONS calls each, alternating (ours, reference, ours, ...): each side
    // runs with its own working set in cache, as it would in a service, and both see the same
    // machine state over the run.
    let (mut ours_us, mut reference_us) = (Vec::with_capacity(iterations), Vec::with_capacity(iterations));
    for _ in 0..iterations.div_ceil(ROUND_ITERATIONS) {
        for _ in 0..ROUND_ITERATIONS {
            let started = Instant::now();
            std::hint::black_box(reciprocal_rank_fusion(std::hint::black_box(&input), RRF_K_DEFAULT, FUSED_KEPT));
            ours_us.push(started.elapsed().as_secs_f64() * 1e6);
        }
        for _ in 0..ROUND_ITERATIONS {
            let started = Instant::now();
            std::hint::black_box(reference_rrf(std::hint::black_box(&input), RRF_K_DEFAULT));
            reference_us.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    println!("RRF of {LISTS} rankings x {LIST_LEN} documents, top {FUSED_KEPT} kept, {iterations} iterations, µs");
    println!("{:<12} {:>9} {:>9}", "", "p50", "p99");
    let (ours_p50, reference_p50) = (quantile(&mut ours_us, 0.5), quantile(&mut reference_us, 0.5));
    println!("{:<12} {:>9.1} {:>9.1}", "search", ours_p50, quantile(&mut ours_us, 0.99));
    println!("{:<12} {:>9.1} {:>9.1}", "reference", reference_p50, quantile(&mut reference_us, 0.99));
    println!("search / reference p50 time ratio: {:.2} (goal: p50 <= 100 µs)", ours_p50 / reference_p50);
}
