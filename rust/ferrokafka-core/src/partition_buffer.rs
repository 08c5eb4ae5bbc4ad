//! [`PartitionBuffer`]: the records of one consumed partition between the Kafka poller and the
//! partition's worker, with its load bounds and the offsets it may commit.
//!
//! The poller asks [`PartitionBuffer::room`] how many records it may take from the partition's
//! own librdkafka queue and takes no more; at the record or byte bound the buffer is *full* and
//! `room` stays 0 until the worker took it down to half of both bounds (hysteresis, so the poller
//! reads in chunks instead of one record at a time). A full partition is simply not polled:
//! librdkafka stops fetching it when its prefetch queue fills, and nothing is paused, resumed or
//! discarded. Batches are recorded in a [`PartitionProgress`], which says which offset may be
//! committed once batches finish.
//!
//! OrderBy: by partition, a batch is the queue's prefix (the engine runs one batch of a
//! partition at a time). By key, a batch takes, in offset order, the queued records whose key no
//! open batch holds; once a record of a key is passed over, every later record of that key is
//! too, so records of one key are handed out in offset order and never to two batches at once.
//! A batch holds its keys until [`PartitionBuffer::release`] (its handler finished with it).
//!
//! Invariants: at most `max_records` records are queued when the poller respects `room` (the
//! byte bound may be passed by the last record taken); batches are non-empty, each in offset
//! order, at most `max_batch` long. Pure and single-threaded: the engine keeps one per partition
//! under that partition's lock.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};

use crate::partition_progress::PartitionProgress;

/// What the buffer needs to know of a record.
pub trait BufferedRecord {
    /// The record's offset in its partition.
    fn offset(&self) -> i64;
    /// Bytes the record holds (key, value, headers).
    fn size(&self) -> usize;
    /// The record's key (records without one share one ordering).
    fn key(&self) -> Option<&[u8]>;
}

/// What must stay in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderBy {
    /// A partition's records, one batch at a time.
    Partition,
    /// Each key's records; batches of different keys may run at once.
    Key,
}

/// Load bounds of one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionLimits {
    /// Records queued at which the partition is full (at least 2).
    pub max_records: usize,
    /// Bytes queued at which the partition is full (at least 2).
    pub max_bytes: usize,
    /// Most records per batch; `None` hands out everything queued (that may go).
    pub max_batch: Option<usize>,
    /// What must stay in order.
    pub ordering: OrderBy,
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
    /// Key hashes held by open batches (ordering by key), with how many batches hold each.
    busy: HashMap<u64, usize>,
    /// The key hashes each open batch holds, by its first offset (ordering by key).
    held: HashMap<i64, Vec<u64>>,
}

