//! Search speed on SciFact (5,183 abstracts, the 300 test queries), each figure beside its
//! reference from the same run, on both embedding engines (ONNX Runtime and candle):
//!
//! 1. query latency, p50/p99, of `bm25`, `dense` and `bm25+dense` (the fusion, query embedding
//!    included: the query cache is off) on each engine, interleaved round by round; ratios against
//!    `bm25` and against candle; then `dense` and `bm25+dense` again for queries seen before (their
//!    vectors in the query cache), with ratios against the same profiles uncached;
//! 2. indexing throughput in documents/s: BM25 alone, and vectors on each engine with one thread
//!    against every core;
//! 3. resident memory of the `search` binary serving SciFact against the same binary serving the
//!    bundled sample.
//!
//! `cargo bench -p search --bench search_speed -- [--rounds 3] [--embed-sample 512]`
//!
//! Reads SciFact from `MESH_SCIFACT_DIR` or `../shared/data/scifact`; needs the embedding model
//! (found or downloaded as the agent does). The index persists where `a2a-mesh eval` keeps it
//! (under the user's cache folder), so vectors are computed once per machine; the throughput
//! figures embed a fresh sample every run.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mesh_embedding::{Encoder, Engine};
use search::eval::{eval_data_dir, index_collection, prepare_eval_data_dir, quantile};
use search::{
    DENSE_PROFILE, DenseConfig, IndexLocation, SearchAgent, SearchIndex, SearchSettings, index_directory, load_encoder,
};

mod support;

use support::TOP_K;

/// Longest wait for the spawned agent to answer `/health` (it loads the model and the index).
const AGENT_START_TIMEOUT_MS: u64 = 120_000;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let Some((dataset, collection, encoder)) = support::scifact_with_model().await else { return };
    let rounds = arg("--rounds", 3);
    let embed_sample = arg("--embed-sample", 512);
    let threads = DenseConfig::default().threads();
    println!(
        "SciFact: {} documents, {} test queries; {threads} cores",
        collection.documents.len(),
        collection.queries.len()
    );
    // The default engine first (its vectors fill the index when it is new), then the other.
    let mut engines = vec![encoder.clone()];
    for engine in [Engine::Onnx, Engine::Candle] {
        if engine != encoder.engine() {
            engines.extend(encoder_on(engine).await);
        }
    }
    let queries: Vec<&str> = collection.queries.iter().map(|(_, text)| text.as_str()).collect();

    // 1. Query latency.
    let data_dir = eval_data_dir(&dataset);
    prepare_eval_data_dir(&data_dir, Some(&encoder)).expect("the index's folder is ready");
    let location = IndexLocation::Directory(index_directory(&data_dir));
    let settings = SearchSettings { rrf_k: 60.0, top_k_default: TOP_K, top_k_max: 100, candidates_per_profile: 100 };
    let open = |encoder: &Arc<Encoder>| {
        let index = Arc::new(SearchIndex::open(&location, Some(encoder.clone()), threads).expect("index opens"));
        (index.clone(), SearchAgent::new(index, settings))
    };
    {
        let (index, _) = open(&encoder);
        let report = index_collection(&index, &collection, &|_| {}).expect("SciFact indexed");
        println!("index at {}: {report:?}", data_dir.display());
    }
    let runs: Vec<(&Arc<Encoder>, &[&str])> = engines
        .iter()
        .flat_map(|encoder| {
            let profiles: [&[&str]; 3] = [&["bm25"], &[DENSE_PROFILE], &["bm25", DENSE_PROFILE]];
            profiles.map(|profiles| (encoder, profiles))
        })
        .collect();
    let mut samples_ms: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    for _ in 0..rounds {
        for (run, (encoder, profiles)) in runs.iter().enumerate() {
            // The index is opened on each engine in turn (one process may hold it at a time).
            let (index, agent) = open(encoder);
            // Every query is a new one: the cache would otherwise answer rounds after the first.
            index.set_query_cache_entries(0);
            samples_ms[run].extend(support::latencies_ms(&agent, profiles, &queries).await);
        }
    }
    let bm25_p50 = quantile(&mut samples_ms[0].clone(), 0.5);
    let candle_p50 = |profiles: &[&str], samples: &mut [Vec<f64>]| {
        let run = runs.iter().position(|(e, p)| e.engine() == Engine::Candle && *p == profiles)?;
        Some(quantile(&mut samples[run], 0.5))
    };
    println!();
    println!("query latency over {rounds} interleaved rounds of {} queries (top {TOP_K})", collection.queries.len());
    println!(
        "{:<8} {:<12} {:>10} {:>10} {:>16} {:>18}",
        "engine", "profiles", "p50 ms", "p99 ms", "p50 / bm25 p50", "p50 / candle p50"
    );
    for run in 0..runs.len() {
        let (encoder, profiles) = runs[run];
        let p50 = quantile(&mut samples_ms[run], 0.5);
        let p99 = quantile(&mut samples_ms[run], 0.99);
        let against_candle =
            candle_p50(profiles, &mut samples_ms).map_or("-".to_owned(), |c| format!("{:.2}", p50 / c));
        println!(
            "{:<8} {:<12} {p50:>10.2} {p99:>10.2} {:>16.2} {against_candle:>18}",
            encoder.engine().as_str(),
            profiles.join("+"),
            p50 / bm25_p50
        );
    }

    // Queries seen before: one pass fills the cache, the next rounds find their vectors there.
    let (index, agent) = open(&encoder);
    index.set_query_cache_entries(mesh_embedding::QUERY_CACHE_ENTRIES_DEFAULT);
    support::latencies_ms(&agent, &[DENSE_PROFILE], &queries).await;
    println!();
    println!(
        "repeated queries (vectors from the query cache), against the same profiles uncached ({})",
        encoder.engine().as_str()
    );
    println!("{:<12} {:>10} {:>10} {:>16}", "profiles", "p50 ms", "p99 ms", "p50 / uncached");
    for (run, (_, profiles)) in runs.iter().enumerate().take(3).skip(1) {
        let mut cached = Vec::new();
        for _ in 0..rounds {
            cached.extend(support::latencies_ms(&agent, profiles, &queries).await);
        }
        let p50 = quantile(&mut cached, 0.5);
        let p99 = quantile(&mut cached, 0.99);
        let uncached_p50 = quantile(&mut samples_ms[run], 0.5);
        println!("{:<12} {p50:>10.2} {p99:>10.2} {:>16.2}", profiles.join("+"), p50 / uncached_p50);
    }
    let stats = index.query_cache();
    println!("query cache: {} entries, {} hits, {} misses", stats.entries, stats.hits, stats.misses);
    drop((index, agent));

    // 2. Indexing throughput.
    println!();
    println!("indexing throughput");
    let started = Instant::now();
    let lexical = SearchIndex::open(&IndexLocation::Memory, None, 1).expect("index opens");
    lexical.upsert(None, collection.documents.clone(), &|_| {}).expect("indexed");
    let bm25_rate = collection.documents.len() as f64 / started.elapsed().as_secs_f64();
    println!("{:<40} {bm25_rate:>10.0} documents/s", "bm25 (all documents)");
    let sample: Vec<_> = collection.documents.iter().take(embed_sample).cloned().collect();
    let mut candle_rate = None;
    for encoder in engines.iter().rev() {
        let mut rates = Vec::new();
        for embedding_threads in [1, threads] {
            // A forward pass on ONNX Runtime uses the threads the encoder was loaded with (every
            // core); batches side by side are what the thread count changes.
            let index = SearchIndex::open(&IndexLocation::Memory, Some(encoder.clone()), embedding_threads).unwrap();
            let started = Instant::now();
            index.upsert(None, sample.clone(), &|_| {}).expect("embedded");
            let rate = sample.len() as f64 / started.elapsed().as_secs_f64();
            let label = format!(
                "dense {}, {embedding_threads} batch thread(s), {} docs",
                encoder.engine().as_str(),
                sample.len()
            );
            println!("{label:<40} {rate:>10.1} documents/s");
            rates.push(rate);
        }
        let best = rates.iter().copied().fold(0.0, f64::max);
        match candle_rate {
            None if encoder.engine() == Engine::Candle => candle_rate = Some(best),
            Some(candle) => println!(
                "{:<40} {:>10.2}",
                format!("dense {} / candle, best of each", encoder.engine().as_str()),
                best / candle
            ),
            None => {}
        }
    }

    // 3. Resident memory of the agent binary.
    println!();
    println!("resident memory of the search agent (after answering 50 queries)");
    let sample_dir = tempfile::tempdir().expect("temp dir");
    let small = measure_agent_rss(sample_dir.path(), &collection.queries).await;
    let scifact = measure_agent_rss(&data_dir, &collection.queries).await;
    println!("{:<34} {:>10.1} MiB", "bundled sample (311 documents)", small);
    println!("{:<34} {:>10.1} MiB", "SciFact (5,183 documents)", scifact);
    println!("{:<34} {:>10.2}", "SciFact / sample", scifact / small);
}

