//! The best rows of a scan: a bounded heap per slice of rows, the slices scanned on their own
//! threads when the scan is long enough to repay starting them.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::ops::Range;

/// Fewest rows one thread scans: below this, starting a thread costs more than it saves.
const ROWS_PER_THREAD_MIN: usize = 16_384;

/// How a scan scores a row. Implementations mark `score` `#[inline(always)]`: the scan is
/// compiled for the CPU's vector instructions ([`best_in_fastest`]), and only code inlined into it
/// is compiled so; a scorer left as a call runs on the portable baseline.
pub(super) trait Score {
    fn score(&self, row: usize) -> f32;
}

impl<F: Fn(usize) -> f32> Score for F {
    #[inline(always)]
    fn score(&self, row: usize) -> f32 {
        self(row)
    }
}

/// A scored row: higher scores first, equal scores by id (so every replica ranks alike).
#[derive(Debug, Clone, Copy)]
pub(super) struct Scored<'a> {
    pub score: f32,
    pub id: &'a str,
    pub row: usize,
}

impl Ord for Scored<'_> {
    /// Greater is better: a higher score, or an equal score and a smaller id.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.id.cmp(self.id))
    }
}

impl PartialOrd for Scored<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Scored<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Scored<'_> {}

/// The `keep` best of `ids`' rows under `score` among those whose id is `visible`, best first.
/// Whether a row is visible is asked only of rows good enough to be kept. Long scans are split
/// over up to `threads` threads.
pub(super) fn best<'a>(
    ids: &'a [String],
    keep: usize,
    threads: usize,
    score: &(impl Score + Sync),
    visible: &(impl Fn(&str) -> bool + Sync),
) -> Vec<Scored<'a>> {
    best_split(ids, keep, threads, ROWS_PER_THREAD_MIN, score, visible)
}

/// [`best`], giving each thread at least `rows_per_thread_min` rows.
fn best_split<'a>(
    ids: &'a [String],
    keep: usize,
    threads: usize,
    rows_per_thread_min: usize,
    score: &(impl Score + Sync),
    visible: &(impl Fn(&str) -> bool + Sync),
) -> Vec<Scored<'a>> {
    if keep == 0 || ids.is_empty() {
        return Vec::new();
    }
    let threads = threads.min(ids.len() / rows_per_thread_min.max(1)).max(1);
    let mut found = if threads == 1 {
        best_in_fastest(ids, 0..ids.len(), keep, score, visible)
    } else {
        let slice = ids.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let scans: Vec<_> = (0..threads)
                .map(|t| {
                    let rows = t * slice..((t + 1) * slice).min(ids.len());
                    scope.spawn(move || best_in_fastest(ids, rows, keep, score, visible))
                })
                .collect();
            // A scan only reads memory and calls the scorers: it does not panic but with them.
            scans
                .into_iter()
                .flat_map(|scan| scan.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                .collect()
        })
    };
    found.sort_unstable_by(|a, b| b.cmp(a));
    found.truncate(keep);
    found
}

/// [`best_in`] compiled for the widest vector instructions this CPU has (AVX2 and FMA on x86-64,
/// detected at run time; the portable baseline is SSE2), with the scorers inlined into it so that
/// their dot products use them too.
fn best_in_fastest<'a>(
    ids: &'a [String],
    rows: Range<usize>,
    keep: usize,
    score: &impl Score,
    visible: &impl Fn(&str) -> bool,
) -> Vec<Scored<'a>> {
    pulp::Arch::new().dispatch(|| best_in(ids, rows, keep, score, visible))
}

/// [`best`] over `rows` on this thread, in no particular order. A function of its own, marked to
/// be inlined, rather than the body of [`best_in_fastest`]'s closure: written in the closure, the
/// scan stayed a call compiled for the portable baseline (measured: 11.1 ms at p50 for 100,000
/// rows, against 2.7).
#[inline(always)]
fn best_in<'a>(
    ids: &'a [String],
    rows: Range<usize>,
    keep: usize,
    score: &impl Score,
    visible: &impl Fn(&str) -> bool,
) -> Vec<Scored<'a>> {
    let mut heap: BinaryHeap<Reverse<Scored<'a>>> = BinaryHeap::with_capacity(keep + 1);
    for row in rows {
        let score = score.score(row);
        // Most rows fall below the worst kept on their score alone: decided without reading
        // their id, which would be one more stream of memory (and a string) a row.
        if heap.len() == keep && heap.peek().is_some_and(|Reverse(worst)| score < worst.score) {
            continue;
        }
        let candidate = Scored { score, id: &ids[row], row };
        if heap.len() == keep && heap.peek().is_some_and(|Reverse(worst)| candidate <= *worst) {
            continue;
        }
        if !visible(candidate.id) {
            continue;
        }
        if heap.len() == keep {
            heap.pop();
        }
        heap.push(Reverse(candidate));
    }
    heap.into_iter().map(|Reverse(scored)| scored).collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The heap's selection, on one thread or several, equals sorting every visible row.
        #[test]
        fn best_equals_a_full_sort(
            scores in prop::collection::vec((0_u8..8, any::<bool>()), 1..300),
            keep in 1_usize..40,
            threads in 1_usize..4,
        ) {
            // Ids descend as rows ascend, so that a later row may outrank an earlier one of the
            // same score (row order is insertion order, not id order).
            let row_of = |id: &str| scores.len() - 1 - id[1..].parse::<usize>().unwrap();
            let ids: Vec<String> = (0..scores.len()).map(|row| format!("d{:03}", scores.len() - 1 - row)).collect();
            let score = |row: usize| f32::from(scores[row].0);
            let visible = |id: &str| scores[row_of(id)].1;
            let mut expected: Vec<(f32, &str)> =
                ids.iter().enumerate().filter(|(row, _)| scores[*row].1).map(|(row, id)| (f32::from(scores[row].0), id.as_str())).collect();
            expected.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
            expected.truncate(keep);
            let found: Vec<(f32, &str)> = best_split(&ids, keep, threads, 1, &score, &visible)
                .into_iter()
                .map(|scored| (scored.score, scored.id))
                .collect();
            prop_assert_eq!(found, expected);
        }
    }

    #[test]
    fn scored_rows_are_equal_when_they_order_alike() {
        let scored = |score: f32, id: &'static str, row: usize| Scored { score, id, row };
        assert_eq!(scored(0.5, "a", 1), scored(0.5, "a", 2), "the row is where, not what, is ranked");
        assert_ne!(scored(0.5, "a", 1), scored(0.5, "b", 1));
        assert_ne!(scored(0.5, "a", 1), scored(0.25, "a", 1));
        assert!(scored(0.5, "b", 1) > scored(0.25, "a", 1) && scored(0.5, "a", 1) > scored(0.5, "b", 1));
    }
}