fn key_hash(key: Option<&[u8]>) -> u64 {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish()
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
            busy: HashMap::new(),
            held: HashMap::new(),
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

    /// Takes the next batch (empty when nothing queued may go) and records it as handed out.
    /// Returns `Some(LoadChange::Open)` when this took a full buffer down to half its bounds.
    pub fn take_batch(&mut self) -> (Vec<T>, Option<LoadChange>) {
        let max = self.limits.max_batch.unwrap_or(usize::MAX);
        let batch: Vec<T> = match self.limits.ordering {
            OrderBy::Partition => {
                let count = max.min(self.queue.len());
                self.queue.drain(..count).collect()
            }
            OrderBy::Key => self.take_free_keys(max),
        };
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

    /// Up to `max` queued records, in offset order, of keys no open batch holds; the batch
    /// then holds their keys.
    fn take_free_keys(&mut self, max: usize) -> Vec<T> {
        let mut passed_over: HashSet<u64> = HashSet::new();
        let mut batch = Vec::new();
        let mut keys = Vec::new();
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for record in self.queue.drain(..) {
            let key = key_hash(record.key());
            let free = !self.busy.contains_key(&key) && !passed_over.contains(&key);
            if free && batch.len() < max {
                if !keys.contains(&key) {
                    keys.push(key);
                }
                batch.push(record);
            } else {
                passed_over.insert(key);
                kept.push_back(record);
            }
        }
        self.queue = kept;
        if let Some(first) = batch.first() {
            for key in &keys {
                *self.busy.entry(*key).or_insert(0) += 1;
            }
            self.held.insert(first.offset(), keys);
        }
        batch
    }

    /// The batch starting at `first` left its handler (finished, dead-lettered or abandoned):
    /// the keys it held may go to other batches again.
    pub fn release(&mut self, first: i64) {
        for key in self.held.remove(&first).unwrap_or_default() {
            if let Some(count) = self.busy.get_mut(&key) {
                *count -= 1;
                if *count == 0 {
                    self.busy.remove(&key);
                }
            }
        }
    }

    /// The offset to commit (see [`PartitionProgress::committable`]).
    pub fn committable(&self) -> Option<i64> {
        self.progress
            .committable(self.queue.front().map(BufferedRecord::offset))
    }

    /// Drops every queued record (never handed out, so never committed: nothing from the first
    /// of them on becomes committable) and opens the buffer; returns how many were dropped.
    pub fn clear(&mut self) -> usize {
        if let Some(front) = self.queue.front() {
            self.progress.hold(front.offset());
        }
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
    use std::collections::{HashMap, HashSet};

    use super::{BufferedRecord, LoadChange, OrderBy, PartitionBuffer, PartitionLimits};
    use proptest::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Record {
        offset: i64,
        size: usize,
        key: Option<Vec<u8>>,
    }

    impl BufferedRecord for Record {
        fn offset(&self) -> i64 {
            self.offset
        }
        fn size(&self) -> usize {
            self.size
        }
        fn key(&self) -> Option<&[u8]> {
            self.key.as_deref()
        }
    }

    fn record(offset: i64, key: &str) -> Record {
        Record {
            offset,
            size: 10,
            key: Some(key.as_bytes().to_vec()),
        }
    }

    fn buffer_of(
        max_records: usize,
        max_bytes: usize,
        max_batch: Option<usize>,
        ordering: OrderBy,
    ) -> PartitionBuffer<Record> {
        PartitionBuffer::new(PartitionLimits {
            max_records,
            max_bytes,
            max_batch,
            ordering,
        })
    }

    #[test]
    fn full_at_a_bound_and_open_again_at_half() {
        let mut buffer = buffer_of(4, 1000, Some(1), OrderBy::Partition);
        assert_eq!(buffer.room(), 4);
        assert_eq!(
            buffer.push((0..4).map(|o| record(o, "k"))),
            Some(LoadChange::Full)
        );
        assert_eq!(buffer.room(), 0);
        let (batch, change) = buffer.take_batch();
        assert_eq!((batch.len(), change), (1, None));
        assert_eq!(buffer.room(), 0, "still full above half");
        let (_, change) = buffer.take_batch();
        assert_eq!(change, Some(LoadChange::Open));
        assert_eq!(buffer.room(), 2);
        buffer.progress_mut().finish(1);
        assert_eq!(buffer.committable(), None);
        buffer.progress_mut().finish(0);
        assert_eq!(buffer.committable(), Some(2), "2 and 3 are still queued");
        assert_eq!(buffer.clear(), 2);
        assert_eq!(
            buffer.committable(),
            Some(2),
            "dropped records are never passed"
        );
    }

    #[test]
    fn by_key_a_batch_skips_busy_keys_and_keeps_each_key_in_order() {
        let mut buffer = buffer_of(100, 10_000, Some(3), OrderBy::Key);
        let keys = ["a", "b", "a", "c", "d", "b"];
        buffer.push(keys.iter().enumerate().map(|(o, k)| record(o as i64, k)));
        let (first, _) = buffer.take_batch();
        let offsets = |b: &[Record]| b.iter().map(|r| r.offset).collect::<Vec<_>>();
        assert_eq!(offsets(&first), [0, 1, 2], "a, b, a");
        let (second, _) = buffer.take_batch();
        assert_eq!(offsets(&second), [3, 4], "c, d: b is busy");
        buffer.release(0);
        buffer.progress_mut().finish(0);
        let (third, _) = buffer.take_batch();
        assert_eq!(offsets(&third), [5]);
        assert_eq!(buffer.committable(), Some(3));
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// The poller takes up to this many records of these (size, key) (bounded by `room`).
        Poll(Vec<(usize, u8)>),
        Take,
        /// Release and finish the open batch with this index (modulo the count).
        Finish(usize),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => prop::collection::vec((0usize..300, 0u8..5), 0..12).prop_map(Op::Poll),
            3 => Just(Op::Take),
            2 => (0usize..64).prop_map(Op::Finish),
            1 => Just(Op::Clear),
        ]
    }

    fn key_of(key: u8) -> Option<Vec<u8>> {
        // Key 0 stands for records without a key.
        (key > 0).then(|| vec![key])
    }

    proptest! {
        /// Against a model: the list of queued records, fullness recomputed from its
        /// definition, and for ordering by key the keys of the open batches.
        #[test]
        fn matches_a_simple_model(
            ops in prop::collection::vec(op(), 0..80),
            max_records in 2usize..12,
            max_bytes in 2usize..1200,
            max_batch in prop::option::of(1usize..6),
            by_key in any::<bool>(),
        ) {
            let ordering = if by_key { OrderBy::Key } else { OrderBy::Partition };
            let mut buffer = buffer_of(max_records, max_bytes, max_batch, ordering);
            let mut queue: Vec<Record> = Vec::new();
            let mut full = false;
            // Open batches: first offset and keys.
            let mut open: Vec<(i64, HashSet<Option<Vec<u8>>>)> = Vec::new();
            // Offsets handed out per key, to check each key's order.
            let mut per_key: HashMap<Option<Vec<u8>>, Vec<i64>> = HashMap::new();
            let mut next_offset = 0i64;
            let mut last_committable = None;
            for op in ops {
                match op {
                    Op::Poll(records) => {
                        let room = buffer.room();
                        prop_assert_eq!(room, if full { 0 } else { max_records - queue.len() });
                        let records: Vec<Record> = records
                            .into_iter()
                            .take(room)
                            .map(|(size, key)| {
                                next_offset += 1;
                                Record { offset: next_offset, size, key: key_of(key) }
                            })
                            .collect();
                        queue.extend(records.iter().cloned());
                        let bytes: usize = queue.iter().map(|r| r.size).sum();
                        let becomes_full =
                            !full && (queue.len() >= max_records || bytes >= max_bytes);
                        prop_assert_eq!(buffer.push(records), becomes_full.then_some(LoadChange::Full));
                        full |= becomes_full;
                    }
                    Op::Take => {
                        let (batch, change) = buffer.take_batch();
                        let max = max_batch.unwrap_or(usize::MAX);
                        prop_assert!(batch.len() <= max);
                        let busy: HashSet<Option<Vec<u8>>> =
                            open.iter().flat_map(|(_, keys)| keys.iter().cloned()).collect();
                        if by_key {
                            // No key of an open batch; every record that could go, went.
                            for r in &batch {
                                prop_assert!(!busy.contains(&r.key));
                            }
                            let mut passed: HashSet<Option<Vec<u8>>> = busy.clone();
                            let taken: HashSet<i64> = batch.iter().map(|r| r.offset).collect();
                            for r in &queue {
                                if taken.contains(&r.offset) {
                                    continue;
                                }
                                let eligible = !passed.contains(&r.key);
                                prop_assert!(!eligible || batch.len() == max,
                                    "record {} could have gone", r.offset);
                                passed.insert(r.key.clone());
                            }
                            queue.retain(|r| !taken.contains(&r.offset));
                        } else {
                            let count = max.min(queue.len());
                            let expected: Vec<Record> = queue.drain(..count).collect();
                            prop_assert_eq!(&batch, &expected);
                        }
                        for r in &batch {
                            per_key.entry(r.key.clone()).or_default().push(r.offset);
                        }
                        if let Some(first) = batch.first() {
                            let keys = if by_key {
                                batch.iter().map(|r| r.key.clone()).collect()
                            } else {
                                HashSet::new()
                            };
                            open.push((first.offset, keys));
                        }
                        let bytes: usize = queue.iter().map(|r| r.size).sum();
                        let opens = full
                            && queue.len() <= max_records / 2
                            && bytes <= max_bytes / 2;
                        prop_assert_eq!(change, opens.then_some(LoadChange::Open));
                        full &= !opens;
                    }
                    Op::Finish(i) => {
                        if open.is_empty() {
                            continue;
                        }
                        let (first, _) = open.remove(i % open.len());
                        buffer.release(first);
                        prop_assert!(buffer.progress_mut().finish(first));
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
                for offsets in per_key.values() {
                    prop_assert!(offsets.windows(2).all(|w| w[0] < w[1]), "a key out of order");
                }
                let committable = buffer.committable();
                prop_assert!(committable.is_none() || committable >= last_committable);
                if committable.is_some() {
                    last_committable = committable;
                }
            }
        }
    }
}
