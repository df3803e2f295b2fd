//! Retrieval quality on a BEIR collection (`corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`):
//! nDCG@10, Recall@100 and MRR@10 for each profile and for their fusion, with query latency,
//! measured through the same search path the agent serves.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use mesh_embedding::{Encoder, MODEL_ID, MODEL_WHEEL_SHA256};
use mesh_protocol::agents::SearchRequest;
use serde::{Deserialize, Serialize};

use crate::agent::{SearchAgent, SearchSettings};
use crate::config::SearchConfig;
use crate::corpus::{self, Document};
use crate::error::SearchError;
use crate::index::{IngestReport, SearchIndex, index_directory, schema_json};
use crate::{DenseStatus, load_encoder, open_index_with};
use mesh_rank::fusion::RRF_K_DEFAULT;

/// Results retrieved per query: the depth Recall@100 needs.
pub const RETRIEVED_PER_QUERY: usize = 100;
const NDCG_DEPTH: usize = 10;
const MRR_DEPTH: usize = 10;

/// A BEIR collection with the judgments of one split.
#[derive(Debug, Clone, PartialEq)]
pub struct Collection {
    pub documents: Vec<Document>,
    /// Judged queries of the split, in file order: id and text.
    pub queries: Vec<(String, String)>,
    /// query id -> document id -> relevance grade (> 0).
    pub qrels: HashMap<String, HashMap<String, u32>>,
}

#[derive(Debug, Deserialize)]
struct QueryLine {
    #[serde(rename = "_id")]
    id: String,
    text: String,
}

/// Reads `dir` (BEIR layout) with the judgments of `split` (`train`, `dev`, `test`).
pub fn load_beir(dir: &Path, split: &str) -> Result<Collection, SearchError> {
    let open = |name: &str| {
        let path = dir.join(name);
        std::fs::File::open(&path)
            .map(BufReader::new)
            .map_err(|source| SearchError::CorpusFile { path: path.display().to_string(), source })
    };
    let documents = corpus::read_jsonl(open("corpus.jsonl")?)?;
    let qrels = read_qrels(open(&format!("qrels/{split}.tsv"))?)?;
    let mut queries = Vec::new();
    for (index, line) in open("queries.jsonl")?.lines().enumerate() {
        let line = line.map_err(|e| SearchError::Corpus { line: index + 1, reason: e.to_string() })?;
        if line.trim().is_empty() {
            continue;
        }
        let query: QueryLine =
            serde_json::from_str(&line).map_err(|e| SearchError::Corpus { line: index + 1, reason: e.to_string() })?;
        if qrels.contains_key(&query.id) {
            queries.push((query.id, query.text));
        }
    }
    Ok(Collection { documents, queries, qrels })
}

/// Reads `query-id<TAB>corpus-id<TAB>score` lines after a header; grades of 0 are not relevant.
fn read_qrels(reader: impl BufRead) -> Result<HashMap<String, HashMap<String, u32>>, SearchError> {
    let mut qrels: HashMap<String, HashMap<String, u32>> = HashMap::new();
    for (index, line) in reader.lines().enumerate().skip(1) {
        let bad = |reason: String| SearchError::Corpus { line: index + 1, reason };
        let line = line.map_err(|e| bad(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let [query, document, grade] = fields[..] else {
            return Err(bad(format!("expected 3 tab-separated fields, got {}", fields.len())));
        };
        let grade: u32 = grade.trim().parse().map_err(|_| bad(format!("grade {grade:?} is not a whole number")))?;
        if grade > 0 {
            qrels.entry(query.to_owned()).or_default().insert(document.to_owned(), grade);
        }
    }
    Ok(qrels)
}

/// Quality of one ranking for one query.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Scores {
    pub ndcg_at_10: f64,
    pub recall_at_100: f64,
    pub mrr_at_10: f64,
}

/// Scores `ranked` (document ids, best first) against `relevant` (id -> grade), with linear gains
/// and log2 discounts as trec_eval (and so BEIR) computes nDCG.
pub fn score(ranked: &[String], relevant: &HashMap<String, u32>) -> Scores {
    if relevant.is_empty() {
        return Scores::default();
    }
    let discount = |position: usize| 1.0 / (position as f64 + 2.0).log2();
    let dcg: f64 = ranked
        .iter()
        .take(NDCG_DEPTH)
        .enumerate()
        .map(|(i, id)| f64::from(relevant.get(id).copied().unwrap_or(0)) * discount(i))
        .sum();
    let mut ideal: Vec<u32> = relevant.values().copied().collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal.iter().take(NDCG_DEPTH).enumerate().map(|(i, grade)| f64::from(*grade) * discount(i)).sum();
    let found = ranked.iter().take(RETRIEVED_PER_QUERY).filter(|id| relevant.contains_key(*id)).count();
    let first_relevant = ranked.iter().take(MRR_DEPTH).position(|id| relevant.contains_key(id));
    Scores {
        ndcg_at_10: if idcg > 0.0 { dcg / idcg } else { 0.0 },
        recall_at_100: found as f64 / relevant.len() as f64,
        mrr_at_10: first_relevant.map_or(0.0, |p| 1.0 / (p as f64 + 1.0)),
    }
}

/// Mean quality and latency of one way of ranking over all judged queries.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// A profile name, or the fused profiles joined by `+`.
    pub name: String,
    pub mean: Scores,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
}

