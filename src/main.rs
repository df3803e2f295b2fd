//! `a2a-mesh`: run the mesh and ask it questions.
//!
//! - `a2a-mesh up` starts the registry and the four agents in this process, each on its own port,
//!   on embedded defaults (an SQLite file under `data/`, the bundled sample catalogue, rules-based
//!   planning), and stops them cleanly on Ctrl-C.
//! - `a2a-mesh ask "query"` sends a query to the orchestrator and prints the answer readably.
//! - `a2a-mesh ingest --dataset DIR` (or `--file F.jsonl`) adds documents to the search index,
//!   into the data directory or to a running search agent.
//! - `a2a-mesh eval --dataset DIR --split test` measures retrieval quality on a BEIR collection.
//! - `a2a-mesh chat AGENT` holds a conversation with an agent over the conversation bus.
//! - `a2a-mesh catalog import FILE-OR-URL` registers the A2A agents an AI Catalog or ARD manifest
//!   lists with a registry.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2a_mesh::catalog::REGISTRY_URL_DEFAULT;
use a2a_mesh::{AUTH_ENV_PREFIX, LOCAL_AUTH_DIR, SuiteConfig, start};
use clap::{Parser, Subcommand};
use http::Method;
use indicatif::{ProgressBar, ProgressStyle};
use mesh_agent_kit::AgentArgs;
use mesh_auth::Role;
use mesh_client::{ClientError, HttpClient, reply_data, send_task};
use mesh_protocol::agents::{QueryAnswer, QueryOptions};
use mesh_protocol::seed::{ResponseStatus, TaskRequest};
use mesh_server::http::shutdown_signal;
use search::eval::{RETRIEVED_PER_QUERY, eval_data_dir, evaluate, index_collection, load_beir, open_eval_index};
use search::{
    DENSE_PROFILE, DenseStatus, IngestAnswer, IngestReport, SearchConfig, SearchIndex, open_index, read_corpus,
};

/// How long the tokens the command line mints for itself stay valid: one command's run (a chat
/// may last a while; the socket is authenticated once, when it opens).
const CLI_TOKEN_TTL: Duration = Duration::from_secs(12 * 3600);
/// Time `ask` waits for the orchestrator; above its own planning and search timeouts.
const ASK_TIMEOUT_MS: u64 = 60_000;
const ORCHESTRATOR_URL_DEFAULT: &str = "http://127.0.0.1:8001";
/// Documents per request when ingesting over HTTP: well under the agent's body limit for
/// abstract-length documents, and a few seconds of embedding each.
const INGEST_CHUNK_DOCUMENTS: usize = 64;
/// Time one chunk may take, embedding included (at 20 documents/s, a chunk takes about 3 s).
const INGEST_CHUNK_TIMEOUT_MS: u64 = 120_000;

