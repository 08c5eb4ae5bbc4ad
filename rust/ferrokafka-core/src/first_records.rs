//! [`FirstRecords`]: the first `max` records of a topic by (partition, offset), while its
//! partitions are read at once and their records arrive interleaved.
//!
//! Cutting at `max` as the records came made `read_topic(max_messages=N)` return whichever
//! partitions answered first. Here the cut is a partition: the first one at which the
//! partitions up to it hold `max` records. Records from the cut on are dropped as they come
//! (a partition's records arrive in offset order, so the ones kept are its first), the cut only
//! moves down, and the read ends once every partition before the cut reached its end.

use std::collections::{BTreeMap, BTreeSet};

/// The first `max` records by (partition, offset) of records arriving interleaved across
/// partitions, each partition's in offset order.
#[derive(Debug)]
pub struct FirstRecords<T> {
    max: usize,
    records: Vec<(i32, i64, T)>,
    /// Records kept per partition.
    counts: BTreeMap<i32, usize>,
    /// Partitions not yet read to their end (and still needed).
    open: BTreeSet<i32>,
    /// The partition at which the kept records reach `max`: none from it on are needed.
    cut: Option<i32>,
    /// Some record was dropped: at or past the cut, or kept before the cut moved below it.
    left_out: bool,
}

impl<T> FirstRecords<T> {
    /// Nothing read yet of `partitions`.
    pub fn new(max: usize, partitions: impl IntoIterator<Item = i32>) -> Self {
        FirstRecords {
            max,
            records: Vec::new(),
            counts: BTreeMap::new(),
            open: partitions.into_iter().collect(),
            cut: (max == 0).then_some(i32::MIN),
            left_out: false,
        }
    }

    /// The next record read from `partition`, at `offset`: made by `record` only when kept
    /// (a record past the cut is not copied out of the reader's buffer).
    pub fn take(&mut self, partition: i32, offset: i64, record: impl FnOnce() -> T) {
        if self.cut.is_some_and(|cut| partition >= cut) {
            self.left_out = true;
            return;
        }
        *self.counts.entry(partition).or_default() += 1;
        self.records.push((partition, offset, record()));
        if self.records.len() >= self.max {
            self.move_cut();
        }
    }

    /// `partition` was read to its end.
    pub fn reached_end(&mut self, partition: i32) {
        self.open.remove(&partition);
    }

    /// Whether nothing more is needed: every partition before the cut was read to its end.
    pub fn done(&self) -> bool {
        match self.cut {
            Some(cut) => self.open.range(..cut).next().is_none(),
            None => self.open.is_empty(),
        }
    }

    /// The records by (partition, offset), and whether the partitions held more than them
    /// (as far as they were read).
    pub fn finish(mut self) -> (Vec<T>, bool) {
        self.records
            .sort_by_key(|&(partition, offset, _)| (partition, offset));
        // A partition from the cut on not read to its end holds records not read.
        let unread = self
            .cut
            .is_some_and(|cut| self.open.range(cut..).next().is_some());
        let left_out = self.left_out || unread || self.records.len() > self.max;
        self.records.truncate(self.max);
        (
            self.records.into_iter().map(|(_, _, r)| r).collect(),
            left_out,
        )
    }

    fn move_cut(&mut self) {
        let mut kept = 0;
        let Some(cut) = self.counts.iter().find_map(|(&partition, &count)| {
            kept += count;
            (kept >= self.max).then_some(partition)
        }) else {
            return;
        };
        if self.cut == Some(cut) {
            return;
        }
        self.cut = Some(cut);
        // Kept from partitions past the new cut: not among the first `max` any more.
        let before = self.records.len();
        self.records.retain(|&(partition, _, _)| partition <= cut);
        self.left_out |= self.records.len() < before;
        self.counts.retain(|&partition, _| partition <= cut);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Reads `lengths[p]` records of each partition p, taking turns as `order` says (then every
    /// partition in turn), until the rule says it is done; the (partition, offset) pairs kept.
    fn read(max: usize, lengths: &[usize], order: &[usize]) -> (Vec<(i32, i64)>, bool) {
        let count = i32::try_from(lengths.len()).unwrap();
        let mut first = FirstRecords::new(max, 0..count);
        let mut next = vec![0usize; lengths.len()];
        for partition in 0..count {
            if lengths[partition as usize] == 0 {
                first.reached_end(partition);
            }
        }
        let mut turns = order.iter().copied().chain((0..lengths.len()).cycle());
        while !first.done() {
            let p = turns.next().unwrap() % lengths.len();
            if next[p] < lengths[p] {
                let (partition, offset) = (p as i32, next[p] as i64);
                first.take(partition, offset, || (partition, offset));
                next[p] += 1;
                if next[p] == lengths[p] {
                    first.reached_end(partition);
                }
            }
        }
        first.finish()
    }

    #[test]
    fn the_cut_is_by_partition_not_by_arrival() {
        // Partition 1 answers first and fills the limit; partition 0's records still come first.
        let (records, left_out) = read(3, &[2, 5], &[1, 1, 1, 1, 1, 0, 0]);
        assert_eq!(records, vec![(0, 0), (0, 1), (1, 0)]);
        assert!(left_out);
    }

    #[test]
    fn a_topic_within_the_limit_is_read_whole() {
        let (records, left_out) = read(10, &[2, 0, 3], &[2, 0, 1]);
        assert_eq!(records, vec![(0, 0), (0, 1), (2, 0), (2, 1), (2, 2)]);
        assert!(!left_out);
    }

    proptest! {
        #[test]
        fn the_first_records_by_partition_and_offset_whatever_the_arrival(
            lengths in prop::collection::vec(0usize..6, 1..5),
            order in prop::collection::vec(0usize..5, 0..30),
            max in 0usize..20,
        ) {
            // The model: every record, sorted, cut at `max`.
            let mut all: Vec<(i32, i64)> = lengths
                .iter()
                .enumerate()
                .flat_map(|(p, &n)| (0..n).map(move |o| (p as i32, o as i64)))
                .collect();
            all.sort_unstable();
            let more = all.len() > max;
            all.truncate(max);
            let (records, left_out) = read(max, &lengths, &order);
            prop_assert_eq!(records, all);
            prop_assert_eq!(left_out, more);
        }
    }
}
