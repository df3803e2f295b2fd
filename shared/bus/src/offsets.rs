//! Where records sit in a partitioned topic, and what a consumer may commit. A topic has one or
//! more partitions; offsets count within a partition, so "how far a group has read" is one
//! offset per partition.

use std::collections::{BTreeMap, BTreeSet};

use crate::Delivered;

/// Where a record was written: its partition and its offset there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub partition: i32,
    pub offset: i64,
}

/// What a consumer is done with: for each partition, the offset of its last record done (every
/// record of that partition up to and including it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DoneOffsets(BTreeMap<i32, i64>);

impl DoneOffsets {
    /// Every record of `batch` done: the highest offset of each partition it holds.
    pub fn of_batch(batch: &[Delivered]) -> Self {
        let mut done = Self::default();
        for delivered in batch {
            done.mark(delivered.partition, delivered.offset);
        }
        done
    }

    /// Records that `partition` is done up to `offset`; a lower offset than one marked changes nothing.
    pub fn mark(&mut self, partition: i32, offset: i64) {
        let done = self.0.entry(partition).or_insert(offset);
        *done = (*done).max(offset);
    }

    /// The partitions and their last offset done, in partition order.
    pub fn iter(&self) -> impl Iterator<Item = (i32, i64)> + '_ {
        self.0.iter().map(|(partition, offset)| (*partition, *offset))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether some partition is further along here than in `other`.
    pub fn is_ahead_of(&self, other: &Self) -> bool {
        self.iter().any(|(partition, offset)| other.0.get(&partition).is_none_or(|theirs| offset > *theirs))
    }
}

/// For a consumer whose records finish out of order (one worker per conversation): what it may
/// commit is, in each partition, everything before the oldest record still in work.
#[derive(Debug, Default)]
pub struct CommitTracker {
    partitions: BTreeMap<i32, InWork>,
}

#[derive(Debug)]
struct InWork {
    offsets: BTreeSet<i64>,
    highest: i64,
}

impl CommitTracker {
    /// A record was handed to its worker.
    pub fn started(&mut self, partition: i32, offset: i64) {
        let in_work = self.partitions.entry(partition).or_insert(InWork { offsets: BTreeSet::new(), highest: offset });
        in_work.offsets.insert(offset);
        in_work.highest = in_work.highest.max(offset);
    }

    /// A record's work is done.
    pub fn finished(&mut self, partition: i32, offset: i64) {
        if let Some(in_work) = self.partitions.get_mut(&partition) {
            in_work.offsets.remove(&offset);
        }
    }

    /// What may be committed now: in each partition, the record before its oldest in work, or its
    /// highest when none is. A partition whose first record is still in work has nothing yet.
    pub fn committable(&self) -> DoneOffsets {
        let mut done = DoneOffsets::default();
        for (partition, in_work) in &self.partitions {
            match in_work.offsets.first() {
                None => done.mark(*partition, in_work.highest),
                Some(oldest) if *oldest > 0 => done.mark(*partition, oldest - 1),
                Some(_) => {}
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ACTION_APPEND, BusRecord};

    fn delivered(partition: i32, offset: i64) -> Delivered {
        Delivered {
            topic: "t".into(),
            partition,
            offset,
            record: BusRecord::message("ui-1", "root", "n1", ACTION_APPEND),
        }
    }

    #[test]
    fn a_batch_is_done_up_to_its_highest_offset_in_each_partition() {
        let batch = [delivered(1, 7), delivered(0, 3), delivered(1, 9), delivered(0, 4), delivered(1, 8)];
        let done = DoneOffsets::of_batch(&batch);
        assert_eq!(done.iter().collect::<Vec<_>>(), [(0, 4), (1, 9)]);
        assert!(DoneOffsets::of_batch(&[]).is_empty());
    }

    #[test]
    fn being_ahead_means_some_partition_moved_on() {
        let mut committed = DoneOffsets::default();
        committed.mark(0, 5);
        let mut done = committed.clone();
        assert!(!done.is_ahead_of(&committed));
        done.mark(0, 4);
        assert!(!done.is_ahead_of(&committed), "a lower offset is not marked");
        done.mark(1, 0);
        assert!(done.is_ahead_of(&committed), "a partition never committed");
        committed.mark(1, 0);
        committed.mark(0, 6);
        assert!(!done.is_ahead_of(&committed));
    }

    #[test]
    fn records_finishing_out_of_order_commit_only_what_is_behind_the_oldest_in_work() {
        let mut tracker = CommitTracker::default();
        for offset in 0..4 {
            tracker.started(0, offset);
        }
        tracker.started(2, 10);
        // Partition 0 begins with a record in work: nothing of it yet. Partition 2 is done up to
        // the record before its first in work.
        assert_eq!(tracker.committable().iter().collect::<Vec<_>>(), [(2, 9)]);
        tracker.finished(0, 2);
        tracker.finished(0, 0);
        assert_eq!(tracker.committable().iter().collect::<Vec<_>>(), [(0, 0), (2, 9)]);
        tracker.finished(0, 1);
        tracker.finished(2, 10);
        assert_eq!(tracker.committable().iter().collect::<Vec<_>>(), [(0, 2), (2, 10)]);
        tracker.finished(0, 3);
        assert_eq!(tracker.committable().iter().collect::<Vec<_>>(), [(0, 3), (2, 10)]);
    }
}
