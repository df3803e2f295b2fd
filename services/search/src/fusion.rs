//! Reciprocal Rank Fusion as seed 002 defines it: `score(d) = Σ over profiles of 1 / (k + rank)`,
//! with `rank` 0-indexed and k = 60 by default.
//!
//! With a 0-indexed rank this equals the canonical 1-based formula of Cormack et al. (2009), also
//! used by ranx and Elasticsearch, with k = 59: `1 / (60 + r0) = 1 / (59 + (r0 + 1))`.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

/// The seed's RRF constant (with 0-indexed ranks).
pub const RRF_K_DEFAULT: f64 = 60.0;

/// One profile's ranking: document keys, best first, with the profile's own score.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    pub profile: String,
    pub hits: Vec<(String, f64)>,
}

/// A fused document: its RRF score and where each profile ranked it (rank 0-indexed, score).
#[derive(Debug, Clone, PartialEq)]
pub struct Fused {
    pub key: String,
    pub score: f64,
    pub ranks: BTreeMap<String, (usize, f64)>,
}

/// Fuses `rankings` and returns every document, best first. Ties are broken by the best rank any
/// profile gave the document, then by key, so the output never depends on hash order.
pub fn reciprocal_rank_fusion(rankings: &[Ranking], k: f64) -> Vec<Fused> {
    let mut fused: HashMap<&str, Fused> = HashMap::new();
    for ranking in rankings {
        for (rank, (key, profile_score)) in ranking.hits.iter().enumerate() {
            let entry = fused.entry(key.as_str()).or_insert_with(|| Fused {
                key: key.clone(),
                score: 0.0,
                ranks: BTreeMap::new(),
            });
            // A profile that lists a document twice counts its best rank only.
            if !entry.ranks.contains_key(&ranking.profile) {
                entry.score += 1.0 / (k + rank as f64);
                entry.ranks.insert(ranking.profile.clone(), (rank, *profile_score));
            }
        }
    }
    let mut fused: Vec<Fused> = fused.into_values().collect();
    fused.sort_by(|a, b| {
        b.score
            .partial_cmp(&a.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| best_rank(a).cmp(&best_rank(b)))
            .then_with(|| a.key.cmp(&b.key))
    });
    fused
}

fn best_rank(fused: &Fused) -> usize {
    fused.ranks.values().map(|(rank, _)| *rank).min().unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ranking(profile: &str, keys: &[&str]) -> Ranking {
        Ranking { profile: profile.into(), hits: keys.iter().map(|k| (k.to_string(), 1.0)).collect() }
    }

    #[test]
    fn reproduces_the_seed_worked_example() {
        // The document sits at 0-indexed ranks 2, 5 and 1 in three profiles.
        let rankings = [
            ranking("a", &["x", "y", "doc"]),
            ranking("b", &["p", "q", "r", "s", "t", "doc"]),
            ranking("c", &["z", "doc"]),
        ];
        let fused = reciprocal_rank_fusion(&rankings, RRF_K_DEFAULT);
        let doc = fused.iter().find(|f| f.key == "doc").unwrap();
        assert!((doc.score - (1.0 / 62.0 + 1.0 / 65.0 + 1.0 / 61.0)).abs() < 1e-12);
        assert_eq!(format!("{:.4}", doc.score), "0.0479");
        assert_eq!(doc.ranks["b"], (5, 1.0));
        assert_eq!(fused[0].key, "doc", "three votes beat one top rank");
    }

    #[test]
    fn ties_break_by_best_rank_then_key() {
        let rankings = [ranking("a", &["m", "n"]), ranking("b", &["n", "m"])];
        let fused = reciprocal_rank_fusion(&rankings, RRF_K_DEFAULT);
        assert_eq!(fused.iter().map(|f| f.key.as_str()).collect::<Vec<_>>(), ["m", "n"]);
        let single = reciprocal_rank_fusion(&[ranking("a", &["b", "a"])], RRF_K_DEFAULT);
        assert_eq!(single[0].key, "b");
    }

    #[test]
    fn a_duplicate_within_one_profile_counts_once() {
        let fused = reciprocal_rank_fusion(&[ranking("a", &["d", "d"])], RRF_K_DEFAULT);
        assert_eq!(fused.len(), 1);
        assert!((fused[0].score - 1.0 / 60.0).abs() < 1e-12);
    }

    /// The canonical formula: 1-based ranks.
    fn canonical_rrf(rankings: &[Vec<u8>], k: f64) -> BTreeMap<u8, f64> {
        let mut scores = BTreeMap::new();
        for ranking in rankings {
            let mut seen = std::collections::BTreeSet::new();
            for (index, doc) in ranking.iter().enumerate() {
                if seen.insert(*doc) {
                    *scores.entry(*doc).or_insert(0.0) += 1.0 / (k + (index + 1) as f64);
                }
            }
        }
        scores
    }

    proptest! {
        #[test]
        fn equals_canonical_one_based_rrf_with_k_59(
            rankings in prop::collection::vec(prop::collection::vec(0u8..40, 0..30), 1..5)
        ) {
            let named: Vec<Ranking> = rankings
                .iter()
                .enumerate()
                .map(|(i, docs)| Ranking { profile: format!("p{i}"), hits: docs.iter().map(|d| (d.to_string(), 0.0)).collect() })
                .collect();
            let ours = reciprocal_rank_fusion(&named, RRF_K_DEFAULT);
            let canonical = canonical_rrf(&rankings, RRF_K_DEFAULT - 1.0);
            prop_assert_eq!(ours.len(), canonical.len());
            for fused in &ours {
                let expected = canonical[&fused.key.parse::<u8>().unwrap()];
                prop_assert!((fused.score - expected).abs() < 1e-12);
            }
            // Sorted by score, best first.
            prop_assert!(ours.windows(2).all(|w| w[0].score >= w[1].score));
        }
    }
}