/// The model on `engine`; `None`, having said why, when it cannot be had there (an `onnx`
/// request that fell back to candle counts as missing).
async fn encoder_on(engine: Engine) -> Option<Arc<Encoder>> {
    let (encoder, status) = load_encoder(&DenseConfig { engine, ..DenseConfig::default() }).await;
    match encoder {
        Some(encoder) if encoder.engine() == engine => Some(encoder),
        _ => {
            eprintln!("skipping the {} engine: {status:?}", engine.as_str());
            None
        }
    }
}

/// Starts the `search` binary on `data_dir`, asks it 50 queries, and reads its VmRSS in MiB.
async fn measure_agent_rss(data_dir: &Path, queries: &[(String, String)]) -> f64 {
    let mut agent = spawn_agent(data_dir);
    let http = reqwest::Client::new();
    let url = wait_for_url(&mut agent, &http).await;
    for (_, text) in queries.iter().take(50) {
        let task = serde_json::json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": text}]}]});
        let response = http.post(format!("{url}/tasks/send")).json(&task).send().await.expect("query sent");
        assert!(response.status().is_success(), "{}", response.status());
    }
    let resident = support::resident_bytes(&agent.id().to_string());
    let _ = agent.kill();
    let _ = agent.wait();
    resident as f64 / (1 << 20) as f64
}

fn spawn_agent(data_dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_search"))
        .args(["--port", "0"])
        .env("MESH_SEARCH_DATA_DIR", data_dir)
        .env("MESH_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the search binary starts")
}

/// Reads the agent's log until it says where it listens, then waits for `/health`.
async fn wait_for_url(agent: &mut Child, http: &reqwest::Client) -> String {
    use std::io::BufRead;
    let log = agent.stderr.take().expect("piped stderr");
    let deadline = Instant::now() + Duration::from_millis(AGENT_START_TIMEOUT_MS);
    let url = tokio::task::spawn_blocking(move || {
        for line in std::io::BufReader::new(log).lines().map_while(Result::ok) {
            let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if let Some(url) = entry["url"].as_str() {
                return Some(url.to_owned());
            }
        }
        None
    })
    .await
    .expect("log reader")
    .expect("the agent logged its URL");
    while Instant::now() < deadline {
        if http.get(format!("{url}/health")).send().await.is_ok_and(|r| r.status().is_success()) {
            return url;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the agent did not become healthy in {AGENT_START_TIMEOUT_MS} ms");
}