/// SciFact for the tests and benchmarks: `MESH_SCIFACT_DIR`, else `../shared/data/scifact` beside
/// the repository; `None` where it is absent (they skip with a message).
pub fn scifact_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("MESH_SCIFACT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/scifact")));
    dir.join("corpus.jsonl").is_file().then_some(dir)
}

/// The data directory (the index in its `index` folder) a collection is evaluated in unless told
/// otherwise: under the user's cache folder, by the collection folder's name, shared by `eval`,
/// the tests and the benchmarks so the document vectors are computed once per machine.
pub fn eval_data_dir(dataset: &Path) -> PathBuf {
    let name = dataset
        .canonicalize()
        .ok()
        .and_then(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "dataset".to_owned());
    mesh_embedding::cache_dir().join("indexes").join(name)
}

/// The version of the code that turns documents into a stored index: the analyzer, the layout,
/// the document text given to the model. A persisted evaluation index records it and is rebuilt
/// when it differs, so floors are never measured on an index older code wrote. Bump it with any
/// change to that code: `tests::the_indexing_code_is_the_one_its_format_version_names` fails
/// until then.
pub const INDEX_FORMAT_VERSION: u32 = 2;

/// The file beside a persisted evaluation index naming what shaped it.
const INDEX_KEY_FILE: &str = "index-key.json";

/// Everything that shapes a persisted evaluation index; it is reused only when all of it agrees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexKey {
    pub format_version: u32,
    /// tantivy's schema, as JSON (fields, their options, the analyzer's name).
    pub schema: String,
    /// The model and the digest of its pinned files' wheel; `None` without a model (no vectors).
    pub model: Option<String>,
    pub model_digest: Option<String>,
    /// What computed the vectors: engines differ in their last bits.
    pub engine: Option<String>,
}

impl IndexKey {
    /// The key of an index written now, with `encoder` computing the vectors.
    pub fn current(encoder: Option<&Encoder>) -> Self {
        Self {
            format_version: INDEX_FORMAT_VERSION,
            schema: schema_json(),
            model: encoder.map(|_| MODEL_ID.to_owned()),
            model_digest: encoder.map(|_| MODEL_WHEEL_SHA256.to_owned()),
            engine: encoder.map(|e| e.engine().as_str().to_owned()),
        }
    }
}

