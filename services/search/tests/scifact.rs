//! Retrieval quality on SciFact's train split (the split tuning is allowed on), asserted above
//! floors so a change that hurts ranking fails CI. Reads `../shared/data/scifact` beside the
//! repository (or `MESH_SCIFACT_DIR`); skips with a message where it is absent, and fails under CI.
//!
//! The index persists between runs (in `MESH_SCIFACT_INDEX_DIR`, else the user's cache folder,
//! shared with `a2a-mesh eval`), so the document vectors are computed by the first run only; it
//! is rebuilt when anything that shapes it changed (`search::eval::IndexKey`: the indexing code's
//! format version, the schema, the model's digest, the engine). The dense profile needs the
//! embedding model, found or downloaded as the agent does; without it only BM25 is checked, and
//! under CI the test fails.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use search::eval::{
    Collection, RunReport, eval_data_dir, evaluate, index_collection, load_beir, missing_judged_documents,
    open_eval_index, scifact_dir,
};
use search::{DENSE_PROFILE, DenseStatus, SearchConfig, SearchIndex};

/// Each floor sits a little under what the train split measures (2026-11-23, this index):
/// BM25 nDCG@10 0.695, Recall@100 0.932, MRR@10 0.663; dense nDCG@10 0.660; the fusion nDCG@10
/// 0.713 and Recall@100 0.948. The fusion must also beat BM25 alone.
const BM25_NDCG_AT_10_FLOOR: f64 = 0.68;
const BM25_RECALL_AT_100_FLOOR: f64 = 0.92;
const BM25_MRR_AT_10_FLOOR: f64 = 0.65;
const DENSE_NDCG_AT_10_FLOOR: f64 = 0.64;
const FUSED_NDCG_AT_10_FLOOR: f64 = 0.70;
const FUSED_RECALL_AT_100_FLOOR: f64 = 0.93;

fn index_dir(dataset: &Path) -> PathBuf {
    std::env::var_os("MESH_SCIFACT_INDEX_DIR").map(PathBuf::from).unwrap_or_else(|| eval_data_dir(dataset))
}

fn run<'a>(reports: &'a [RunReport], name: &str) -> &'a RunReport {
    reports.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no run {name}"))
}

/// The collection's index, and whether it has the dense profile (under CI it must).
async fn open_index(dataset: &Path, collection: &Collection) -> (Arc<SearchIndex>, bool) {
    let config = SearchConfig { data_dir: Some(index_dir(dataset)), ..SearchConfig::default() };
    let (index, status) = open_eval_index(&config).await.expect("the test index opens");
    let model = match status {
        DenseStatus::Available { .. } => Ok(()),
        other => Err(format!("the dense profile is {other:?}: the dense and fused checks cannot run")),
    };
    let dense = mesh_test_support::require("the embedding model", model).is_some();
    let report = index_collection(&index, collection, &|_| {}).unwrap();
    eprintln!("test index in {}: {report:?}", index_dir(dataset).display());
    (index, dense)
}

#[tokio::test(flavor = "multi_thread")]
async fn ranking_stays_above_its_floors_on_the_train_split() {
    let found = scifact_dir().ok_or("not found: set MESH_SCIFACT_DIR or place it at ../shared/data/scifact");
    let Some(dir) = mesh_test_support::require("SciFact", found) else { return };
    let collection = load_beir(&dir, "train").unwrap();
    assert_eq!(missing_judged_documents(&collection), 0);
    assert!(collection.queries.len() > 800, "{} judged train queries", collection.queries.len());
    let (index, dense) = open_index(&dir, &collection).await;
    assert_eq!(index.len(), collection.documents.len());
    let mut profiles = vec!["bm25".to_string()];
    if dense {
        assert_eq!(index.embedded(), collection.documents.len(), "every document has its vector");
        profiles.push(DENSE_PROFILE.to_string());
    }
    let reports = evaluate(index.clone(), &collection, &profiles).await.unwrap();
    for report in &reports {
        eprintln!(
            "{:<12} nDCG@10 {:.3}  Recall@100 {:.3}  MRR@10 {:.3}",
            report.name, report.mean.ndcg_at_10, report.mean.recall_at_100, report.mean.mrr_at_10
        );
    }
    let bm25 = run(&reports, "bm25");
    assert!(bm25.mean.ndcg_at_10 >= BM25_NDCG_AT_10_FLOOR, "{bm25:?}");
    assert!(bm25.mean.recall_at_100 >= BM25_RECALL_AT_100_FLOOR, "{bm25:?}");
    assert!(bm25.mean.mrr_at_10 >= BM25_MRR_AT_10_FLOOR, "{bm25:?}");
    if dense {
        let dense = run(&reports, DENSE_PROFILE);
        assert!(dense.mean.ndcg_at_10 >= DENSE_NDCG_AT_10_FLOOR, "{dense:?}");
        let fused = run(&reports, "bm25+dense");
        assert!(fused.mean.ndcg_at_10 >= FUSED_NDCG_AT_10_FLOOR, "{fused:?}");
        assert!(fused.mean.recall_at_100 >= FUSED_RECALL_AT_100_FLOOR, "{fused:?}");
        assert!(fused.mean.ndcg_at_10 > bm25.mean.ndcg_at_10, "fusion must beat BM25 alone: {fused:?}");
        a_repeated_query_takes_its_vector_from_the_cache(&index, &collection.queries[0].1);
    }
}

/// The second search of a query takes its vector from the query cache: no forward pass, the
/// same ranking.
fn a_repeated_query_takes_its_vector_from_the_cache(index: &SearchIndex, query: &str) {
    let before = index.query_cache();
    assert!(before.capacity > 0, "the cache is on again after the evaluation: {before:?}");
    let (first, embedding) = index.rank_timed(DENSE_PROFILE, query, None, 10, None).unwrap();
    assert!(embedding.is_some(), "a new query is encoded");
    let (again, embedding) = index.rank_timed(DENSE_PROFILE, query, None, 10, None).unwrap();
    assert_eq!((embedding, &again), (None, &first), "a repeated query is not encoded again");
    let after = index.query_cache();
    assert_eq!((after.hits - before.hits, after.misses - before.misses), (1, 1), "{after:?}");
}
