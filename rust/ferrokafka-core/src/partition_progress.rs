//! [`PartitionProgress`]: which offsets of one consumed partition may be committed.
//!
//! A consumer hands out a partition's records as batches and batches may finish out of order: a
//! batch waiting for its dead-letter write finishes after the batches behind it, and with
//! key-level concurrency several batches of a partition run at once, each holding records of
//! its own keys (so a batch's offsets need not be contiguous, and a record can stay queued
//! while later ones are handed out). At-least-once allows committing only up to the first offset
//! that is not finished, so the committable offset is the smallest of: the first offset of every
//! batch still open, the first record still queued (the caller says which), the first offset
//! held back for good (abandoned or dropped), and one past the last offset handed out. Offsets
//! between those that no batch holds were finished (or never existed: compaction, transaction
//! markers).
//!
//! Invariants: the committable offset never goes back (every new batch starts at or after the
//! queued records the previous answer counted); a held-back offset is never passed, so those
//! records are read again by the partition's next owner. Single-threaded and pure: the engine
//! keeps one per partition under that partition's lock.

use std::collections::BTreeSet;

/// The committable offset of one partition; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionProgress {
    /// First offsets of the batches handed out and neither finished nor abandoned.
    open: BTreeSet<i64>,
    /// The smallest offset held back for good (abandoned or dropped).
    barrier: Option<i64>,
    /// The first offset ever handed out: committing it would commit nothing.
    start: Option<i64>,
    /// One past the largest offset handed out.
    handed_out_to: Option<i64>,
}

impl PartitionProgress {
    /// No batch handed out yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that a batch whose smallest offset is `first` and largest `last` was handed out.
    /// Returns false (and changes nothing) when `last < first` or a batch starting at `first`
    /// is still open.
    pub fn hand_out(&mut self, first: i64, last: i64) -> bool {
        if last < first || self.open.contains(&first) {
            return false;
        }
        self.open.insert(first);
        self.start = Some(self.start.map_or(first, |s| s.min(first)));
        self.handed_out_to = Some(self.handed_out_to.map_or(last + 1, |to| to.max(last + 1)));
        true
    }

    /// Marks the open batch starting at `first` finished. Returns false when there is no such
    /// open batch (already finished, abandoned, or never handed out).
    pub fn finish(&mut self, first: i64) -> bool {
        self.open.remove(&first)
    }

    /// Marks the open batch starting at `first` abandoned: it will never finish. Returns false
    /// when there is no such open batch.
    pub fn abandon(&mut self, first: i64) -> bool {
        if !self.open.remove(&first) {
            return false;
        }
        self.hold(first);
        true
    }

    /// Marks every open batch abandoned; returns how many there were.
    pub fn abandon_all(&mut self) -> usize {
        let count = self.open.len();
        if let Some(first) = self.open.first().copied() {
            self.hold(first);
        }
        self.open.clear();
        count
    }

    /// Holds back `offset` for good: records from it on were dropped without being finished.
    pub fn hold(&mut self, offset: i64) {
        self.barrier = Some(self.barrier.map_or(offset, |b| b.min(offset)));
    }

    /// The consumer's position is `position`: every record before it that the consumer hands
    /// out was handed out or is queued, so the offsets from one past the last handed out up to
    /// it hold none (transaction markers, aborted transactions: librdkafka reads past them
    /// without handing them out). The committable offset may then move over them once every
    /// batch before them finished, as Java's and librdkafka's own commits do; without it a
    /// partition a transactional producer writes never has a lag of zero. Nothing happens
    /// before the first batch (where the work began is not known).
    pub fn pass_to(&mut self, position: i64) {
        if let Some(to) = self.handed_out_to
            && position > to
        {
            self.handed_out_to = Some(position);
        }
    }

