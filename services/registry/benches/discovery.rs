//! Search over agent cards (issue #37), measured in process on the labelled set
//! (`tests/data/discovery`): the quality of each ranking alone and fused, per split (the
//! held-out third is never used to tune); then, with the set's agents repeated to
//! `--agents` (10,000 by default), the time one search takes (query vector included, cold and
//! cached) and the time a new registration takes to become searchable.
//!
//! ```sh
//! cargo bench -p registry --bench discovery -- [--agents 10000] [--searches 2000]
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use mesh_rank::fusion::{Ranking, weighted_reciprocal_rank_fusion};
use registry::{CardProfile, DENSE_RANKING, DENSE_WEIGHT, DiscoveryIndex, FUSION_K, LEXICAL_RANKING, SearchSource};
use serde::Deserialize;

const DATA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/discovery");
/// Ranked skills looked at for recall.
const RECALL_DEPTH: usize = 5;

#[derive(Debug, Parser)]
struct Args {
    /// Agents registered for the timing part (the labelled ones repeated under new names).
    #[arg(long, default_value_t = 10_000)]
    agents: usize,
    /// Searches timed.
    #[arg(long, default_value_t = 2_000)]
    searches: usize,
    /// Skip the timing part.
    #[arg(long)]
    quality_only: bool,
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, Deserialize)]
struct Card {
    name: String,
    #[serde(flatten)]
    profile: CardProfile,
}

#[derive(Debug, Deserialize)]
struct Labelled {
    text: String,
    expected: Vec<Expected>,
    split: String,
}

#[derive(Debug, Deserialize)]
struct Expected {
    agent: String,
    skill: String,
}

fn read<T: for<'de> Deserialize<'de>>(file: &str) -> anyhow::Result<T> {
    Ok(serde_json::from_str(&std::fs::read_to_string(format!("{DATA_DIR}/{file}"))?)?)
}

fn sources(cards: &[Card], copies: usize) -> Vec<SearchSource> {
    (0..copies)
        .flat_map(|copy| {
            cards.iter().map(move |card| SearchSource {
                name: if copy == 0 { card.name.clone() } else { format!("{} #{copy}", card.name) },
                profile: card.profile.clone(),
                capabilities: card.profile.skills.iter().map(|s| s.id.clone()).collect(),
                tenant: String::new(),
            })
        })
        .collect()
}

/// Top-1 and recall@5 per split.
#[derive(Debug, Default, Clone, Copy)]
struct Quality {
    requests: usize,
    top1: usize,
    recalled: usize,
}