/// Readies `data_dir` for an evaluation index written with `encoder`: when the index there was
/// written under another [`IndexKey`] (or none was recorded), deletes it so it is built afresh.
/// Returns whether it was deleted.
pub fn prepare_eval_data_dir(data_dir: &Path, encoder: Option<&Encoder>) -> Result<bool, SearchError> {
    let failed = |reason: String| SearchError::IndexDirectory { path: data_dir.display().to_string(), reason };
    let key = IndexKey::current(encoder);
    let key_file = data_dir.join(INDEX_KEY_FILE);
    let recorded: Option<IndexKey> =
        std::fs::read(&key_file).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok());
    if recorded.as_ref() == Some(&key) {
        return Ok(false);
    }
    let index = index_directory(data_dir);
    let rebuilt = index.exists();
    if rebuilt {
        tracing::info!(dir = %index.display(), ?recorded, ?key, "the evaluation index was written otherwise: rebuilding it");
        std::fs::remove_dir_all(&index).map_err(|e| failed(format!("cannot delete the stale index: {e}")))?;
    }
    std::fs::create_dir_all(data_dir).map_err(|e| failed(e.to_string()))?;
    let json = serde_json::to_vec_pretty(&key).map_err(|e| failed(e.to_string()))?;
    std::fs::write(&key_file, json).map_err(|e| failed(format!("cannot record the index key: {e}")))?;
    Ok(rebuilt)
}

/// [`crate::open_index`] for an evaluation index in `config`'s data directory, rebuilt first
/// when what shapes it changed ([`prepare_eval_data_dir`]).
pub async fn open_eval_index(config: &SearchConfig) -> Result<(Arc<SearchIndex>, DenseStatus), SearchError> {
    let data_dir = config.data_dir.clone().ok_or_else(|| SearchError::IndexDirectory {
        path: "(none)".to_owned(),
        reason: "an evaluation index needs a data directory".to_owned(),
    })?;
    let (encoder, status) = load_encoder(&config.dense).await;
    prepare_eval_data_dir(&data_dir, encoder.as_deref())?;
    open_index_with(config, encoder, status).await
}

