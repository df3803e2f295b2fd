//! Document vectors in one contiguous matrix. Up to [`QUANTIZED_MIN_ROWS_DEFAULT`] documents a
//! query is scored exactly against every one: a few milliseconds, with perfect recall. Past it,
//! reading every `f32` row would cost more than a query may take (1.5 GB per query at a million
//! documents of 384 dimensions), so a first pass compares the signs of the rows' values with the
//! query's (one bit a dimension, a thirty-second of the bytes) and keeps [`RESCORED_PER_RESULT`]
//! times the candidates asked; only those are scored exactly. Signs are taken as vectors arrive,
//! so the index needs no build step.

mod signs;
mod top;

use std::collections::HashMap;

use self::top::{Score, Scored};

pub use mesh_embedding::QUANTIZED_MIN_ROWS_DEFAULT;
/// Candidates the first pass keeps per result asked, scored exactly after it. Signs order rows
/// coarsely, so the pass keeps many: scoring a candidate exactly costs about as much as comparing
/// the signs of a few hundred rows.
pub const RESCORED_PER_RESULT: usize = 40;
/// Fewest candidates the first pass keeps, however few results are asked (measured at a million
/// documents, top 10: recall 0.956 against the exact search keeping 1,000, 0.988 keeping 4,000).
const RESCORED_MIN: usize = 4_000;

/// How a search over the vectors is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DenseMethod {
    /// Every row scored exactly.
    Exact,
    /// The rows' signs compared first, the best candidates scored exactly.
    Quantized,
}

/// Unit-length vectors of documents, by document id.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseVectors {
    dimensions: usize,
    ids: Vec<String>,
    /// Row `i` (of `dimensions` values) is the vector of `ids[i]`.
    values: Vec<f32>,
    /// Row `i`'s signs ([`signs::pack`]), `words` of them.
    signs: Vec<u64>,
    /// Words of signs a row takes.
    words: usize,
    /// Row `i`'s [`signs::tiebreak`], which orders rows the signs place alike.
    tiebreaks: Vec<f32>,
    rows_by_id: HashMap<String, usize>,
    /// From this many rows on, searches compare signs first.
    quantized_min_rows: usize,
    /// Threads a long scan is split over.
    threads: usize,
}

impl Default for DenseVectors {
    fn default() -> Self {
        Self::new(0)
    }
}

