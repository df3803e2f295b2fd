//! Search speed on SciFact (5,183 abstracts, the 300 test queries), each figure beside its
//! reference from the same run:
//!
//! 1. query latency, p50/p99, of `bm25`, `dense` and `bm25+dense` (the fusion, query embedding
//!    included: the query cache is off), interleaved round by round; ratios against `bm25`; then
//!    `dense` and `bm25+dense` again for queries seen before (their vectors in the query cache),
//!    with ratios against the same profiles uncached;
//! 2. indexing throughput in documents/s: BM25 alone, and vectors on one thread against every
//!    core (the ratio is what the batching across cores buys);
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

use search::eval::{eval_data_dir, index_collection, quantile};
use search::{DENSE_PROFILE, DenseConfig, IndexLocation, SearchAgent, SearchIndex, SearchSettings, index_directory};

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

    let queries: Vec<&str> = collection.queries.iter().map(|(_, text)| text.as_str()).collect();

    // 1. Query latency.
    let data_dir = eval_data_dir(&dataset);
    {
        let location = IndexLocation::Directory(index_directory(&data_dir));
        let index = SearchIndex::open(&location, Some(encoder.clone()), threads).expect("index opens");
        let report = index_collection(&index, &collection, &|_| {}).expect("SciFact indexed");
        println!("index at {}: {report:?}", data_dir.display());
        let settings =
            SearchSettings { rrf_k: 60.0, top_k_default: TOP_K, top_k_max: 100, candidates_per_profile: 100 };
        let index = Arc::new(index);
        let agent = SearchAgent::new(index.clone(), settings);
        let runs: [&[&str]; 3] = [&["bm25"], &[DENSE_PROFILE], &["bm25", DENSE_PROFILE]];
        // Every query is a new one: the cache would otherwise answer rounds after the first.
        index.set_query_cache_entries(0);
        let mut samples_ms: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
        for _ in 0..rounds {
            for (run, profiles) in runs.iter().enumerate() {
                samples_ms[run].extend(support::latencies_ms(&agent, profiles, &queries).await);
            }
        }
        let bm25_p50 = quantile(&mut samples_ms[0].clone(), 0.5);
        println!();
        println!(
            "query latency over {rounds} interleaved rounds of {} queries (top {TOP_K})",
            collection.queries.len()
        );
        println!("{:<12} {:>10} {:>10} {:>16}", "profiles", "p50 ms", "p99 ms", "p50 / bm25 p50");
        for (run, profiles) in runs.iter().enumerate() {
            let p50 = quantile(&mut samples_ms[run], 0.5);
            let p99 = quantile(&mut samples_ms[run], 0.99);
            println!("{:<12} {p50:>10.2} {p99:>10.2} {:>16.2}", profiles.join("+"), p50 / bm25_p50);
        }

        // Queries seen before: one pass fills the cache, the next rounds find their vectors there.
        index.set_query_cache_entries(mesh_embedding::QUERY_CACHE_ENTRIES_DEFAULT);
        support::latencies_ms(&agent, &[DENSE_PROFILE], &queries).await;
        println!();
        println!("repeated queries (vectors from the query cache), against the same profiles uncached");
        println!("{:<12} {:>10} {:>10} {:>16}", "profiles", "p50 ms", "p99 ms", "p50 / uncached");
        for (run, profiles) in runs.iter().enumerate().skip(1) {
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
    }

    // 2. Indexing throughput.
    println!();
    println!("indexing throughput");
    let started = Instant::now();
    let lexical = SearchIndex::open(&IndexLocation::Memory, None, 1).expect("index opens");
    lexical.upsert(None, collection.documents.clone(), &|_| {}).expect("indexed");
    let bm25_rate = collection.documents.len() as f64 / started.elapsed().as_secs_f64();
    println!("{:<34} {bm25_rate:>10.0} documents/s", "bm25 (all documents)");
    let sample: Vec<_> = collection.documents.iter().take(embed_sample).cloned().collect();
    let mut rates = Vec::new();
    for embedding_threads in [1, threads] {
        let index = SearchIndex::open(&IndexLocation::Memory, Some(encoder.clone()), embedding_threads).unwrap();
        let started = Instant::now();
        index.upsert(None, sample.clone(), &|_| {}).expect("embedded");
        let rate = sample.len() as f64 / started.elapsed().as_secs_f64();
        println!(
            "{:<34} {rate:>10.1} documents/s",
            format!("dense, {embedding_threads} thread(s), {} docs", sample.len())
        );
        rates.push(rate);
    }
    println!("{:<34} {:>10.2}", "dense speed-up, all cores / one", rates[1] / rates[0]);

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
