//! Document vectors in one contiguous matrix, searched exactly: every query is scored against
//! every document. At this corpus scale (thousands to tens of thousands of documents) a full scan
//! is a few milliseconds and has perfect recall, which an approximate index would have to earn.

use std::cmp::Ordering;
use std::collections::HashMap;

/// Unit-length vectors of documents, by document id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DenseVectors {
    dimensions: usize,
    ids: Vec<String>,
    /// Row `i` (of `dimensions` values) is the vector of `ids[i]`.
    values: Vec<f32>,
    rows_by_id: HashMap<String, usize>,
}

impl DenseVectors {
    pub fn new(dimensions: usize) -> Self {
        Self { dimensions, ..Self::default() }
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
        self.values.get(row * self.dimensions..(row + 1) * self.dimensions)
    }

    /// Adds or replaces the vector of `id`. A vector of the wrong length is refused (it would
    /// shift every row after it), which is a bug upstream, not bad input.
    pub fn upsert(&mut self, id: &str, vector: &[f32]) -> bool {
        if vector.len() != self.dimensions {
            return false;
        }
        match self.rows_by_id.get(id) {
            Some(&row) => self.values[row * self.dimensions..(row + 1) * self.dimensions].copy_from_slice(vector),
            None => {
                self.rows_by_id.insert(id.to_owned(), self.ids.len());
                self.ids.push(id.to_owned());
                self.values.extend_from_slice(vector);
            }
        }
        true
    }

    /// Removes the vector of `id` by moving the last row into its place.
    pub fn remove(&mut self, id: &str) {
        let Some(row) = self.rows_by_id.remove(id) else { return };
        let last = self.ids.len() - 1;
        if row != last {
            let (head, tail) = self.values.split_at_mut(last * self.dimensions);
            head[row * self.dimensions..(row + 1) * self.dimensions].copy_from_slice(&tail[..self.dimensions]);
            self.ids.swap(row, last);
            self.rows_by_id.insert(self.ids[row].clone(), row);
        }
        self.ids.pop();
        self.values.truncate(last * self.dimensions);
    }

    /// The `limit` documents most similar to `query` (a unit vector) among those whose id is
    /// `visible`, best first; equal scores rank by id, so every replica answers alike.
    pub fn nearest(&self, query: &[f32], limit: usize, visible: impl Fn(&str) -> bool) -> Vec<(String, f64)> {
        if query.len() != self.dimensions || limit == 0 || self.ids.is_empty() {
            return Vec::new();
        }
        let mut scored: Vec<(f32, usize)> = self
            .values
            .chunks_exact(self.dimensions)
            .enumerate()
            .filter(|(row, _)| visible(&self.ids[*row]))
            .map(|(row, vector)| (mesh_embedding::dot(vector, query), row))
            .collect();
        let by_score = |a: &(f32, usize), b: &(f32, usize)| -> Ordering {
            b.0.total_cmp(&a.0).then_with(|| self.ids[a.1].cmp(&self.ids[b.1]))
        };
        if scored.len() > limit {
            scored.select_nth_unstable_by(limit - 1, by_score);
            scored.truncate(limit);
        }
        scored.sort_unstable_by(by_score);
        scored.into_iter().map(|(score, row)| (self.ids[row].clone(), f64::from(score))).collect()
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
        assert!(!vectors.contains("y"));
        let hits = vectors.nearest(&[0.0, 1.0], 5, |_| true);
        assert_eq!(hits[0], ("x".to_owned(), 1.0));
        assert_eq!(hits[1].0, "z");
    }

    proptest! {
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