#[derive(Debug, Parser)]
#[command(name = "a2a-mesh", version, about = "The A2A agent mesh")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The credential (a token or an API key) `ask`, `chat`, `ingest --search-url` and
    /// `catalog import` present to a suite that requires authentication.
    #[arg(long, global = true, env = "MESH_CREDENTIAL", hide_env_values = true)]
    credential: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the registry (:8000), orchestrator (:8001), search (:8002), entity-extraction (:8010)
    /// and profile-selection (:8011), the UI agent (:8020), the A2A gateway (:8030) and, when
    /// MESH_LLM_BASE_URL and MESH_LLM_MODEL name a model, the LLM agents (:8040 and up), until
    /// Ctrl-C. Each service reads its MESH_<SERVICE>_* environment variables, e.g.
    /// MESH_SEARCH_CORPUS_PATH=corpus.jsonl or MESH_REGISTRY_PORT=9000;
    /// MESH_BUS_KAFKA_BROKERS=HOST:PORT puts conversations on Kafka.
    Up {
        /// Turn authentication on with keys generated into data/auth (kept for the next run):
        /// every call then needs a token, which `token` mints and `ask`, `chat` and `ingest`
        /// mint for themselves; agents sign their cards and the registry requires it.
        #[arg(long)]
        auth: bool,
    },
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
    /// Add documents to the search index: a BEIR folder (its corpus.jsonl) or a JSON Lines file,
    /// with a progress bar. Documents already indexed unchanged are skipped; a changed one is
    /// replaced. Writes into the search agent's data directory (stop the suite first) or, with
    /// --search-url, sends them to a running search agent.
    Ingest {
        /// A BEIR collection folder; its corpus.jsonl is ingested.
        #[arg(long, value_name = "DIR", conflicts_with = "file", required_unless_present = "file")]
        dataset: Option<PathBuf>,
        /// A JSON Lines file of documents ({"_id","title","text"} plus optional "modality", "tags").
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        /// A running search agent to send the documents to, e.g. http://127.0.0.1:8002.
        #[arg(long, value_name = "URL", conflicts_with = "data_dir")]
        search_url: Option<String>,
        /// The search agent's data directory (default: MESH_SEARCH_DATA_DIR, else data/search).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Add the documents to this tenant's own, which only its searches see, rather than to
        /// the shared corpus every tenant searches.
        #[arg(long, value_name = "TENANT")]
        tenant: Option<String>,
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
        #[arg(long, value_delimiter = ',', default_value = "bm25,dense")]
        profiles: Vec<String>,
        /// Data directory the collection's index persists in between runs, so that document
        /// vectors are computed once (default: ~/.cache/a2a-mesh/indexes/<the dataset folder's name>);
        /// rebuilt when the indexing code, the schema, the model or the engine changed.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Talk with an agent (e.g. orchestrator) over the conversation bus, through the UI agent:
    /// one line, one message; answers print as they arrive.
    Chat {
        /// The agent's type, e.g. orchestrator.
        agent: String,
        /// Resume this conversation (its id is printed when a chat starts).
        #[arg(long)]
        conversation: Option<String>,
        #[arg(long, default_value = a2a_mesh::chat::UI_AGENT_URL_DEFAULT, value_name = "URL")]
        ui_url: String,
    },
    /// Mint a token (HS256) with the configured secret (MESH_AUTH_JWT_HS256_SECRET_FILE or
    /// MESH_AUTH_JWT_HS256_SECRET), else the one `up --auth` generated in data/auth.
    Token {
        #[arg(long)]
        subject: String,
        #[arg(long, default_value = "")]
        tenant: String,
        /// admin, agent or user; repeat or comma-separate for several.
        #[arg(long = "role", value_delimiter = ',', required = true)]
        roles: Vec<String>,
        /// How long it stays valid, e.g. 1h, 30m, 7d.
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        ttl: Duration,
    },
    /// Make an API key (printed once, with the hashed entry for the keys file).
    #[command(subcommand)]
    Auth(AuthCommand),
    /// Agent catalogs: AI Catalogs and Agentic Resource Discovery (ARD) manifests.
    #[command(subcommand)]
    Catalog(CatalogCommand),
}

