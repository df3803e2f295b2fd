//! `a2a-mesh`: run the mesh and ask it questions.
//!
//! - `a2a-mesh up` starts the registry and the four agents in this process, each on its own port,
//!   on embedded defaults (an SQLite file under `data/`, the bundled sample catalogue, rules-based
//!   planning), and stops them cleanly on Ctrl-C.
//! - `a2a-mesh ask "query"` sends a query to the orchestrator and prints the answer readably.
//! - `a2a-mesh eval --dataset DIR --split test` measures retrieval quality on a BEIR collection.

use std::path::{Path, PathBuf};
use std::time::Duration;

use a2a_mesh::{SuiteConfig, start};
use clap::{Parser, Subcommand};
use mesh_agent_kit::http::shutdown_signal;
use mesh_client::{ClientError, HttpClient, reply_data, send_task};
use mesh_protocol::agents::{QueryAnswer, QueryOptions};
use mesh_protocol::seed::{ResponseStatus, TaskRequest};
use search::SearchIndex;
use search::eval::{RETRIEVED_PER_QUERY, evaluate, load_beir};

/// Time `ask` waits for the orchestrator; above its own planning and search timeouts.
const ASK_TIMEOUT_MS: u64 = 60_000;
const ORCHESTRATOR_URL_DEFAULT: &str = "http://127.0.0.1:8001";

#[derive(Debug, Parser)]
#[command(name = "a2a-mesh", version, about = "The A2A agent mesh")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the registry (:8000), orchestrator (:8001), search (:8002), entity-extraction (:8010)
    /// and profile-selection (:8011) until Ctrl-C. Each service reads its MESH_<SERVICE>_*
    /// environment variables, e.g. MESH_SEARCH_CORPUS_PATH=corpus.jsonl or MESH_REGISTRY_PORT=9000.
    Up,
    /// Ask the orchestrator a question and print the fused answer.
    Ask {
        /// The query, e.g. "show me robots playing soccer".
        query: String,
        /// How many results to return.
        #[arg(long)]
        top_k: Option<usize>,
        /// Search with these profiles (comma-separated) instead of profile selection's choice.
        #[arg(long, value_delimiter = ',')]
        profiles: Option<Vec<String>>,
        /// Print the raw JSON answer.
        #[arg(long)]
        json: bool,
        #[arg(long, default_value = ORCHESTRATOR_URL_DEFAULT, value_name = "URL")]
        orchestrator_url: String,
    },
    /// Measure retrieval quality on a BEIR collection: nDCG@10, Recall@100 and MRR@10 for each
    /// profile and for their fusion, and query latency.
    Eval {
        /// The collection's folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).
        #[arg(long, value_name = "DIR")]
        dataset: PathBuf,
        /// Which judgments to use: tune on `train`, report on `test`.
        #[arg(long, default_value = "test")]
        split: String,
        /// Profiles to evaluate (comma-separated); their fusion is evaluated too.
        #[arg(long, value_delimiter = ',', default_value = "bm25,title")]
        profiles: Vec<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mesh_telemetry::init(mesh_telemetry::LogFormat::from_env());
    match Cli::parse().command {
        Command::Up => up().await,
        Command::Ask { query, top_k, profiles, json, orchestrator_url } => {
            ask(&orchestrator_url, &query, QueryOptions { top_k, profiles, tenant_id: None }, json).await
        }
        Command::Eval { dataset, split, profiles } => eval(&dataset, &split, &profiles).await,
    }
}

async fn eval(dataset: &Path, split: &str, profiles: &[String]) -> anyhow::Result<()> {
    if let Some(unknown) = profiles.iter().find(|p| !SearchIndex::has_profile(p)) {
        let available: Vec<String> = SearchIndex::profiles().into_iter().map(|p| p.name).collect();
        anyhow::bail!("unknown profile {unknown:?}; available: {}", available.join(", "));
    }
    let collection = load_beir(dataset, split)?;
    println!(
        "{}: {} documents, {} judged {split} queries, top {RETRIEVED_PER_QUERY} retrieved per query",
        dataset.display(),
        collection.documents.len(),
        collection.queries.len()
    );
    println!("{:<16} {:>8} {:>11} {:>7} {:>12} {:>12}", "run", "nDCG@10", "Recall@100", "MRR@10", "p50 ms", "p99 ms");
    for report in evaluate(&collection, profiles).await? {
        println!(
            "{:<16} {:>8.3} {:>11.3} {:>7.3} {:>12.2} {:>12.2}",
            report.name,
            report.mean.ndcg_at_10,
            report.mean.recall_at_100,
            report.mean.mrr_at_10,
            report.latency_p50_ms,
            report.latency_p99_ms
        );
    }
    Ok(())
}