    /// The offset to commit, given the smallest offset still queued (`None`: nothing queued).
    /// `None` while it would commit nothing.
    pub fn committable(&self, queued_from: Option<i64>) -> Option<i64> {
        let start = self.start?;
        let candidates = [
            self.open.first().copied(),
            self.barrier,
            queued_from,
            self.handed_out_to,
        ];
        let next = candidates.into_iter().flatten().min()?;
        (next > start).then_some(next)
    }

    /// Batches handed out that have neither finished nor been abandoned.
    pub fn open(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::PartitionProgress;
    use proptest::prelude::*;

    #[test]
    fn the_position_passes_offsets_no_record_holds_once_all_before_finished() {
        let mut progress = PartitionProgress::new();
        progress.pass_to(9);
        assert_eq!(
            progress.committable(None),
            None,
            "nothing handed out: nothing passed"
        );
        assert!(progress.hand_out(0, 2));
        progress.pass_to(4); // offset 3: a transaction's commit marker
        assert_eq!(
            progress.committable(None),
            None,
            "the open batch still bounds it"
        );
        assert!(progress.finish(0));
        assert_eq!(progress.committable(None), Some(4));
        progress.pass_to(3);
        assert_eq!(progress.committable(None), Some(4), "never goes back");
        progress.pass_to(8);
        assert_eq!(
            progress.committable(Some(6)),
            Some(6),
            "a queued record bounds it"
        );
        progress.hold(5);
        assert_eq!(
            progress.committable(None),
            Some(5),
            "a held-back offset is never passed"
        );
    }

    #[test]
    fn out_of_order_finishes_commit_only_the_finished_prefix() {
        let mut progress = PartitionProgress::new();
        assert!(progress.hand_out(0, 4));
        assert!(progress.hand_out(5, 9));
        assert!(progress.hand_out(10, 10));
        assert!(!progress.hand_out(5, 12), "batch 5 is open");
        assert!(progress.finish(5));
        assert_eq!(progress.committable(None), None);
        assert!(progress.finish(0));
        assert_eq!(progress.committable(None), Some(10));
        assert_eq!(
            progress.committable(Some(7)),
            Some(7),
            "a record still queued"
        );
        assert!(!progress.finish(0), "finished twice");
        assert_eq!(progress.open(), 1);
    }

    #[test]
    fn an_abandoned_batch_or_a_dropped_record_blocks_everything_behind_it() {
        let mut progress = PartitionProgress::new();
        progress.hand_out(0, 1);
        progress.hand_out(2, 3);
        progress.hand_out(4, 5);
        progress.finish(0);
        assert!(progress.abandon(2));
        assert!(progress.finish(4));
        assert_eq!(progress.committable(None), Some(2));
        assert!(!progress.finish(2));
        progress.hold(1);
        assert_eq!(progress.committable(None), Some(1));
        assert_eq!(progress.open(), 0);
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Hand out this many queued records (chosen by the mask) as one batch.
        HandOut(u8, u16),
        Finish(usize),
        Abandon(usize),
        AbandonAll,
        /// New records arrive in the queue.
        Receive(u8),
        /// Drop every queued record.
        Drop,
        /// The consumer reads past this many offsets that hold no record (transaction
        /// markers, aborted records) and says its position.
        Skip(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u8..5, any::<u16>()).prop_map(|(n, mask)| Op::HandOut(n, mask)),
            4 => (0usize..12).prop_map(Op::Finish),
            1 => (0usize..12).prop_map(Op::Abandon),
            1 => Just(Op::AbandonAll),
            3 => (1u8..6).prop_map(Op::Receive),
            1 => Just(Op::Drop),
            1 => (1u8..3).prop_map(Op::Skip),
        ]
    }

