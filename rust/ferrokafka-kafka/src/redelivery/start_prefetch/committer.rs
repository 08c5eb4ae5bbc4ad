//! The commit thread: commits the queue offsets of confirmed batches in poll order and makes
//! them ready for `take`. Batches confirmed while a commit travelled are committed together, in
//! one round trip: every one of them has its STARTs acknowledged, so their last offsets may be
//! committed at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use rdkafka::consumer::BaseConsumer;
use rdkafka::{Offset, TopicPartitionList};

use super::{Dispatched, Handoff, QueueContext};
use crate::bounded_commit::{COMMIT_WAIT, Offsets, commit_before};
use crate::redelivery::marker_writer::{MarkerWriter, message_id};

/// The commit thread: commits the offsets of batches whose STARTs are acknowledged, in order,
/// and makes them ready.
pub(super) struct Committer {
    pub(super) consumer: Arc<BaseConsumer<QueueContext>>,
    pub(super) writer: Arc<MarkerWriter>,
    pub(super) queue_topic: String,
    pub(super) handoff: Arc<Handoff>,
    pub(super) received: Arc<AtomicU64>,
}

impl Committer {
    /// Runs until the prefetch thread drops its sender.
    pub(super) fn run(self, batches: &mpsc::Receiver<Dispatched>) {
        while let Ok(first) = batches.recv() {
            let mut confirmed = vec![first];
            confirmed.extend(batches.try_iter());
            self.commit(confirmed.iter().flat_map(|batch| {
                let handled = batch.records.iter().map(|r| (r.partition, r.offset));
                let after = handled.chain(batch.passed.iter().copied());
                let next = after.map(|(partition, offset)| (partition, offset + 1));
                next.chain(batch.passed_to.iter().copied())
            }));
            for batch in confirmed {
                self.make_ready(batch);
            }
        }
    }

    /// The committed `batch`'s messages are in flight and ready for `take`.
    fn make_ready(&self, batch: Dispatched) {
        self.writer.begin(
            batch
                .records
                .iter()
                .map(|r| message_id(r.partition, r.offset)),
            batch.set_at,
        );
        self.received
            .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        let mut state = self.handoff.lock();
        state.ahead = state.ahead.saturating_sub(batch.passed.len());
        state.ready.extend(batch.records);
        state.refused.extend(batch.handed_back);
        drop(state);
        self.handoff.changed.notify_all();
    }

    /// Commits the queue offsets after batches whose START markers are confirmed (and past the
    /// messages of them refused for good), given as the next offset of each partition.
    fn commit(&self, positions: impl Iterator<Item = (i32, i64)>) {
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for (partition, offset) in positions {
            let slot = next.entry(partition).or_insert(0);
            *slot = (*slot).max(offset);
        }
        let mut commit = TopicPartitionList::new();
        for (partition, offset) in next {
            let _ =
                commit.add_partition_offset(&self.queue_topic, partition, Offset::Offset(offset));
        }
        // The START markers are durable: should the commit fail or get no answer in time (a hung
        // broker; the next batch's commit covers these offsets too), a restart reads these
        // messages again and their new START supersedes the old one (at-least-once, nothing
        // lost). Bounded, so that a stop that left this thread behind does not leave it for ever.
        let by = Instant::now() + COMMIT_WAIT;
        if let Err(e) = commit_before(&self.consumer, Offsets::Listed(&commit), by) {
            log::warn!("queue offsets not committed: {e}");
        }
    }
}