async fn up() -> anyhow::Result<()> {
    let suite = start(SuiteConfig::from_env()?).await?;
    let urls = suite.urls.clone();
    println!("a2a-mesh is up (Ctrl-C stops it)");
    println!("  registry           {}   (API description: {}/openapi.json)", urls.registry, urls.registry);
    println!("  orchestrator       {}", urls.orchestrator);
    println!("  search             {}", urls.search);
    println!("  entity-extraction  {}", urls.entity_extraction);
    println!("  profile-selection  {}", urls.profile_selection);
    println!();
    println!("Try:");
    println!("  cargo run --release -- ask \"show me robots playing soccer\"");
    println!(
        "  curl -s -X POST {}/tasks/send -H 'content-type: application/json' \\\n    -d '{{\"id\":\"q1\",\"messages\":[{{\"role\":\"user\",\"parts\":[{{\"type\":\"text\",\"text\":\"show me robots playing soccer\"}}]}}]}}'",
        urls.orchestrator
    );
    println!("  curl -s {}/capabilities/search", urls.registry);
    suite.run_until(shutdown_signal()).await?;
    println!("a2a-mesh stopped");
    Ok(())
}

async fn ask(orchestrator_url: &str, query: &str, options: QueryOptions, json: bool) -> anyhow::Result<()> {
    let http = HttpClient::with_reqwest()?;
    let task = TaskRequest::from_text(None, query, Some(serde_json::to_value(&options)?));
    let response = match send_task(&http, orchestrator_url, &task, Duration::from_millis(ASK_TIMEOUT_MS)).await {
        Ok(response) => response,
        Err(ClientError::Transport { source, .. }) => {
            anyhow::bail!("cannot reach the orchestrator at {orchestrator_url} ({source}); is `a2a-mesh up` running?")
        }
        Err(error) => return Err(error.into()),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&response)?);
        return Ok(());
    }
    let answer: QueryAnswer = reply_data(orchestrator_url, &response)?;
    print_answer(&answer, response.status, &response.warnings);
    Ok(())
}

fn print_answer(answer: &QueryAnswer, status: ResponseStatus, warnings: &[String]) {
    let meta = &answer.metadata;
    println!("Query: {}", answer.query);
    if status == ResponseStatus::Partial {
        println!("Partial answer:");
        for warning in warnings {
            println!("  ! {warning}");
        }
    }
    println!(
        "Profile: {} (confidence {:.2}); searched with: {}",
        meta.selected_profile,
        meta.confidence,
        meta.profiles_used.join(", ")
    );
    if !meta.entities.is_empty() {
        let entities: Vec<String> = meta.entities.iter().map(|e| format!("{} ({:?})", e.text, e.entity_type)).collect();
        println!("Entities: {}", entities.join(", "));
    }
    println!();
    if answer.results.is_empty() {
        println!("No results.");
    }
    for (position, hit) in answer.results.iter().enumerate() {
        let modality = hit.modality.as_deref().unwrap_or("-");
        println!("{:>2}. [{modality}] {}  (score {:.4}, id {})", position + 1, hit.title, hit.score, hit.id);
        let ranks: Vec<String> =
            hit.profile_ranks.iter().map(|(profile, rank)| format!("{profile} #{}", rank.rank + 1)).collect();
        println!("    {}", ranks.join(", "));
    }
    println!();
    println!(
        "Time: planning {:.1} ms, search {:.1} ms, total {:.1} ms",
        meta.planning_time_ms, meta.search_time_ms, meta.total_time_ms
    );
    for call in &meta.agents {
        let agent = call.agent.as_deref().unwrap_or("-");
        let error = call.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
        println!("  {:<18} {:<18} {:<11} {:>7.1} ms{error}", call.capability, agent, call.status, call.time_ms);
    }
}