/// Makes `index` hold exactly the collection's documents: adds or replaces what differs (so a
/// persisted evaluation index is reused as is) and deletes what the collection lacks.
pub fn index_collection(
    index: &SearchIndex,
    collection: &Collection,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<IngestReport, SearchError> {
    let wanted: HashSet<&str> = collection.documents.iter().map(|d| d.id.as_str()).collect();
    let stale: Vec<String> = index.ids(None).into_iter().filter(|id| !wanted.contains(id.as_str())).collect();
    if !stale.is_empty() {
        index.delete(None, &stale)?;
    }
    index.upsert(None, collection.documents.clone(), progress)
}

/// Evaluates each of `profiles` alone over `index` (holding the collection), then their fusion
/// (when there are several), all through [`SearchAgent::search`]. The latencies are those of
/// queries seen for the first time: the index's query cache is off while it runs (the fusion
/// would otherwise reuse the dense run's vectors), and on again, empty, afterwards.
pub async fn evaluate(
    index: Arc<SearchIndex>,
    collection: &Collection,
    profiles: &[String],
) -> Result<Vec<RunReport>, SearchError> {
    let cache_entries = index.query_cache().capacity;
    index.set_query_cache_entries(0);
    let reports = evaluate_uncached(index.clone(), collection, profiles).await;
    index.set_query_cache_entries(cache_entries);
    reports
}

async fn evaluate_uncached(
    index: Arc<SearchIndex>,
    collection: &Collection,
    profiles: &[String],
) -> Result<Vec<RunReport>, SearchError> {
    let settings = SearchSettings {
        rrf_k: RRF_K_DEFAULT,
        top_k_default: RETRIEVED_PER_QUERY,
        top_k_max: RETRIEVED_PER_QUERY,
        candidates_per_profile: RETRIEVED_PER_QUERY,
    };
    let agent = SearchAgent::new(index, settings);
    let mut runs: Vec<Vec<String>> = profiles.iter().map(|p| vec![p.clone()]).collect();
    if profiles.len() > 1 {
        runs.push(profiles.to_vec());
    }
    let mut reports = Vec::with_capacity(runs.len());
    for run in runs {
        let request = SearchRequest { profiles: run.clone(), top_k: Some(RETRIEVED_PER_QUERY), modality: None };
        let mut total = Scores::default();
        let mut latencies_ms = Vec::with_capacity(collection.queries.len());
        for (id, text) in &collection.queries {
            let started = Instant::now();
            let (results, _) = agent.search(text, &request, None, None).await?;
            latencies_ms.push(started.elapsed().as_secs_f64() * 1000.0);
            let ranked: Vec<String> = results.results.into_iter().map(|hit| hit.id).collect();
            let scores = score(&ranked, &collection.qrels[id]);
            total.ndcg_at_10 += scores.ndcg_at_10;
            total.recall_at_100 += scores.recall_at_100;
            total.mrr_at_10 += scores.mrr_at_10;
        }
        let n = collection.queries.len().max(1) as f64;
        reports.push(RunReport {
            name: run.join("+"),
            mean: Scores {
                ndcg_at_10: total.ndcg_at_10 / n,
                recall_at_100: total.recall_at_100 / n,
                mrr_at_10: total.mrr_at_10 / n,
            },
            latency_p50_ms: quantile(&mut latencies_ms, 0.5),
            latency_p99_ms: quantile(&mut latencies_ms, 0.99),
        });
    }
    Ok(reports)
}

/// Distinct judged documents missing from the corpus (a sign of a mismatched download).
pub fn missing_judged_documents(collection: &Collection) -> usize {
    let ids: HashSet<&str> = collection.documents.iter().map(|d| d.id.as_str()).collect();
    let judged: HashSet<&str> = collection.qrels.values().flat_map(|docs| docs.keys()).map(String::as_str).collect();
    judged.iter().filter(|id| !ids.contains(*id)).count()
}

/// The `p`-quantile (0..=1) of `samples` by nearest rank; 0 for no samples. Sorts in place.
pub fn quantile(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let rank = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len().max(1));
    samples.get(rank - 1).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn relevant(pairs: &[(&str, u32)]) -> HashMap<String, u32> {
        pairs.iter().map(|(id, grade)| (id.to_string(), *grade)).collect()
    }

    #[test]
    fn quantile_by_nearest_rank() {
        let mut samples = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&mut samples, 0.5), 3.0);
        assert_eq!(quantile(&mut samples, 0.99), 5.0);
        assert_eq!(quantile(&mut samples, 0.0), 1.0);
        assert_eq!(quantile(&mut [], 0.5), 0.0);
    }

    #[test]
    fn perfect_and_empty_rankings() {
        let judged = relevant(&[("a", 1), ("b", 1)]);
        let perfect = score(&ids(&["a", "b", "x"]), &judged);
        assert_eq!(perfect, Scores { ndcg_at_10: 1.0, recall_at_100: 1.0, mrr_at_10: 1.0 });
        assert_eq!(score(&[], &judged), Scores::default());
        assert_eq!(score(&ids(&["a"]), &HashMap::new()), Scores::default());
    }

    #[test]
    fn hand_computed_scores() {
        // One relevant document at position 3 (0-indexed 2).
        let judged = relevant(&[("r", 1)]);
        let scores = score(&ids(&["x", "y", "r"]), &judged);
        assert!((scores.ndcg_at_10 - 1.0 / 4f64.log2()).abs() < 1e-12);
        assert!((scores.mrr_at_10 - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(scores.recall_at_100, 1.0);
        // Graded: found the grade-1 document first, the grade-2 one second.
        let graded = relevant(&[("g1", 1), ("g2", 2)]);
        let scores = score(&ids(&["g1", "g2"]), &graded);
        let (dcg, idcg) = (1.0 + 2.0 / 3f64.log2(), 2.0 + 1.0 / 3f64.log2());
        assert!((scores.ndcg_at_10 - dcg / idcg).abs() < 1e-12);
        // Beyond the cut-offs nothing counts.
        let mut deep = ids(&["x"; 10]);
        deep.push("r".into());
        let scores = score(&deep, &judged);
        assert_eq!((scores.ndcg_at_10, scores.mrr_at_10, scores.recall_at_100), (0.0, 0.0, 1.0));
    }

    #[test]
    fn loads_a_beir_folder_keeping_only_judged_queries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("qrels")).unwrap();
        std::fs::write(dir.path().join("corpus.jsonl"), "{\"_id\":\"d1\",\"title\":\"T\",\"text\":\"x\"}\n").unwrap();
        std::fs::write(
            dir.path().join("queries.jsonl"),
            "{\"_id\":\"q1\",\"text\":\"x\"}\n{\"_id\":\"q2\",\"text\":\"y\"}\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("qrels/test.tsv"), "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td9\t0\n")
            .unwrap();
        let collection = load_beir(dir.path(), "test").unwrap();
        assert_eq!(collection.queries, [("q1".to_string(), "x".to_string())]);
        assert_eq!(collection.qrels["q1"]["d1"], 1);
        assert_eq!(missing_judged_documents(&collection), 0);
        std::fs::write(dir.path().join("qrels/bad.tsv"), "h\nq1 d1 1\n").unwrap();
        assert!(load_beir(dir.path(), "bad").unwrap_err().to_string().contains("tab-separated"));
        assert!(matches!(load_beir(dir.path(), "nope"), Err(SearchError::CorpusFile { .. })));
    }

    fn document(id: &str, title: &str, text: &str) -> Document {
        Document { id: id.into(), title: title.into(), text: text.into(), modality: None, tags: Vec::new() }
    }

    /// Three abstracts and four judged queries, the last with no word in any document: each
    /// lexical profile ranks the one relevant document first for the first three and finds
    /// nothing for the last, so every mean is 3/4 whatever the scores' values.
    fn small_collection() -> Collection {
        let documents = vec![
            document("d1", "Aspirin and fever", "aspirin lowers fever in adults"),
            document("d2", "Vitamin supplements", "vitamin intake and the common cold"),
            document("d3", "Sleep", "sleep improves memory consolidation"),
        ];
        let queries = [("q1", "aspirin fever"), ("q2", "vitamin cold"), ("q3", "sleep memory"), ("q4", "quantum")];
        let qrels = [("q1", "d1"), ("q2", "d2"), ("q3", "d3"), ("q4", "d1")]
            .iter()
            .map(|(query, document)| (query.to_string(), relevant(&[(document, 1)])))
            .collect();
        Collection {
            documents,
            queries: queries.iter().map(|(id, text)| (id.to_string(), text.to_string())).collect(),
            qrels,
        }
    }

    #[tokio::test]
    async fn evaluates_each_profile_and_their_fusion_against_hand_computed_means() {
        let collection = small_collection();
        let index = Arc::new(SearchIndex::open(&crate::IndexLocation::Memory, None, 1).unwrap());
        index.set_query_cache_entries(7);
        let report = index_collection(&index, &collection, &|_| {}).unwrap();
        assert_eq!(report.added, 3);
        let profiles = ["bm25".to_string(), "title".to_string()];
        let reports = evaluate(index.clone(), &collection, &profiles).await.unwrap();
        let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["bm25", "title", "bm25+title"]);
        for run in &reports {
            assert_eq!(run.mean, Scores { ndcg_at_10: 0.75, recall_at_100: 0.75, mrr_at_10: 0.75 }, "{}", run.name);
            assert!(run.latency_p50_ms > 0.0 && run.latency_p50_ms <= run.latency_p99_ms, "{}", run.name);
        }
        assert_eq!(index.query_cache().capacity, 7, "the query cache is given back its size");
    }

    #[test]
    fn indexing_a_collection_keeps_exactly_its_documents() {
        let collection = small_collection();
        let index = SearchIndex::open(&crate::IndexLocation::Memory, None, 1).unwrap();
        index.upsert(None, vec![document("stale", "Old", "no longer in the collection")], &|_| {}).unwrap();
        let report = index_collection(&index, &collection, &|_| {}).unwrap();
        assert_eq!((report.added, report.unchanged), (3, 0));
        let mut ids = index.ids(None);
        ids.sort();
        assert_eq!(ids, ["d1", "d2", "d3"], "the document the collection lacks is deleted");
        let again = index_collection(&index, &collection, &|_| {}).unwrap();
        assert_eq!((again.added, again.replaced, again.unchanged), (0, 0, 3), "an indexed collection is reused as is");
    }

    /// The files whose code shapes a stored index (analysis and layout, the document text given to
    /// the model, the model's forward pass), from this crate's folder.
    const INDEXING_SOURCES: &[&str] = &[
        "src/corpus.rs",
        "src/embed.rs",
        "src/index/keys.rs",
        "src/index/schema.rs",
        "src/index/write.rs",
        "../../shared/rank/src/analyzer.rs",
        "../../shared/embedding/src/encoder.rs",
        "../../shared/embedding/src/onnx.rs",
    ];

    /// Each [`INDEX_FORMAT_VERSION`] with the SHA-256 of [`INDEXING_SOURCES`] it was given for,
    /// oldest first. A change to those files appends a line with the next version.
    const INDEXING_SOURCES_BY_VERSION: &[(u32, &str)] = &[
        (1, "2b45c35ed1c024aa859392f8e9b91d8e47487ae3d1f47777e89fd5fd462e3299"),
        (2, "06effa1923c7ff1bd9c019df9914b6242425f1d2c62f0cf568a752453cdb3758"),
    ];

    fn indexing_sources_sha256() -> String {
        use sha2::Digest;
        let mut hasher = sha2::Sha256::new();
        for path in INDEXING_SOURCES {
            let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
            let text = std::fs::read(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
            hasher.update(path.as_bytes());
            hasher.update((text.len() as u64).to_le_bytes());
            hasher.update(&text);
        }
        format!("{:x}", hasher.finalize())
    }

    #[test]
    fn the_indexing_code_is_the_one_its_format_version_names() {
        let versions: Vec<u32> = INDEXING_SOURCES_BY_VERSION.iter().map(|(version, _)| *version).collect();
        assert!(versions.windows(2).all(|pair| pair[0] < pair[1]), "versions only grow: {versions:?}");
        let (version, digest) = INDEXING_SOURCES_BY_VERSION.last().copied().unwrap();
        let actual = indexing_sources_sha256();
        assert!(
            version == INDEX_FORMAT_VERSION && digest == actual,
            "the indexing code changed: bump INDEX_FORMAT_VERSION to {} (persisted evaluation indexes are then \
             rebuilt) and append ({}, \"{actual}\") to INDEXING_SOURCES_BY_VERSION",
            version + 1,
            version + 1,
        );
    }

    #[test]
    fn an_evaluation_index_written_under_another_key_is_deleted_and_the_current_key_recorded() {
        let data = tempfile::tempdir().unwrap();
        let location = crate::IndexLocation::Directory(index_directory(data.path()));
        let write_one = || {
            let index = SearchIndex::open(&location, None, 1).unwrap();
            index.upsert(None, vec![document("d1", "Aspirin", "aspirin lowers fever")], &|_| {}).unwrap();
        };
        write_one();
        // An index with no key recorded (written before keys, or by hand) is not trusted.
        assert!(prepare_eval_data_dir(data.path(), None).unwrap());
        assert!(!index_directory(data.path()).exists());
        let recorded: IndexKey =
            serde_json::from_slice(&std::fs::read(data.path().join(INDEX_KEY_FILE)).unwrap()).unwrap();
        assert_eq!(recorded, IndexKey::current(None));
        assert_eq!(recorded.format_version, INDEX_FORMAT_VERSION);
        assert!(recorded.schema.contains("\"embedding_model\""), "{}", recorded.schema);

        // Under the same key the index is kept.
        write_one();
        assert!(!prepare_eval_data_dir(data.path(), None).unwrap());
        assert_eq!(SearchIndex::open(&location, None, 1).unwrap().len(), 1);

        // Any part of the key differing rebuilds it: here the format version, then the model.
        for stale in [
            IndexKey { format_version: INDEX_FORMAT_VERSION - 1, ..IndexKey::current(None) },
            IndexKey {
                model: Some(MODEL_ID.to_owned()),
                model_digest: Some("another digest".to_owned()),
                engine: Some("candle".to_owned()),
                ..IndexKey::current(None)
            },
        ] {
            std::fs::write(data.path().join(INDEX_KEY_FILE), serde_json::to_vec(&stale).unwrap()).unwrap();
            assert!(prepare_eval_data_dir(data.path(), None).unwrap(), "{stale:?}");
            assert!(SearchIndex::open(&location, None, 1).unwrap().is_empty());
            write_one();
        }
    }
}