    /// The model: the state of every offset received (queued, open in batch n, finished,
    /// abandoned, dropped from the queue); committable is the first offset not finished (or one
    /// past the last handed out), if past the first handed out.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum State {
        Queued,
        Open(usize),
        Finished,
        Held,
        Dropped,
    }

    proptest! {
        #[test]
        fn matches_a_list_of_offsets(ops in prop::collection::vec(op(), 0..80), gap in 0i64..3) {
            let mut progress = PartitionProgress::new();
            let mut offsets: Vec<(i64, State)> = Vec::new();
            let mut batches: Vec<(i64, bool)> = Vec::new();
            let mut next = 0i64;
            let mut last_committable = None;
            for op in ops {
                match op {
                    Op::Receive(n) => {
                        for _ in 0..n {
                            next += gap + 1;
                            offsets.push((next, State::Queued));
                        }
                    }
                    Op::HandOut(n, mask) => {
                        // Any queued records, not only a prefix: what key ordering does.
                        let mut chosen = Vec::new();
                        for (index, (_, state)) in offsets.iter().enumerate() {
                            if *state == State::Queued && chosen.len() < usize::from(n)
                                && (mask >> (index % 16)) & 1 == 1
                            {
                                chosen.push(index);
                            }
                        }
                        let (Some(&first), Some(&last)) = (chosen.first(), chosen.last()) else {
                            continue;
                        };
                        prop_assert!(progress.hand_out(offsets[first].0, offsets[last].0));
                        for &index in &chosen {
                            offsets[index].1 = State::Open(batches.len());
                        }
                        batches.push((offsets[first].0, true));
                    }
                    Op::Finish(i) | Op::Abandon(i) => {
                        let Some(&(first, open)) = batches.get(i) else { continue };
                        let finish = matches!(op, Op::Finish(_));
                        let done = if finish {
                            progress.finish(first)
                        } else {
                            progress.abandon(first)
                        };
                        prop_assert_eq!(done, open);
                        if open {
                            batches[i].1 = false;
                            let to = if finish { State::Finished } else { State::Held };
                            for entry in &mut offsets {
                                if entry.1 == State::Open(i) {
                                    entry.1 = to;
                                }
                            }
                        }
                    }
                    Op::AbandonAll => {
                        let open = batches.iter().filter(|b| b.1).count();
                        prop_assert_eq!(progress.abandon_all(), open);
                        for batch in &mut batches {
                            batch.1 = false;
                        }
                        for entry in &mut offsets {
                            if matches!(entry.1, State::Open(_)) {
                                entry.1 = State::Held;
                            }
                        }
                    }
                    Op::Skip(n) => {
                        next += i64::from(n);
                        // Passed (finished, as no record holds it) once a batch says where
                        // the work began; before that, a gap like any other.
                        if !batches.is_empty() {
                            offsets.push((next, State::Finished));
                        }
                        progress.pass_to(next + 1);
                    }
                    Op::Drop => {
                        if let Some(&(offset, _)) =
                            offsets.iter().find(|(_, state)| *state == State::Queued)
                        {
                            progress.hold(offset);
                        }
                        for entry in &mut offsets {
                            if entry.1 == State::Queued {
                                entry.1 = State::Dropped;
                            }
                        }
                    }
                }
                let queued_from = offsets
                    .iter()
                    .find(|(_, state)| *state == State::Queued)
                    .map(|(offset, _)| *offset);
                let start = batches.iter().map(|b| b.0).min();
                let handed_out: Vec<&(i64, State)> = offsets
                    .iter()
                    .filter(|(_, s)| !matches!(s, State::Queued | State::Dropped))
                    .collect();
                let expected = start.and_then(|start| {
                    let end = handed_out.iter().map(|(o, _)| *o).max().map(|o| o + 1);
                    let first_not_done = offsets
                        .iter()
                        .find(|(_, state)| *state != State::Finished)
                        .map(|(offset, _)| *offset);
                    let next = [first_not_done, end].into_iter().flatten().min()?;
                    (next > start).then_some(next)
                });
                let actual = progress.committable(queued_from);
                prop_assert_eq!(actual, expected);
                prop_assert!(actual >= last_committable || actual.is_none());
                if actual.is_some() {
                    last_committable = actual;
                }
                prop_assert_eq!(progress.open(), batches.iter().filter(|b| b.1).count());
            }
        }
    }
}
