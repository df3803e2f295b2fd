//! An in-memory BM25 index over weighted fields (BM25F with one length normalisation), for
//! collections small enough to keep in memory and changed one document at a time: the registry's
//! agent cards. The search agent's corpus lives in tantivy instead.

use std::hash::Hash;

use rustc_hash::FxHashMap;

/// Term-frequency saturation: the usual 1.2.
pub const K1_DEFAULT: f32 = 1.2;
/// Length normalisation: the usual 0.75.
pub const B_DEFAULT: f32 = 0.75;

/// One field of a document: its analysed terms and how much each occurrence counts.
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    pub terms: &'a [String],
    pub weight: f32,
}

#[derive(Debug)]
struct Document<K> {
    key: K,
    /// Weighted length: Σ weight × terms over the fields.
    length: f32,
    /// The distinct terms, to take the document out of their postings.
    terms: Vec<String>,
}

/// Documents keyed by `K`, each a set of weighted fields; scored against a query with BM25.
#[derive(Debug)]
pub struct Bm25Index<K> {
    k1: f32,
    b: f32,
    /// Slots of documents; a freed slot is reused.
    documents: Vec<Option<Document<K>>>,
    free: Vec<u32>,
    slots: FxHashMap<K, u32>,
    /// Term -> (slot, weighted term frequency), one entry per document holding the term.
    postings: FxHashMap<String, Vec<(u32, f32)>>,
    total_length: f64,
}

impl<K: Clone + Eq + Hash> Default for Bm25Index<K> {
    fn default() -> Self {
        Self::new(K1_DEFAULT, B_DEFAULT)
    }
}

impl<K: Clone + Eq + Hash> Bm25Index<K> {
    pub fn new(k1: f32, b: f32) -> Self {
        Self {
            k1,
            b,
            documents: Vec::new(),
            free: Vec::new(),
            slots: FxHashMap::default(),
            postings: FxHashMap::default(),
            total_length: 0.0,
        }
    }

    /// How many documents are indexed.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Indexes `fields` under `key`, replacing what was there.
    pub fn upsert(&mut self, key: K, fields: &[Field<'_>]) {
        self.remove(&key);
        let mut frequencies: FxHashMap<&str, f32> = FxHashMap::default();
        let mut length = 0.0;
        for field in fields {
            for term in field.terms {
                *frequencies.entry(term.as_str()).or_default() += field.weight;
                length += field.weight;
            }
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.documents.push(None);
                u32::try_from(self.documents.len() - 1).expect("fewer than 2^32 documents")
            }
        };
        let mut terms = Vec::with_capacity(frequencies.len());
        for (term, frequency) in frequencies {
            self.postings.entry(term.to_owned()).or_default().push((slot, frequency));
            terms.push(term.to_owned());
        }
        self.total_length += f64::from(length);
        self.documents[slot as usize] = Some(Document { key: key.clone(), length, terms });
        self.slots.insert(key, slot);
    }

    /// Takes `key` out; returns whether it was there.
    pub fn remove(&mut self, key: &K) -> bool {
        let Some(slot) = self.slots.remove(key) else { return false };
        let Some(document) = self.documents[slot as usize].take() else { return false };
        for term in &document.terms {
            if let Some(list) = self.postings.get_mut(term) {
                list.retain(|(s, _)| *s != slot);
                if list.is_empty() {
                    self.postings.remove(term);
                }
            }
        }
        self.total_length -= f64::from(document.length);
        self.free.push(slot);
        true
    }

