//! Reciprocal Rank Fusion as seed 002 defines it: `score(d) = Σ over profiles of 1 / (k + rank)`,
//! with `rank` 0-indexed and k = 60 by default.
//!
//! With a 0-indexed rank this equals the canonical 1-based formula of Cormack et al. (2009), also
//! used by ranx and Elasticsearch, with k = 59: `1 / (60 + r0) = 1 / (59 + (r0 + 1))`.

use std::cmp::Ordering;

use rustc_hash::FxHashMap;

/// The seed's RRF constant (with 0-indexed ranks).
pub const RRF_K_DEFAULT: f64 = 60.0;
/// Marks "this profile did not rank the document" in the flat rank table.
const UNRANKED: u32 = u32::MAX;

/// One profile's ranking: document keys, best first, with the profile's own score.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    pub profile: String,
    pub hits: Vec<(String, f64)>,
}

/// A fused document: its RRF score and where each profile ranked it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused {
    pub key: String,
    pub score: f64,
    pub ranks: Vec<ProfileHit>,
}

#[derive(Debug, Clone, Copy)]
struct SortKey {
    score: f64,
    best_rank: u32,
    doc: u32,
}

/// Where one profile (by its index in the fused rankings) placed a document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProfileHit {
    pub profile: usize,
    /// 0-indexed.
    pub rank: usize,
    /// The profile's own score.
    pub score: f64,
}

/// Fuses `rankings` and returns the best `limit` documents, best first. Ties are broken by the
/// best rank any profile gave the document, then by key, so the output never depends on hash
/// order. Scores are accumulated in flat arrays and only the returned documents are built, which
/// keeps fusing 3 × 1,000 results well under a tenth of a millisecond.
pub fn reciprocal_rank_fusion(rankings: &[Ranking], k: f64, limit: usize) -> Vec<Fused> {
    weighted_reciprocal_rank_fusion(rankings, &[], k, limit)
}

