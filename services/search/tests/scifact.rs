//! Retrieval quality on SciFact's train split (the split tuning is allowed on), asserted above
//! floors so a change that hurts ranking fails CI. Reads `../shared/data/scifact` beside the
//! repository (or `MESH_SCIFACT_DIR`); skips with a message where it is absent.

use std::path::PathBuf;

use search::eval::{evaluate, load_beir, missing_judged_documents};

/// Floors a little under what BM25 measures on the train split today (nDCG@10 0.695,
/// Recall@100 0.932, MRR@10 0.663).
const BM25_NDCG_AT_10_FLOOR: f64 = 0.68;
const BM25_RECALL_AT_100_FLOOR: f64 = 0.92;
const BM25_MRR_AT_10_FLOOR: f64 = 0.65;

fn scifact_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("MESH_SCIFACT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/scifact")));
    dir.join("corpus.jsonl").is_file().then_some(dir)
}

#[tokio::test]
async fn bm25_stays_above_its_floors_on_the_train_split() {
    let Some(dir) = scifact_dir() else {
        eprintln!("skipping: SciFact not found (set MESH_SCIFACT_DIR or place it at ../shared/data/scifact)");
        return;
    };
    let collection = load_beir(&dir, "train").unwrap();
    assert_eq!(missing_judged_documents(&collection), 0);
    assert!(collection.queries.len() > 800, "{} judged train queries", collection.queries.len());
    let reports = evaluate(&collection, &["bm25".to_string(), "title".to_string()]).await.unwrap();
    for report in &reports {
        eprintln!(
            "{:<12} nDCG@10 {:.3}  Recall@100 {:.3}  MRR@10 {:.3}",
            report.name, report.mean.ndcg_at_10, report.mean.recall_at_100, report.mean.mrr_at_10
        );
    }
    let bm25 = &reports[0];
    assert!(bm25.mean.ndcg_at_10 >= BM25_NDCG_AT_10_FLOOR, "{bm25:?}");
    assert!(bm25.mean.recall_at_100 >= BM25_RECALL_AT_100_FLOOR, "{bm25:?}");
    assert!(bm25.mean.mrr_at_10 >= BM25_MRR_AT_10_FLOOR, "{bm25:?}");
    // Fusing BM25 with the weaker title-only profile must at least keep BM25's reach.
    let fused = reports.iter().find(|r| r.name == "bm25+title").unwrap();
    assert!(fused.mean.recall_at_100 >= BM25_RECALL_AT_100_FLOOR - 0.03, "{fused:?}");
}