    /// The best `limit` documents for the query `terms` among those `admit` accepts, best
    /// first, with their scores; ties in key-independent slot order. A term repeated in the query
    /// counts once.
    pub fn search(&self, terms: &[String], limit: usize, admit: impl Fn(&K) -> bool) -> Vec<(K, f32)> {
        if self.slots.is_empty() || limit == 0 {
            return Vec::new();
        }
        let count = self.slots.len() as f32;
        #[allow(clippy::cast_possible_truncation)]
        let average_length = (self.total_length / f64::from(count)).max(f64::EPSILON) as f32;
        let mut scores = vec![0.0f32; self.documents.len()];
        let mut seen: Vec<&str> = Vec::with_capacity(terms.len());
        for term in terms {
            if seen.contains(&term.as_str()) {
                continue;
            }
            seen.push(term);
            let Some(list) = self.postings.get(term) else { continue };
            let frequency = list.len() as f32;
            let idf = (1.0 + (count - frequency + 0.5) / (frequency + 0.5)).ln();
            for &(slot, tf) in list {
                let length = self.documents[slot as usize].as_ref().map_or(average_length, |d| d.length);
                let norm = self.k1 * (1.0 - self.b + self.b * length / average_length);
                scores[slot as usize] += idf * tf * (self.k1 + 1.0) / (tf + norm);
            }
        }
        let mut hits: Vec<(u32, f32)> = scores
            .iter()
            .enumerate()
            .filter(|(_, score)| **score > 0.0)
            .filter_map(|(slot, score)| {
                let document = self.documents[slot].as_ref()?;
                #[allow(clippy::cast_possible_truncation)]
                admit(&document.key).then_some((slot as u32, *score))
            })
            .collect();
        let by_score = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if hits.len() > limit {
            hits.select_nth_unstable_by(limit - 1, by_score);
            hits.truncate(limit);
        }
        hits.sort_unstable_by(by_score);
        hits.into_iter()
            .filter_map(|(slot, score)| Some((self.documents[slot as usize].as_ref()?.key.clone(), score)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyzer::{english_analyzer, terms};

    fn index_of(documents: &[(&str, &str, &str)]) -> Bm25Index<String> {
        let mut analyzer = english_analyzer();
        let mut index = Bm25Index::default();
        for (key, title, body) in documents {
            let (title, body) = (terms(&mut analyzer, title), terms(&mut analyzer, body));
            index.upsert(
                (*key).to_owned(),
                &[Field { terms: &title, weight: 3.0 }, Field { terms: &body, weight: 1.0 }],
            );
        }
        index
    }

    fn keys(index: &Bm25Index<String>, query: &str) -> Vec<String> {
        let query = terms(&mut english_analyzer(), query);
        index.search(&query, 10, |_| true).into_iter().map(|(key, _)| key).collect()
    }

    #[test]
    fn a_match_in_a_heavier_field_ranks_higher() {
        let index = index_of(&[
            ("body", "Travel planner", "books flights and converts currency on the way"),
            ("title", "Currency converter", "exchange rates between two money units"),
            ("none", "Weather", "forecasts for a city"),
        ]);
        assert_eq!(keys(&index, "currency"), ["title", "body"]);
    }

    #[test]
    fn rarer_terms_weigh_more_and_a_repeated_query_term_counts_once() {
        let index = index_of(&[
            ("a", "Flights", "flight booking"),
            ("b", "Flights", "flight status"),
            ("c", "Hotels", "hotel booking"),
        ]);
        // "status" is in one document, "booking" in two: b wins on the rarer word.
        assert_eq!(keys(&index, "booking status")[0], "b");
        let once = terms(&mut english_analyzer(), "status");
        let twice = terms(&mut english_analyzer(), "status status");
        assert_eq!(index.search(&once, 3, |_| true), index.search(&twice, 3, |_| true));
    }

    #[test]
    fn removal_and_replacement_leave_no_trace() {
        let mut index = index_of(&[("a", "Weather", "forecast"), ("b", "Calendar", "meetings")]);
        assert!(index.remove(&"a".to_owned()));
        assert!(!index.remove(&"a".to_owned()));
        assert!(keys(&index, "forecast").is_empty());
        assert_eq!(index.len(), 1);
        let words = terms(&mut english_analyzer(), "forecast tomorrow");
        index.upsert("b".to_owned(), &[Field { terms: &words, weight: 1.0 }]);
        assert_eq!(keys(&index, "meetings"), Vec::<String>::new());
        assert_eq!(keys(&index, "forecast"), ["b"]);
        assert_eq!(index.len(), 1);
        assert!(
            index.postings.values().all(|list| list.iter().all(|(slot, _)| index.documents[*slot as usize].is_some()))
        );
    }

    #[test]
    fn the_filter_and_the_limit_apply_to_the_results() {
        let index = index_of(&[("a", "Tax", "tax"), ("b", "Tax", "tax returns"), ("c", "Tax", "tax advice")]);
        let query = terms(&mut english_analyzer(), "tax");
        assert_eq!(index.search(&query, 2, |_| true).len(), 2);
        let admitted: Vec<String> = index.search(&query, 10, |k| k != "a").into_iter().map(|(k, _)| k).collect();
        assert_eq!(admitted.len(), 2);
        assert!(!admitted.contains(&"a".to_owned()));
    }

    proptest::proptest! {
        /// Whatever the order of insertions and removals, the index answers as one built from
        /// the documents that remain.
        #[test]
        fn updates_in_any_order_equal_a_fresh_build(ops in proptest::collection::vec((0u8..6, proptest::bool::ANY, 0u8..4), 1..40)) {
            const WORDS: [&str; 4] = ["alpha", "beta", "gamma", "delta"];
            let mut index: Bm25Index<u8> = Bm25Index::default();
            let mut live: std::collections::BTreeMap<u8, String> = Default::default();
            for (key, insert, word) in ops {
                if insert {
                    let terms = vec![WORDS[word as usize].to_owned(), "common".to_owned()];
                    index.upsert(key, &[Field { terms: &terms, weight: 1.0 }]);
                    live.insert(key, WORDS[word as usize].to_owned());
                } else {
                    index.remove(&key);
                    live.remove(&key);
                }
            }
            let mut fresh: Bm25Index<u8> = Bm25Index::default();
            for (key, word) in &live {
                let terms = vec![word.clone(), "common".to_owned()];
                fresh.upsert(*key, &[Field { terms: &terms, weight: 1.0 }]);
            }
            for word in WORDS.iter().chain(["common"].iter()) {
                let query = vec![(*word).to_owned()];
                let mut got = index.search(&query, 10, |_| true);
                let mut want = fresh.search(&query, 10, |_| true);
                got.sort_by_key(|(k, _)| *k);
                want.sort_by_key(|(k, _)| *k);
                proptest::prop_assert_eq!(got.len(), want.len());
                for ((gk, gs), (wk, ws)) in got.iter().zip(&want) {
                    proptest::prop_assert_eq!(gk, wk);
                    proptest::prop_assert!((gs - ws).abs() < 1e-3);
                }
            }
        }
    }
}