impl DenseVectors {
    pub fn new(dimensions: usize) -> Self {
        Self {
            dimensions,
            ids: Vec::new(),
            values: Vec::new(),
            signs: Vec::new(),
            words: signs::words(dimensions),
            tiebreaks: Vec::new(),
            rows_by_id: HashMap::new(),
            quantized_min_rows: QUANTIZED_MIN_ROWS_DEFAULT,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// Searches compare signs first from `rows` documents on (0: always; `usize::MAX`: never).
    pub fn set_quantized_min_rows(&mut self, rows: usize) {
        self.quantized_min_rows = rows;
    }

    /// How searches are answered at the current size.
    pub fn method(&self) -> DenseMethod {
        if self.ids.len() >= self.quantized_min_rows { DenseMethod::Quantized } else { DenseMethod::Exact }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn contains(&self, id: &str) -> bool {
        self.rows_by_id.contains_key(id)
    }

    /// The vector of `id`.
    pub fn get(&self, id: &str) -> Option<&[f32]> {
        let row = *self.rows_by_id.get(id)?;
        self.values.get(self.span(row))
    }

    /// Where row `row` lies in `values`.
    fn span(&self, row: usize) -> std::ops::Range<usize> {
        row * self.dimensions..(row + 1) * self.dimensions
    }

    /// Where row `row` lies in `signs`.
    fn signs_span(&self, row: usize) -> std::ops::Range<usize> {
        row * self.words..(row + 1) * self.words
    }

    /// Adds or replaces the vector of `id`. A vector of the wrong length is refused (it would
    /// shift every row after it), which is a bug upstream, not bad input.
    pub fn upsert(&mut self, id: &str, vector: &[f32]) -> bool {
        if vector.len() != self.dimensions {
            return false;
        }
        let row = match self.rows_by_id.get(id) {
            Some(&row) => row,
            None => {
                let row = self.ids.len();
                self.rows_by_id.insert(id.to_owned(), row);
                self.ids.push(id.to_owned());
                self.values.resize(self.values.len() + self.dimensions, 0.0);
                self.signs.resize(self.signs.len() + self.words, 0);
                self.tiebreaks.push(signs::tiebreak(id));
                row
            }
        };
        let (span, signs_span) = (self.span(row), self.signs_span(row));
        self.values[span].copy_from_slice(vector);
        signs::pack(vector, &mut self.signs[signs_span]);
        true
    }

    /// Removes the vector of `id` by moving the last row into its place.
    pub fn remove(&mut self, id: &str) {
        let Some(row) = self.rows_by_id.remove(id) else { return };
        let last = self.ids.len() - 1;
        if row != last {
            let (values_from, values_to) = (self.span(last), self.span(row).start);
            let (signs_from, signs_to) = (self.signs_span(last), self.signs_span(row).start);
            self.values.copy_within(values_from, values_to);
            self.signs.copy_within(signs_from, signs_to);
            self.tiebreaks.swap(row, last);
            self.ids.swap(row, last);
            self.rows_by_id.insert(self.ids[row].clone(), row);
        }
        self.ids.pop();
        self.tiebreaks.pop();
        self.values.truncate(last * self.dimensions);
        self.signs.truncate(last * self.words);
    }

    /// The `limit` documents most similar to `query` (a unit vector) among those whose id is
    /// `visible`, best first; equal scores rank by id, so every replica answers alike.
    pub fn nearest(&self, query: &[f32], limit: usize, visible: impl Fn(&str) -> bool + Sync) -> Vec<(String, f64)> {
        if query.len() != self.dimensions || limit == 0 || self.ids.is_empty() {
            return Vec::new();
        }
        let exact = Exact { vectors: self, query };
        let found = match self.method() {
            DenseMethod::Exact => top::best(&self.ids, limit, self.threads, &exact, &visible),
            DenseMethod::Quantized => {
                let mut query_signs = vec![0_u64; self.words];
                signs::pack(query, &mut query_signs);
                let coarse = Signs { vectors: self, query_signs: &query_signs };
                let keep = limit.saturating_mul(RESCORED_PER_RESULT).max(RESCORED_MIN);
                let mut rescored: Vec<Scored<'_>> = top::best(&self.ids, keep, self.threads, &coarse, &visible)
                    .into_iter()
                    .map(|candidate| Scored { score: exact.score(candidate.row), ..candidate })
                    .collect();
                rescored.sort_unstable_by(|a, b| b.cmp(a));
                rescored.truncate(limit);
                rescored
            }
        };
        found.into_iter().map(|scored| (scored.id.to_owned(), f64::from(scored.score))).collect()
    }
}

/// Scores rows exactly: the dot product of their values with the query.
struct Exact<'a> {
    vectors: &'a DenseVectors,
    query: &'a [f32],
}

impl Score for Exact<'_> {
    #[inline(always)]
    fn score(&self, row: usize) -> f32 {
        mesh_embedding::dot(&self.vectors.values[self.vectors.span(row)], self.query)
    }
}

/// Scores rows by how few dimensions' signs differ from the query's: the order of their
/// angles to it, roughly. Thousands of rows differ in as many dimensions, so each row's tiebreak
/// (below one) orders those: ranking them by id instead would read a string at each of the
/// many comparisons between equals, in the scan and in the heap of candidates.
struct Signs<'a> {
    vectors: &'a DenseVectors,
    query_signs: &'a [u64],
}

