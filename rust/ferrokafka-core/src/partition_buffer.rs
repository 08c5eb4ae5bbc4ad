//! [`PartitionBuffer`]: the records of one consumed partition between the Kafka poller and the
//! partition's worker, with its load bounds and the offsets it may commit.
//!
//! The poller asks [`PartitionBuffer::room`] how many records it may take from the partition's
//! own librdkafka queue and takes no more; at the record or byte bound the buffer is *full* and
//! `room` stays 0 until the worker took it down to half of both bounds (hysteresis, so the poller
//! reads in chunks instead of one record at a time). A full partition is simply not polled:
//! librdkafka stops fetching it when its prefetch queue fills, and nothing is paused, resumed or
//! discarded. Batches leave in offset order and are recorded in a [`PartitionProgress`], which
//! says which offset may be committed once batches finish.
//!
//! Invariants: at most `max_records` records are queued when the poller respects `room` (the
//! byte bound may be passed by the last record taken); batches are non-empty, in offset order,
//! at most `max_batch` long. Pure and single-threaded: the engine keeps one per partition under
//! that partition's lock.

use std::collections::VecDeque;

use crate::partition_progress::PartitionProgress;

/// What the buffer needs to know of a record.
pub trait BufferedRecord {
    /// The record's offset in its partition.
    fn offset(&self) -> i64;
    /// Bytes the record holds (key, value, headers).
    fn size(&self) -> usize;
}

/// Load bounds of one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionLimits {
    /// Records queued at which the partition is full (at least 2).
    pub max_records: usize,
    /// Bytes queued at which the partition is full (at least 2).
    pub max_bytes: usize,
    /// Most records per batch; `None` hands out everything queued.
    pub max_batch: Option<usize>,
}

/// A change of the buffer's fullness, for load-control telemetry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadChange {
    /// The buffer reached a bound: the partition is no longer polled.
    Full,
    /// The buffer went down to half of both bounds: the partition is polled again.
    Open,
}

/// One partition's queue, bounds and commit progress; see the module docs.
#[derive(Clone, Debug)]
pub struct PartitionBuffer<T> {
    limits: PartitionLimits,
    queue: VecDeque<T>,
    bytes: usize,
    full: bool,
    progress: PartitionProgress,
}

impl<T: BufferedRecord> PartitionBuffer<T> {
    /// An empty, open buffer.
    pub fn new(limits: PartitionLimits) -> Self {
        PartitionBuffer {
            limits,
            queue: VecDeque::new(),
            bytes: 0,
            full: false,
            progress: PartitionProgress::new(),
        }
    }

    /// Records the poller may take now: 0 while full.
    pub fn room(&self) -> usize {
        if self.full {
            0
        } else {
            self.limits.max_records.saturating_sub(self.queue.len())
        }
    }

    /// Queues `records` (in offset order, after every record queued before). Returns
    /// `Some(LoadChange::Full)` when they filled the buffer.
    pub fn push(&mut self, records: impl IntoIterator<Item = T>) -> Option<LoadChange> {
        for record in records {
            self.bytes += record.size();
            self.queue.push_back(record);
        }
        let at_bound =
            self.queue.len() >= self.limits.max_records || self.bytes >= self.limits.max_bytes;
        if at_bound && !self.full {
            self.full = true;
            return Some(LoadChange::Full);
        }
        None
    }

    /// Takes the next batch (empty when nothing is queued) and records it as handed out.
    /// Returns `Some(LoadChange::Open)` when this took a full buffer down to half its bounds.
    pub fn take_batch(&mut self) -> (Vec<T>, Option<LoadChange>) {
        let count = self
            .limits
            .max_batch
            .map_or(self.queue.len(), |max| max.min(self.queue.len()));
        let batch: Vec<T> = self.queue.drain(..count).collect();
        self.bytes -= batch.iter().map(BufferedRecord::size).sum::<usize>();
        if let (Some(first), Some(last)) = (batch.first(), batch.last()) {
            self.progress.hand_out(first.offset(), last.offset());
        }
        let below_half = self.queue.len() <= self.limits.max_records / 2
            && self.bytes <= self.limits.max_bytes / 2;
        if self.full && below_half {
            self.full = false;
            return (batch, Some(LoadChange::Open));
        }
        (batch, None)
    }

    /// Drops every queued record (never handed out, so never committed) and opens the buffer;
    /// returns how many were dropped.
    pub fn clear(&mut self) -> usize {
        let dropped = self.queue.len();
        self.queue.clear();
        self.bytes = 0;
        self.full = false;
        dropped
    }

    /// The handed-out batches and the offset to commit.
    pub fn progress(&self) -> &PartitionProgress {
        &self.progress
    }

    /// Marks batches finished or abandoned (see [`PartitionProgress`]).
    pub fn progress_mut(&mut self) -> &mut PartitionProgress {
        &mut self.progress
    }

    /// Records queued.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Bytes queued.
    pub fn queued_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the buffer is full (the partition is not polled).
    pub fn is_full(&self) -> bool {
        self.full
    }
}

