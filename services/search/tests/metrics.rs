//! The search agent's metrics that `deploy/observability` reads: each profile's ranking time and
//! the size of the index. Profiles rank on blocking threads, where a recorder local to the test's
//! thread does not reach, so this test binary installs a global recorder; one test per process.

use std::sync::Arc;

use mesh_protocol::agents::SearchRequest;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use search::config::{CANDIDATES_PER_PROFILE, TOP_K_DEFAULT, TOP_K_MAX};
use search::{Document, IndexLocation, SearchAgent, SearchIndex, SearchSettings};

const SERVICE: &str = "search-metered";

fn document(id: &str, title: &str, text: &str) -> Document {
    Document { id: id.into(), title: title.into(), text: text.into(), modality: None, tags: vec!["sports".into()] }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_search_records_each_profiles_ranking_time_and_the_index_size() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder of this process");
    let index = Arc::new(SearchIndex::open(&IndexLocation::Memory, None, 1).unwrap());
    let documents = vec![
        document("d1", "Robot soccer", "robots play soccer on a small field"),
        document("d2", "Chess engines", "engines search game trees"),
        document("d3", "Drone racing", "pilots race drones through gates"),
    ];
    index.upsert(None, documents, &|_| {}).unwrap();
    let settings = SearchSettings {
        rrf_k: mesh_rank::fusion::RRF_K_DEFAULT,
        top_k_default: TOP_K_DEFAULT,
        top_k_max: TOP_K_MAX,
        candidates_per_profile: CANDIDATES_PER_PROFILE,
    };
    let agent = SearchAgent::new(index, settings).with_service(SERVICE);
    let request = SearchRequest { profiles: vec!["bm25".into(), "tags".into()], top_k: Some(2), modality: None };
    for _ in 0..3 {
        agent.search("robots playing soccer", &request, None, None).await.unwrap();
    }

    let readings = mesh_test_support::metrics::read(&snapshotter);
    let ours = |name: &str, profile: Option<&str>| -> Vec<&DebugValue> {
        readings
            .iter()
            .filter(|(n, labels, _)| {
                n == name
                    && labels.contains(&("service".to_owned(), SERVICE.to_owned()))
                    && profile.is_none_or(|p| labels.contains(&("profile".to_owned(), p.to_owned())))
            })
            .map(|(_, _, value)| value)
            .collect()
    };
    for profile in ["bm25", "tags"] {
        let samples: Vec<f64> = ours("mesh_search_profile_duration_seconds", Some(profile))
            .into_iter()
            .flat_map(|value| match value {
                DebugValue::Histogram(samples) => samples.iter().map(|s| s.into_inner()).collect(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(samples.len(), 3, "one ranking time per search for {profile}: {samples:?}");
        assert!(samples.iter().all(|seconds| *seconds >= 0.0 && *seconds < 60.0), "{samples:?}");
    }
    let size = ours("mesh_search_index_documents", None);
    assert!(matches!(size.last(), Some(DebugValue::Gauge(documents)) if documents.into_inner() == 3.0), "{size:?}");
}