#[derive(Debug, Subcommand)]
enum CatalogCommand {
    /// Register with a registry every A2A agent a catalog lists (an AI Catalog or an ARD
    /// manifest), each by its card's URL, so the registry fetches and checks its card as for any
    /// registration. Prints what became of each entry; exits non-zero when any agent failed.
    Import {
        /// The catalog: a file, or an http(s) URL such as another registry's
        /// http://HOST:8000/.well-known/ai-catalog.json.
        source: String,
        /// The registry to register the agents with (as an admin: --credential, else a token
        /// minted with the local keys).
        #[arg(long, default_value = REGISTRY_URL_DEFAULT, value_name = "URL")]
        registry: String,
        /// The credential to fetch a catalog URL with, when its server asks for one (the
        /// registry's, --credential, is never sent to the catalog's server).
        #[arg(long, env = "MESH_CATALOG_CREDENTIAL", hide_env_values = true)]
        catalog_credential: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum AuthCommand {
    /// A new random API key for SUBJECT: prints the key, then the `[[keys]]` entry to append to
    /// the keys file (which holds only its SHA-256).
    NewKey {
        subject: String,
        /// Roles: admin, agent, user (comma-separated).
        #[arg(long, value_delimiter = ',', required = true)]
        roles: Vec<String>,
        #[arg(long, default_value = "")]
        tenant: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let format = mesh_telemetry::LogFormat::from_env();
    // `up` serves every service in this process: each names its own spans.
    match cli.command {
        Command::Up { .. } => mesh_telemetry::init_suite(format),
        _ => mesh_telemetry::init(format),
    }
    // Without --credential, a command calling the suite mints a short-lived token of its own when
    // it can (`up --auth` generated the keys here, or MESH_AUTH_* names a secret): the operator
    // holding the keys can mint any token anyway.
    let own_credential = |role: Role| -> anyhow::Result<Option<String>> {
        match &cli.credential {
            Some(credential) => Ok(Some(credential.clone())),
            None => mint(&local_subject(), "", &[role], CLI_TOKEN_TTL),
        }
    };
    match cli.command {
        Command::Up { auth } => up(auth).await,
        Command::Ask { query, top_k, profiles, json, orchestrator_url } => {
            let options = QueryOptions { top_k, profiles, tenant_id: None };
            ask(&orchestrator_url, &query, options, json, own_credential(Role::User)?.as_deref()).await
        }
        Command::Ingest { dataset, file, search_url, data_dir, tenant } => {
            let path = match (dataset, file) {
                (Some(dataset), _) => dataset.join("corpus.jsonl"),
                (None, Some(file)) => file,
                (None, None) => anyhow::bail!("give --dataset DIR or --file FILE"),
            };
            match search_url {
                Some(url) => {
                    let credential = own_credential(Role::Admin)?;
                    ingest_over_http(&path, &url, tenant.as_deref(), credential.as_deref()).await
                }
                None => ingest_into_data_dir(&path, data_dir, tenant.as_deref()).await,
            }
        }
        Command::Chat { agent, conversation, ui_url } => {
            let credential = own_credential(Role::User)?;
            a2a_mesh::chat::run(&ui_url, &agent, conversation.as_deref(), credential.as_deref()).await
        }
        Command::Eval { dataset, split, profiles, data_dir } => {
            let data_dir = data_dir.unwrap_or_else(|| eval_data_dir(&dataset));
            eval(&dataset, &split, &profiles, &data_dir).await
        }
        Command::Token { subject, tenant, roles, ttl } => {
            let token = mint(&subject, &tenant, &parse_roles(&roles)?, ttl)?.ok_or_else(|| {
                anyhow::anyhow!(
                    "no key to sign with: set MESH_AUTH_JWT_HS256_SECRET_FILE, or run `up --auth` here first \
                     (it generates {LOCAL_AUTH_DIR})"
                )
            })?;
            println!("{token}");
            Ok(())
        }
        Command::Auth(command) => auth(command),
        Command::Catalog(CatalogCommand::Import { source, registry, catalog_credential }) => {
            let credential = own_credential(Role::Admin)?;
            catalog_import(&source, &registry, credential.as_deref(), catalog_credential.as_deref()).await
        }
    }
}

/// `catalog import`: prints one line per entry and the counts; an error when any agent failed.
async fn catalog_import(
    source: &str,
    registry_url: &str,
    credential: Option<&str>,
    catalog_credential: Option<&str>,
) -> anyhow::Result<()> {
    let http = HttpClient::with_reqwest()?;
    let catalog = a2a_mesh::catalog::load(source, &http.with_bearer(catalog_credential)?).await?;
    let outcomes = a2a_mesh::catalog::import(&catalog, registry_url, &http.with_bearer(credential)?).await;
    let (lines, all_registered) = a2a_mesh::catalog::report(&outcomes);
    for line in lines {
        println!("{line}");
    }
    anyhow::ensure!(all_registered, "not every agent of {source} was registered with {registry_url}");
    Ok(())
}

/// A token signed with the configured HS256 secret (`MESH_AUTH_*`, with its issuer and
/// audience), else with the one `up --auth` generated; `None` when there is neither.
fn mint(subject: &str, tenant: &str, roles: &[Role], ttl: Duration) -> anyhow::Result<Option<String>> {
    let configured: mesh_auth::AuthConfig = mesh_config::ConfigLoader::new(AUTH_ENV_PREFIX, None).load()?;
    if let Some(token) = configured.mint(subject, tenant, roles, ttl.as_secs())? {
        return Ok(Some(token));
    }
    let Some(keys) = mesh_auth::LocalKeys::find(Path::new(LOCAL_AUTH_DIR)) else { return Ok(None) };
    Ok(keys.auth_config().mint(subject, tenant, roles, ttl.as_secs())?)
}

/// Who the command line's own tokens name: the login name, as a local user.
fn local_subject() -> String {
    std::env::var("USER").ok().filter(|user| !user.is_empty()).unwrap_or_else(|| "local-user".to_owned())
}

fn parse_roles(names: &[String]) -> anyhow::Result<Vec<Role>> {
    names
        .iter()
        .map(|name| Role::parse(name).ok_or_else(|| anyhow::anyhow!("unknown role {name:?}: admin, agent or user")))
        .collect()
}

fn auth(command: AuthCommand) -> anyhow::Result<()> {
    match command {
        AuthCommand::NewKey { subject, roles, tenant } => {
            let key = mesh_auth::new_api_key();
            let entry = mesh_auth::ApiKeyEntry {
                sha256: mesh_auth::hash_api_key(&key),
                subject,
                tenant,
                roles: parse_roles(&roles)?,
            };
            println!("{key}");
            eprintln!("Keep the key above; append this entry to the keys file (it holds only the hash):");
            eprintln!("{}", toml::to_string(&mesh_auth::ApiKeyFile { keys: vec![entry] })?);
        }
    }
    Ok(())
}

async fn eval(dataset: &Path, split: &str, profiles: &[String], data_dir: &Path) -> anyhow::Result<()> {
    let collection = load_beir(dataset, split)?;
    println!(
        "{}: {} documents, {} judged {split} queries, top {RETRIEVED_PER_QUERY} retrieved per query",
        dataset.display(),
        collection.documents.len(),
        collection.queries.len()
    );
    let config = SearchConfig { data_dir: Some(data_dir.to_owned()), ..SearchConfig::default() };
    let index = dense_checked(open_eval_index(&config).await?, profiles.iter().any(|p| p == DENSE_PROFILE))?;
    if let Some(unknown) = profiles.iter().find(|p| !index.has_profile(p)) {
        let available: Vec<String> = index.profiles().into_iter().map(|p| p.name).collect();
        anyhow::bail!("unknown profile {unknown:?}; available: {}", available.join(", "));
    }
    let bar = progress_bar(collection.documents.len(), "indexing");
    let report = tokio::task::block_in_place(|| index_collection(&index, &collection, &|n| bar.inc(n as u64)))?;
    bar.finish_and_clear();
    println!("index in {}: {}", data_dir.display(), describe_ingestion(&report));
    println!("{:<16} {:>8} {:>11} {:>7} {:>12} {:>12}", "run", "nDCG@10", "Recall@100", "MRR@10", "p50 ms", "p99 ms");
    for report in evaluate(index, &collection, profiles).await? {
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

/// Opens the index of `config` for a command-line run; fails when the dense profile is needed
/// but its model cannot be had.
async fn open_for_cli(config: &SearchConfig, dense_needed: bool) -> anyhow::Result<Arc<SearchIndex>> {
    dense_checked(open_index(config).await?, dense_needed)
}

/// The index opened, or why not when the dense profile is needed and unavailable.
fn dense_checked(
    (index, status): (Arc<SearchIndex>, DenseStatus),
    dense_needed: bool,
) -> anyhow::Result<Arc<SearchIndex>> {
    if let (true, DenseStatus::Unavailable { reason }) = (dense_needed, &status) {
        anyhow::bail!("the dense profile is unavailable: {reason}");
    }
    Ok(index)
}

async fn ingest_into_data_dir(path: &Path, data_dir: Option<PathBuf>, tenant: Option<&str>) -> anyhow::Result<()> {
    let mut config: SearchConfig =
        AgentArgs::default().load(search::config::ENV_PREFIX, search::config::SEARCH_PORT_DEFAULT)?;
    if data_dir.is_some() {
        config.data_dir = data_dir;
    }
    let documents = read_corpus(Some(path))?;
    let index = open_for_cli(&config, false).await?;
    let bar = progress_bar(documents.len(), if index.has_dense() { "embedding" } else { "indexing" });
    let started = Instant::now();
    let report = tokio::task::block_in_place(|| index.upsert(tenant, documents, &|n| bar.inc(n as u64)))?;
    bar.finish_and_clear();
    println!("{}: {} in {:.1} s", path.display(), describe_ingestion(&report), started.elapsed().as_secs_f64());
    println!("the index now holds {} documents ({} with vectors)", index.len(), index.embedded());
    Ok(())
}

async fn ingest_over_http(
    path: &Path,
    search_url: &str,
    tenant: Option<&str>,
    credential: Option<&str>,
) -> anyhow::Result<()> {
    let documents = read_corpus(Some(path))?;
    let http = HttpClient::with_reqwest()?.with_bearer(credential)?;
    let mut url = format!("{}/documents", search_url.trim_end_matches('/'));
    if let Some(tenant) = tenant {
        // A valid tenant id is letters, digits, `_` and `-`: nothing to escape in a query.
        mesh_protocol::call::validate_tenant_id(tenant).map_err(anyhow::Error::msg)?;
        url = format!("{url}?tenant={tenant}");
    }
    let bar = progress_bar(documents.len(), "sending");
    let started = Instant::now();
    let mut total = IngestReport::default();
    let mut last = None;
    for chunk in documents.chunks(INGEST_CHUNK_DOCUMENTS) {
        let body = serde_json::json!({ "documents": chunk });
        let answer: IngestAnswer = http
            .call_json(Method::POST, &url, Some(&body), Duration::from_millis(INGEST_CHUNK_TIMEOUT_MS))
            .await
            .map_err(|error| match error {
                ClientError::Transport { source, .. } => {
                    anyhow::anyhow!("cannot reach the search agent at {search_url} ({source})")
                }
                error => error.into(),
            })?;
        total.added += answer.added;
        total.replaced += answer.replaced;
        total.unchanged += answer.unchanged;
        total.embedded += answer.embedded;
        last = Some(answer.documents);
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    println!("{}: {} in {:.1} s", path.display(), describe_ingestion(&total), started.elapsed().as_secs_f64());
    if let Some(documents) = last {
        println!("the search agent at {search_url} now holds {documents} documents");
    }
    Ok(())
}

fn describe_ingestion(report: &IngestReport) -> String {
    format!(
        "{} added, {} replaced, {} unchanged, {} embedded",
        report.added, report.replaced, report.unchanged, report.embedded
    )
}

fn progress_bar(total: usize, verb: &str) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    let template = format!("{verb} {{bar:40}} {{pos}}/{{len}} documents, {{per_sec}}, {{eta}} left");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

async fn up(auth: bool) -> anyhow::Result<()> {
    let local_keys = auth.then(|| mesh_auth::LocalKeys::ensure(Path::new(LOCAL_AUTH_DIR))).transpose()?;
    let suite = start(SuiteConfig::from_env(local_keys.as_ref())?).await?;
    let urls = suite.urls.clone();
    println!("a2a-mesh is up (Ctrl-C stops it)");
    println!("  registry           {}   (API description: {}/openapi.json)", urls.registry, urls.registry);
    println!("  orchestrator       {}", urls.orchestrator);
    println!("  search             {}", urls.search);
    println!("  entity-extraction  {}", urls.entity_extraction);
    println!("  profile-selection  {}", urls.profile_selection);
    let socket = urls.ui_agent.replacen("http://", "ws://", 1);
    println!("  ui-agent           {}   (WebSocket {socket}/ws?agent=orchestrator)", urls.ui_agent);
    println!("  gateway            {}   (every registered agent: {}/agents)", urls.gateway, urls.gateway);
    for (name, url) in &urls.llm_agents {
        println!("  {name:<18} {url}   (LLM agent)");
    }
    if urls.llm_agents.is_empty() {
        println!("{}", a2a_mesh::LLM_AGENTS_OFF_HINT);
    }
    println!();
    println!("Try:");
    println!("  cargo run --release -- ask \"show me robots playing soccer\"");
    println!(
        "  curl -s -X POST {}/tasks/send -H 'content-type: application/json' \\\n    -d '{{\"id\":\"q1\",\"messages\":[{{\"role\":\"user\",\"parts\":[{{\"type\":\"text\",\"text\":\"show me robots playing soccer\"}}]}}]}}'",
        urls.orchestrator
    );
    println!("  curl -s {}/capabilities/search", urls.registry);
    println!("  cargo run --release -- chat orchestrator    (then type a query)");
    if !urls.llm_agents.is_empty() {
        println!("  cargo run --release -- chat concierge       (a conversation with the LLM concierge)");
    }
    if auth {
        let admin = mint(&local_subject(), "", &[Role::Admin], CLI_TOKEN_TTL)?.unwrap_or_default();
        println!();
        println!("Authentication is on (keys in {LOCAL_AUTH_DIR}): `ask`, `chat` and `ingest` mint their own tokens;");
        println!("  cargo run --release -- token --subject alice --tenant acme --role user --ttl 1h");
        println!("mints one for curl (-H \"authorization: Bearer $TOKEN\"). The dashboard, signed in as an admin:");
        println!("  {}/dashboard/#token={admin}", urls.registry);
    }
    let stopped = suite.run_until(shutdown_signal()).await;
    // The spans of the last moments, still in the exporters' queues.
    mesh_telemetry::flush();
    stopped?;
    println!("a2a-mesh stopped");
    Ok(())
}

async fn ask(
    orchestrator_url: &str,
    query: &str,
    options: QueryOptions,
    json: bool,
    credential: Option<&str>,
) -> anyhow::Result<()> {
    let http = HttpClient::with_reqwest()?.with_bearer(credential)?;
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
    // The same text the orchestrator puts in its answer's text part, which `chat` shows.
    println!("{}", answer.to_text());
    if status == ResponseStatus::Partial {
        println!("Partial answer:");
        for warning in warnings {
            println!("  ! {warning}");
        }
    }
}
