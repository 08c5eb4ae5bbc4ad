//! [`PartitionProgress`]: which offsets of one consumed partition may be committed.
//!
//! A consumer hands out a partition's records as batches (offset ranges) in offset order, and
//! batches may finish out of order: a batch waiting for its dead-letter write finishes after the
//! batches behind it, and with key-level concurrency several batches of a partition run at once.
//! At-least-once allows committing only up to the first batch that has not finished, so this
//! keeps the ranges handed out, in order, and advances the committable offset over the finished
//! prefix.
//!
//! Invariants: ranges are disjoint and increasing; the committable offset never goes back; an
//! abandoned range (its handler outlived the drain time) never finishes, so nothing at or after
//! it becomes committable and its records are read again by the partition's next owner.
//! Single-threaded and pure: the engine keeps one per partition under that partition's lock.

use std::collections::VecDeque;

/// Where a handed-out range stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RangeState {
    Open,
    Finished,
    Abandoned,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    first: i64,
    next: i64,
    state: RangeState,
}

/// The committable offset of one partition; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionProgress {
    /// Ranges handed out and not yet folded into `committable`, in offset order.
    ranges: VecDeque<Range>,
    /// One past the last offset of the finished prefix.
    committable: Option<i64>,
    /// One past the last offset handed out.
    handed_out_to: Option<i64>,
}

impl PartitionProgress {
    /// No range handed out yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that offsets `first..=last` were handed out. Returns false (and changes nothing)
    /// when the range is empty or does not lie after every range handed out before.
    pub fn hand_out(&mut self, first: i64, last: i64) -> bool {
        if last < first || self.handed_out_to.is_some_and(|to| first < to) {
            return false;
        }
        self.ranges.push_back(Range {
            first,
            next: last + 1,
            state: RangeState::Open,
        });
        self.handed_out_to = Some(last + 1);
        true
    }

    /// Marks the open range starting at `first` finished. Returns false when there is no such
    /// open range (already finished, abandoned, or never handed out).
    pub fn finish(&mut self, first: i64) -> bool {
        if !self.set_state(first, RangeState::Finished) {
            return false;
        }
        while let Some(front) = self.ranges.front()
            && front.state == RangeState::Finished
        {
            self.committable = Some(front.next);
            self.ranges.pop_front();
        }
        true
    }

    /// Marks the open range starting at `first` abandoned: it will never finish. Returns false
    /// when there is no such open range.
    pub fn abandon(&mut self, first: i64) -> bool {
        self.set_state(first, RangeState::Abandoned)
    }

    /// Marks every open range abandoned; returns how many there were.
    pub fn abandon_all(&mut self) -> usize {
        let mut count = 0;
        for range in &mut self.ranges {
            if range.state == RangeState::Open {
                range.state = RangeState::Abandoned;
                count += 1;
            }
        }
        count
    }

    /// One past the last offset of the finished prefix: the offset to commit. `None` until the
    /// first range finished.
    pub fn committable(&self) -> Option<i64> {
        self.committable
    }

    /// Ranges handed out that have neither finished nor been abandoned.
    pub fn open(&self) -> usize {
        self.ranges
            .iter()
            .filter(|r| r.state == RangeState::Open)
            .count()
    }

    fn set_state(&mut self, first: i64, state: RangeState) -> bool {
        let Ok(index) = self.ranges.binary_search_by_key(&first, |r| r.first) else {
            return false;
        };
        let range = &mut self.ranges[index];
        if range.state != RangeState::Open {
            return false;
        }
        range.state = state;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::PartitionProgress;
    use proptest::prelude::*;

    #[test]
    fn out_of_order_finishes_commit_only_the_finished_prefix() {
        let mut progress = PartitionProgress::new();
        assert!(progress.hand_out(0, 4));
        assert!(progress.hand_out(5, 9));
        assert!(progress.hand_out(10, 10));
        assert!(!progress.hand_out(8, 12), "overlaps what was handed out");
        assert!(progress.finish(5));
        assert_eq!(progress.committable(), None);
        assert!(progress.finish(0));
        assert_eq!(progress.committable(), Some(10));
        assert!(!progress.finish(0), "finished twice");
        assert_eq!(progress.open(), 1);
    }

    #[test]
    fn an_abandoned_range_blocks_everything_behind_it() {
        let mut progress = PartitionProgress::new();
        progress.hand_out(0, 1);
        progress.hand_out(2, 3);
        progress.hand_out(4, 5);
        progress.finish(0);
        assert!(progress.abandon(2));
        assert!(progress.finish(4));
        assert_eq!(progress.committable(), Some(2));
        assert!(!progress.finish(2));
        assert_eq!(progress.open(), 0);
    }

    #[derive(Clone, Debug)]
    enum Op {
        HandOut(u8),
        Finish(usize),
        Abandon(usize),
        AbandonAll,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u8..5).prop_map(Op::HandOut),
            4 => (0usize..12).prop_map(Op::Finish),
            1 => (0usize..12).prop_map(Op::Abandon),
            1 => Just(Op::AbandonAll),
        ]
    }

    /// The model: every range ever handed out with its state (0 open, 1 finished, 2 abandoned);
    /// committable is the end of the longest finished prefix.
    fn model_committable(model: &[(i64, i64, u8)]) -> Option<i64> {
        model
            .iter()
            .take_while(|(_, _, state)| *state == 1)
            .last()
            .map(|(_, next, _)| *next)
    }

    proptest! {
        #[test]
        fn matches_a_list_of_ranges(ops in prop::collection::vec(op(), 0..60), gap in 0i64..3) {
            let mut progress = PartitionProgress::new();
            let mut model: Vec<(i64, i64, u8)> = Vec::new();
            let mut next_offset = 0i64;
            for op in ops {
                match op {
                    Op::HandOut(len) => {
                        let first = next_offset + gap;
                        let last = first + i64::from(len) - 1;
                        prop_assert!(progress.hand_out(first, last));
                        model.push((first, last + 1, 0));
                        next_offset = last + 1;
                    }
                    Op::Finish(i) | Op::Abandon(i) => {
                        let target = if matches!(op, Op::Finish(_)) { 1 } else { 2 };
                        let Some(entry) = model.get_mut(i) else {
                            prop_assert!(!progress.finish(next_offset + 100));
                            continue;
                        };
                        let expected = entry.2 == 0;
                        let done = if target == 1 {
                            progress.finish(entry.0)
                        } else {
                            progress.abandon(entry.0)
                        };
                        prop_assert_eq!(done, expected);
                        if expected {
                            entry.2 = target;
                        }
                    }
                    Op::AbandonAll => {
                        let open = model.iter().filter(|e| e.2 == 0).count();
                        prop_assert_eq!(progress.abandon_all(), open);
                        for entry in &mut model {
                            if entry.2 == 0 {
                                entry.2 = 2;
                            }
                        }
                    }
                }
                prop_assert_eq!(progress.committable(), model_committable(&model));
                prop_assert_eq!(progress.open(), model.iter().filter(|e| e.2 == 0).count());
            }
        }
    }
}