/// [`reciprocal_rank_fusion`] with each ranking's terms multiplied by its weight
/// (`weights[i]` for `rankings[i]`; 1 where `weights` is shorter): `Σ w / (k + rank)`, for
/// rankings known to differ in quality.
pub fn weighted_reciprocal_rank_fusion(rankings: &[Ranking], weights: &[f64], k: f64, limit: usize) -> Vec<Fused> {
    let capacity: usize = rankings.iter().map(|r| r.hits.len()).sum();
    let mut slots: FxHashMap<&str, u32> = FxHashMap::with_capacity_and_hasher(capacity, Default::default());
    let mut keys: Vec<&str> = Vec::with_capacity(capacity);
    let mut entries: Vec<SortKey> = Vec::with_capacity(capacity);
    // The last profile (+1) that credited each document, so a profile listing a document twice
    // counts only its best rank.
    let mut credited_by: Vec<u32> = Vec::with_capacity(capacity);
    // The document at each position of each ranking, to recover ranks for the returned ones.
    let mut positions: Vec<Vec<u32>> = Vec::with_capacity(rankings.len());
    for (profile, ranking) in rankings.iter().enumerate() {
        let marker = profile as u32 + 1;
        let mut placed = Vec::with_capacity(ranking.hits.len());
        for (rank, (key, _)) in ranking.hits.iter().enumerate() {
            let doc = *slots.entry(key.as_str()).or_insert_with(|| {
                keys.push(key.as_str());
                entries.push(SortKey { score: 0.0, best_rank: UNRANKED, doc: entries.len() as u32 });
                credited_by.push(0);
                entries.len() as u32 - 1
            });
            placed.push(doc);
            let index = doc as usize;
            if credited_by[index] != marker {
                credited_by[index] = marker;
                let rank = u32::try_from(rank).unwrap_or(UNRANKED - 1);
                let entry = &mut entries[index];
                entry.score += weights.get(profile).copied().unwrap_or(1.0) / (k + f64::from(rank));
                entry.best_rank = entry.best_rank.min(rank);
            }
        }
        positions.push(placed);
    }
    let order = |a: &SortKey, b: &SortKey| {
        b.score
            .partial_cmp(&a.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.best_rank.cmp(&b.best_rank))
            .then_with(|| keys[a.doc as usize].cmp(keys[b.doc as usize]))
    };
    let limit = limit.min(entries.len());
    if limit < entries.len() && limit > 0 {
        entries.select_nth_unstable_by(limit - 1, order);
    }
    entries.truncate(limit);
    entries.sort_unstable_by(order);

    // Ranks of the returned documents only: one pass over each ranking.
    let mut result_of: FxHashMap<u32, usize> = entries.iter().enumerate().map(|(i, e)| (e.doc, i)).collect();
    let mut fused: Vec<Fused> = entries
        .iter()
        .map(|entry| Fused { key: keys[entry.doc as usize].to_owned(), score: entry.score, ranks: Vec::new() })
        .collect();
    for (profile, (placed, ranking)) in positions.iter().zip(rankings).enumerate() {
        for (rank, doc) in placed.iter().enumerate() {
            if let Some(&result) = result_of.get(doc) {
                let hits = &mut fused[result].ranks;
                if hits.last().is_none_or(|hit| hit.profile != profile) {
                    hits.push(ProfileHit { profile, rank, score: ranking.hits[rank].1 });
                }
            }
        }
    }
    result_of.clear();
    fused
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
        let fused = reciprocal_rank_fusion(&rankings, RRF_K_DEFAULT, usize::MAX);
        let doc = fused.iter().find(|f| f.key == "doc").unwrap();
        assert!((doc.score - (1.0 / 62.0 + 1.0 / 65.0 + 1.0 / 61.0)).abs() < 1e-12);
        assert_eq!(format!("{:.4}", doc.score), "0.0479");
        assert_eq!(doc.ranks[1], ProfileHit { profile: 1, rank: 5, score: 1.0 });
        assert_eq!(fused[0].key, "doc", "three votes beat one top rank");
    }

    #[test]
    fn ties_break_by_best_rank_then_key() {
        let rankings = [ranking("a", &["m", "n"]), ranking("b", &["n", "m"])];
        let fused = reciprocal_rank_fusion(&rankings, RRF_K_DEFAULT, usize::MAX);
        assert_eq!(fused.iter().map(|f| f.key.as_str()).collect::<Vec<_>>(), ["m", "n"]);
        let single = reciprocal_rank_fusion(&[ranking("a", &["b", "a"])], RRF_K_DEFAULT, usize::MAX);
        assert_eq!(single[0].key, "b");
    }

    #[test]
    fn a_duplicate_within_one_profile_counts_once() {
        let fused = reciprocal_rank_fusion(&[ranking("a", &["d", "d"])], RRF_K_DEFAULT, usize::MAX);
        assert_eq!(fused.len(), 1);
        assert!((fused[0].score - 1.0 / 60.0).abs() < 1e-12);
    }

    #[test]
    fn a_weight_scales_its_rankings_terms_and_missing_weights_are_one() {
        let rankings = [ranking("words", &["a", "b"]), ranking("meaning", &["b", "a"])];
        let fused = weighted_reciprocal_rank_fusion(&rankings, &[1.0, 2.0], 10.0, usize::MAX);
        assert_eq!(fused[0].key, "b", "the heavier ranking's first wins");
        assert!((fused[0].score - (1.0 / 11.0 + 2.0 / 10.0)).abs() < 1e-12);
        assert!((fused[1].score - (1.0 / 10.0 + 2.0 / 11.0)).abs() < 1e-12);
        let unweighted = weighted_reciprocal_rank_fusion(&rankings, &[], 10.0, usize::MAX);
        assert_eq!(unweighted, reciprocal_rank_fusion(&rankings, 10.0, usize::MAX));
    }

    /// The canonical formula: 1-based ranks.
    fn canonical_rrf(rankings: &[Vec<u8>], k: f64) -> std::collections::BTreeMap<u8, f64> {
        let mut scores = std::collections::BTreeMap::new();
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
            let ours = reciprocal_rank_fusion(&named, RRF_K_DEFAULT, usize::MAX);
            let canonical = canonical_rrf(&rankings, RRF_K_DEFAULT - 1.0);
            prop_assert_eq!(ours.len(), canonical.len());
            for fused in &ours {
                let expected = canonical[&fused.key.parse::<u8>().unwrap()];
                prop_assert!((fused.score - expected).abs() < 1e-12);
            }
            // Sorted by score, best first; a limit keeps exactly the head of the full order.
            prop_assert!(ours.windows(2).all(|w| w[0].score >= w[1].score));
            for limit in [0, 1, 3, 10] {
                let head = reciprocal_rank_fusion(&named, RRF_K_DEFAULT, limit);
                prop_assert_eq!(&head[..], &ours[..limit.min(ours.len())]);
            }
        }
    }
}