fn judge(fused: &[String], expected: &[Expected], quality: &mut Quality) {
    let hit = |key: &String| expected.iter().any(|e| *key == format!("{}\n{}", e.agent, e.skill));
    quality.requests += 1;
    quality.top1 += usize::from(fused.first().is_some_and(hit));
    quality.recalled += usize::from(fused.iter().take(RECALL_DEPTH).any(hit));
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    // Truncation is the intended rounding of a rank.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index]
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "{what}: n {}, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        times.len(),
        quantile(&times, 0.5).as_secs_f64() * 1e3,
        quantile(&times, 0.99).as_secs_f64() * 1e3,
        times.last().map_or(0.0, |t| t.as_secs_f64() * 1e3),
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cards: Vec<Card> = read("agents.json")?;
    let requests: Vec<Labelled> = read("requests.json")?;
    let (encoder, status) = mesh_embedding::load_encoder(&mesh_embedding::DenseConfig::default()).await;
    let encoder = encoder.ok_or_else(|| anyhow::anyhow!("the embedding model is needed: {status:?}"))?;
    println!("{} agents, {} requests; model {status:?}", cards.len(), requests.len());

    let index = Arc::new(DiscoveryIndex::default());
    index.set_encoder(encoder);
    let started = Instant::now();
    let due = index.apply(sources(&cards, 1));
    index.embed(&due);
    println!("indexed {} skills in {:.1} s", index.skills(), started.elapsed().as_secs_f64());

    // Quality: each ranking alone, and fused.
    let variants = ["bm25", "dense", "fused"];
    let mut quality: HashMap<(&str, &str), Quality> = HashMap::new();
    for request in &requests {
        let vector = index.query_vector(&request.text);
        let rankings = index.rankings(&request.text, vector.as_deref(), &|_, _, _| true);
        for variant in variants {
            let keys: Vec<String> = match variant {
                "bm25" | "dense" => {
                    let profile = if variant == "bm25" { LEXICAL_RANKING } else { DENSE_RANKING };
                    let ranking = rankings.iter().find(|r| r.profile == profile);
                    ranking.map(|r| r.hits.iter().map(|(k, _)| k.clone()).collect()).unwrap_or_default()
                }
                _ => fused_keys(&rankings),
            };
            judge(&keys, &request.expected, quality.entry((variant, request.split.as_str())).or_default());
        }
    }
    println!("| ranking | split | requests | top-1 | recall@5 |\n|---|---|---|---|---|");
    for variant in variants {
        for split in ["tune", "held_out"] {
            let q = quality.get(&(variant, split)).copied().unwrap_or_default();
            let of = |n: usize| n as f64 / q.requests.max(1) as f64;
            println!("| {variant} | {split} | {} | {:.3} | {:.3} |", q.requests, of(q.top1), of(q.recalled));
        }
    }
    if args.quality_only {
        return Ok(());
    }

    // Scale: the labelled agents repeated to `--agents`.
    let copies = args.agents.div_ceil(cards.len()).max(1);
    let all = sources(&cards, copies);
    let started = Instant::now();
    let due = index.apply(all.clone());
    let lexical = started.elapsed();
    index.embed(&due);
    println!(
        "{} agents, {} skills: words indexed in {:.2} s, vectors in {:.1} s more",
        all.len(),
        index.skills(),
        lexical.as_secs_f64(),
        started.elapsed().as_secs_f64() - lexical.as_secs_f64()
    );
    let mut cold = Vec::new();
    let mut cached = Vec::new();
    let mut ranking_only = Vec::new();
    for (i, request) in requests.iter().cycle().take(args.searches).enumerate() {
        // The first pass over the requests meets an empty query cache; later ones hit it.
        let text = &request.text;
        let started = Instant::now();
        let vector = index.query_vector(text);
        let embedded = started.elapsed();
        let found = index.rank(text, vector.as_deref(), usize::MAX, &|_, _, _| true);
        std::hint::black_box(found);
        let total = started.elapsed();
        ranking_only.push(total - embedded);
        if i < requests.len() { cold.push(total) } else { cached.push(total) }
    }
    report("search, query vector computed (cold)", cold);
    report("search, query vector cached", cached);
    report("ranking and fusion alone", ranking_only);

    // A new registration: words at once, vectors after.
    let mut update = Vec::new();
    let mut with_vectors = Vec::new();
    let mut current = all;
    for (i, card) in cards.iter().cycle().take(50).enumerate() {
        current.push(SearchSource {
            name: format!("{} new {i}", card.name),
            profile: card.profile.clone(),
            capabilities: card.profile.skills.iter().map(|s| s.id.clone()).collect(),
            tenant: String::new(),
        });
        let started = Instant::now();
        let due = index.apply(current.clone());
        update.push(started.elapsed());
        index.embed(&due);
        with_vectors.push(started.elapsed());
    }
    report("registration searchable by words (index pass over every agent)", update);
    report("registration searchable by meaning (its vectors computed)", with_vectors);
    Ok(())
}

/// The rankings fused as the registry fuses them.
fn fused_keys(rankings: &[Ranking]) -> Vec<String> {
    let weights: Vec<f64> =
        rankings.iter().map(|r| if r.profile == DENSE_RANKING { DENSE_WEIGHT } else { 1.0 }).collect();
    weighted_reciprocal_rank_fusion(rankings, &weights, FUSION_K, RECALL_DEPTH).into_iter().map(|f| f.key).collect()
}