#[cfg(test)]
mod tests {
    use super::{BufferedRecord, LoadChange, PartitionBuffer, PartitionLimits};
    use proptest::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Record {
        offset: i64,
        size: usize,
    }

    impl BufferedRecord for Record {
        fn offset(&self) -> i64 {
            self.offset
        }
        fn size(&self) -> usize {
            self.size
        }
    }

    #[test]
    fn full_at_a_bound_and_open_again_at_half() {
        let limits = PartitionLimits {
            max_records: 4,
            max_bytes: 1000,
            max_batch: Some(1),
        };
        let mut buffer = PartitionBuffer::new(limits);
        assert_eq!(buffer.room(), 4);
        let records = (0..4).map(|offset| Record { offset, size: 10 });
        assert_eq!(buffer.push(records), Some(LoadChange::Full));
        assert_eq!(buffer.room(), 0);
        let (batch, change) = buffer.take_batch();
        assert_eq!((batch.len(), change), (1, None));
        assert_eq!(buffer.room(), 0, "still full above half");
        let (_, change) = buffer.take_batch();
        assert_eq!(change, Some(LoadChange::Open));
        assert_eq!(buffer.room(), 2);
        buffer.progress_mut().finish(1);
        assert_eq!(buffer.progress().committable(), None);
        buffer.progress_mut().finish(0);
        assert_eq!(buffer.progress().committable(), Some(2));
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// The poller takes up to this many records of these sizes (bounded by `room`).
        Poll(Vec<usize>),
        Take,
        /// Finish the handed-out batch with this index (modulo the count).
        Finish(usize),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => prop::collection::vec(0usize..300, 0..12).prop_map(Op::Poll),
            3 => Just(Op::Take),
            2 => (0usize..64).prop_map(Op::Finish),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// Against a model: a plain list of queued records, the list of handed-out batches, and
        /// fullness recomputed from the definition.
        #[test]
        fn matches_a_simple_model(
            ops in prop::collection::vec(op(), 0..80),
            max_records in 2usize..12,
            max_bytes in 2usize..1200,
            max_batch in prop::option::of(1usize..6),
        ) {
            let limits = PartitionLimits { max_records, max_bytes, max_batch };
            let mut buffer = PartitionBuffer::new(limits);
            let mut queue: Vec<Record> = Vec::new();
            let mut full = false;
            let mut batches: Vec<(i64, i64, bool)> = Vec::new();
            let mut next_offset = 0i64;
            for op in ops {
                match op {
                    Op::Poll(sizes) => {
                        let room = buffer.room();
                        prop_assert_eq!(room, if full { 0 } else { max_records - queue.len() });
                        let records: Vec<Record> = sizes
                            .into_iter()
                            .take(room)
                            .map(|size| {
                                next_offset += 1;
                                Record { offset: next_offset, size }
                            })
                            .collect();
                        queue.extend(records.iter().cloned());
                        let bytes: usize = queue.iter().map(|r| r.size).sum();
                        let becomes_full =
                            !full && (queue.len() >= max_records || bytes >= max_bytes);
                        let change = buffer.push(records);
                        prop_assert_eq!(change, becomes_full.then_some(LoadChange::Full));
                        full |= becomes_full;
                    }
                    Op::Take => {
                        let count = max_batch.map_or(queue.len(), |m| m.min(queue.len()));
                        let expected: Vec<Record> = queue.drain(..count).collect();
                        let (batch, change) = buffer.take_batch();
                        prop_assert_eq!(&batch, &expected);
                        if let (Some(first), Some(last)) = (batch.first(), batch.last()) {
                            batches.push((first.offset, last.offset + 1, false));
                        }
                        let bytes: usize = queue.iter().map(|r| r.size).sum();
                        let opens = full
                            && queue.len() <= max_records / 2
                            && bytes <= max_bytes / 2;
                        prop_assert_eq!(change, opens.then_some(LoadChange::Open));
                        full &= !opens;
                    }
                    Op::Finish(i) => {
                        if batches.is_empty() {
                            continue;
                        }
                        let index = i % batches.len();
                        let (first, _, done) = batches[index];
                        prop_assert_eq!(buffer.progress_mut().finish(first), !done);
                        batches[index].2 = true;
                    }
                    Op::Clear => {
                        prop_assert_eq!(buffer.clear(), queue.len());
                        queue.clear();
                        full = false;
                    }
                }
                prop_assert!(buffer.queued() <= max_records);
                prop_assert_eq!(buffer.queued(), queue.len());
                prop_assert_eq!(buffer.queued_bytes(), queue.iter().map(|r| r.size).sum::<usize>());
                prop_assert_eq!(buffer.is_full(), full);
                let committable = batches
                    .iter()
                    .take_while(|b| b.2)
                    .last()
                    .map(|b| b.1);
                prop_assert_eq!(buffer.progress().committable(), committable);
            }
        }
    }
}