impl Score for Signs<'_> {
    #[inline(always)]
    fn score(&self, row: usize) -> f32 {
        let signs = &self.vectors.signs[self.vectors.signs_span(row)];
        -(signs::distance(signs, self.query_signs) as f32) - self.vectors.tiebreaks[row]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn unit(values: &[f32]) -> Vec<f32> {
        let norm = values.iter().map(|v| v * v).sum::<f32>().sqrt();
        values.iter().map(|v| v / norm).collect()
    }

    #[test]
    fn nearest_ranks_by_cosine_and_breaks_ties_by_id() {
        let mut vectors = DenseVectors::new(2);
        vectors.upsert("far", &unit(&[0.0, 1.0]));
        vectors.upsert("b-near", &unit(&[1.0, 0.1]));
        vectors.upsert("a-near", &unit(&[1.0, 0.1]));
        vectors.upsert("middle", &unit(&[1.0, 1.0]));
        let hits = vectors.nearest(&unit(&[1.0, 0.0]), 3, |_| true);
        let ids: Vec<_> = hits.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["a-near", "b-near", "middle"]);
        let hidden = vectors.nearest(&unit(&[1.0, 0.0]), 3, |id| !id.ends_with("near"));
        let ids: Vec<_> = hidden.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["middle", "far"], "documents not visible are never ranked");
        assert!(vectors.nearest(&[1.0, 0.0, 0.0], 3, |_| true).is_empty(), "wrong query length");
        assert!(!vectors.upsert("bad", &[1.0]), "wrong vector length");
    }

    #[test]
    fn upsert_replaces_and_remove_keeps_rows_consistent() {
        let mut vectors = DenseVectors::new(2);
        vectors.upsert("x", &[1.0, 0.0]);
        vectors.upsert("y", &[0.0, 1.0]);
        vectors.upsert("z", &unit(&[1.0, 1.0]));
        vectors.upsert("x", &[0.0, 1.0]);
        assert_eq!(vectors.len(), 3);
        vectors.remove("y");
        vectors.remove("missing");
        assert_eq!(vectors.len(), 2);
        assert!(!vectors.contains("y") && vectors.contains("x") && vectors.contains("z"));
        assert_eq!(vectors.get("x"), Some(&[0.0, 1.0][..]), "the replacing vector");
        assert_eq!(vectors.get("z"), Some(&unit(&[1.0, 1.0])[..]), "the last row, moved into the removed one's place");
        assert_eq!(vectors.get("y"), None);
        let hits = vectors.nearest(&[0.0, 1.0], 5, |_| true);
        assert_eq!(hits[0], ("x".to_owned(), 1.0));
        assert_eq!(hits[1].0, "z");
    }

    /// `count` unit vectors of `dimensions` values, the same for the same `seed`: mixtures of a
    /// few directions, so that neighbours are close as a real corpus's are, not spread evenly.
    fn clustered(count: usize, dimensions: usize, seed: u64) -> Vec<Vec<f32>> {
        clustered_in(count, dimensions, seed, 8)
    }

    /// [`clustered`] around `topics` directions.
    fn clustered_in(count: usize, dimensions: usize, seed: u64, topics: usize) -> Vec<Vec<f32>> {
        let mut state = seed;
        let mut next = move || {
            // xorshift64*: deterministic, no dependency.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let centres: Vec<Vec<f32>> = (0..topics).map(|_| (0..dimensions).map(|_| next()).collect()).collect();
        (0..count)
            .map(|i| {
                let centre = &centres[i % centres.len()];
                unit(&centre.iter().map(|c| c + 0.6 * next()).collect::<Vec<_>>())
            })
            .collect()
    }

    #[test]
    fn the_sign_pass_finds_the_exact_neighbours() {
        // Five times the candidates the pass keeps for ten results, so it does choose; topics of
        // about forty documents, and queries on those topics, as a corpus and its users have.
        let (count, dimensions, queries) = (5 * RESCORED_MIN, 384, 50);
        let mut rows = clustered_in(count + queries, dimensions, 7, count / 40);
        let queries = rows.split_off(count);
        let mut vectors = DenseVectors::new(dimensions);
        for (i, row) in rows.iter().enumerate() {
            vectors.upsert(&format!("d{i:05}"), row);
        }
        vectors.set_quantized_min_rows(usize::MAX);
        assert_eq!(vectors.method(), DenseMethod::Exact);
        let mut coarse = vectors.clone();
        coarse.set_quantized_min_rows(1_000);
        assert_eq!(coarse.method(), DenseMethod::Quantized);
        let (mut found, mut asked) = (0, 0);
        for query in queries {
            let exact = vectors.nearest(&query, 10, |_| true);
            let approximate = coarse.nearest(&query, 10, |_| true);
            asked += exact.len();
            found += approximate.iter().filter(|hit| exact.contains(hit)).count();
            // What it returns is scored exactly, best first.
            for pair in approximate.windows(2) {
                assert!(pair[0].1 >= pair[1].1, "{approximate:?}");
            }
        }
        assert!(found * 100 >= asked * 99, "recall@10 of the sign pass: {found} of {asked}");
    }

    #[test]
    fn signs_follow_replaced_and_removed_rows() {
        // Past 64 dimensions, so that a row's signs take more than one word.
        const DIMENSIONS: usize = 100;
        let rows = clustered(40, DIMENSIONS, 3);
        let mut vectors = DenseVectors::new(DIMENSIONS);
        vectors.set_quantized_min_rows(0);
        for (i, row) in rows.iter().enumerate() {
            vectors.upsert(&format!("d{i:02}"), row);
        }
        // d05 now holds d30's vector; d30 and d07 leave (each by moving the last row into its place).
        vectors.upsert("d05", &rows[30]);
        vectors.remove("d30");
        vectors.remove("d07");
        assert_eq!(vectors.len(), 38);
        for row in 0..vectors.len() {
            let mut signs = vec![0_u64; signs::words(DIMENSIONS)];
            signs::pack(&vectors.values[vectors.span(row)], &mut signs);
            assert_eq!(&vectors.signs[vectors.signs_span(row)], signs.as_slice(), "row {row} ({})", vectors.ids[row]);
            assert_eq!(vectors.tiebreaks[row], signs::tiebreak(&vectors.ids[row]), "row {row}");
        }
        assert_eq!((vectors.signs.len(), vectors.tiebreaks.len()), (38 * 2, 38));
        assert_eq!(vectors.nearest(&rows[30], 1, |_| true)[0].0, "d05");
        assert_eq!(vectors.nearest(&rows[39], 1, |_| true)[0].0, "d39", "the moved row answers as itself");
        assert!(vectors.nearest(&rows[7], 40, |_| true).iter().all(|(id, _)| id != "d07" && id != "d30"));
    }

    proptest! {
        /// With fewer rows than the sign pass keeps, every row is scored exactly: the answer is
        /// the exact one, hidden rows included in neither.
        #[test]
        fn a_sign_search_of_few_rows_is_exact(
            rows in prop::collection::vec((prop::collection::vec(-1.0f32..1.0, 3), any::<bool>()), 1..40),
            query in prop::collection::vec(-1.0f32..1.0, 3),
            limit in 1usize..20,
        ) {
            let mut exact = DenseVectors::new(3);
            for (i, (row, _)) in rows.iter().enumerate() {
                exact.upsert(&format!("d{i:02}"), row);
            }
            let mut coarse = exact.clone();
            coarse.set_quantized_min_rows(0);
            let hidden: std::collections::HashSet<String> =
                rows.iter().enumerate().filter(|(_, (_, shown))| !*shown).map(|(i, _)| format!("d{i:02}")).collect();
            let visible = |id: &str| !hidden.contains(id);
            prop_assert_eq!(coarse.nearest(&query, limit, visible), exact.nearest(&query, limit, visible));
        }

        /// The selection agrees with a full sort of the visible rows, whatever the limit.
        #[test]
        fn nearest_equals_a_full_sort(
            rows in prop::collection::vec((prop::collection::vec(-1.0f32..1.0, 3), any::<bool>()), 1..40),
            query in prop::collection::vec(-1.0f32..1.0, 3),
            limit in 1usize..50,
        ) {
            let mut vectors = DenseVectors::new(3);
            let visible: std::collections::HashSet<String> =
                rows.iter().enumerate().filter(|(_, (_, shown))| *shown).map(|(i, _)| format!("d{i:02}")).collect();
            for (i, (row, _)) in rows.iter().enumerate() {
                vectors.upsert(&format!("d{i:02}"), row);
            }
            let mut expected: Vec<(String, f64)> = rows
                .iter()
                .enumerate()
                .filter(|(_, (_, shown))| *shown)
                .map(|(i, (row, _))| (format!("d{i:02}"), f64::from(mesh_embedding::dot(row, &query))))
                .collect();
            expected.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            expected.truncate(limit);
            prop_assert_eq!(vectors.nearest(&query, limit, |id| visible.contains(id)), expected);
        }
    }
}
