//! Commit progress: a finished batch makes its offsets committable once every batch before it
//! finished (the core's `PartitionProgress`, inside each slot's buffer); the poller commits
//! what is committable every `commit_interval` and on release, and records the broker's answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use super::events::ConsumerEvent;
use super::state::{Handle, Shared, Slot, SlotState};
use crate::bounded_commit::{Offsets, commit_within};
use crate::error::KafkaIoError;
use crate::locks::lock;

/// What a stopping consumer's final commit and leaving its group take at most, together, after
/// the drain: then the stop returns and librdkafka finishes leaving on the poller thread.
pub const CLOSE_WITHIN: Duration = Duration::from_secs(5);

impl Shared {
    /// Marks the batch starting at `first` finished; see [`Shared::report_caught_up`].
    pub(super) fn finish(&self, slot: &Slot, state: &mut SlotState, first: i64) {
        state.buffer.progress_mut().finish(first);
        self.report_caught_up(slot, state);
    }

    /// Reports a consumer without a group caught up once its committable offset reached the
    /// high watermark seen at start; called after the progress changed.
    pub(super) fn report_caught_up(&self, slot: &Slot, state: &mut SlotState) {
        let committable = state.buffer.committable();
        if let (Some(high), Some(next)) = (state.catch_up_to, committable)
            && next >= high
        {
            state.catch_up_to = None;
            self.emit(ConsumerEvent::CaughtUp {
                topic: slot.topic.to_string(),
                partition: slot.partition,
                offset: high,
            });
        }
    }

    /// Moves the progress of each of `slots` to the consumer's position, over the offsets
    /// librdkafka read past without handing them out (transaction markers, aborted records;
    /// see `PartitionProgress::pass_to`), and reports a consumer without a group caught up
    /// when that reaches its high watermark: a partition ending with a transaction's marker
    /// otherwise never had a lag of zero, and never caught up. Called on the poller thread
    /// (or in a rebalance, which that thread serves) between polls: whatever librdkafka handed
    /// out before the position was routed by then.
    pub(super) fn pass_to_positions(&self, consumer: &Handle, slots: &[Arc<Slot>]) {
        let Ok(positions) = consumer.position() else {
            return;
        };
        for slot in slots {
            let position = positions
                .find_partition(&slot.topic, slot.partition)
                .map(|element| element.offset());
            let Some(Offset::Offset(position)) = position else {
                continue;
            };
            let mut state = slot.lock();
            if state.closed {
                // Records polled since are dropped, not queued: the position is past them.
                continue;
            }
            state.buffer.progress_mut().pass_to(position);
            self.report_caught_up(slot, &mut state);
        }
    }

    /// Commits the finished offsets of `slots` not committed yet, waiting for the broker's
    /// answer until `deadline` or until `give_up` says so (see [`commit_within`]): an answer that
    /// does not come counts as a failed commit, retried next time. Waited for on purpose:
    /// librdkafka reports asynchronous commit results only through events this consumer does
    /// not receive when partitions are assigned explicitly, and one round trip per
    /// `commit_interval` costs the poller little.
    pub(super) fn commit(
        &self,
        consumer: &Handle,
        slots: &[Arc<Slot>],
        deadline: Instant,
        give_up: impl Fn() -> bool,
    ) {
        self.pass_to_positions(consumer, slots);
        if !self.group {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        let mut offsets = Vec::new();
        for slot in slots {
            let mut state = slot.lock();
            if let Some(finished) = state.buffer.committable()
                && state.commit_requested.is_none_or(|c| c < finished)
            {
                // Cannot fail: the offset is a plain non-negative offset.
                let _ =
                    tpl.add_partition_offset(&slot.topic, slot.partition, Offset::Offset(finished));
                state.commit_requested = Some(finished);
                offsets.push((slot.topic.to_string(), slot.partition, finished));
            }
        }
        if offsets.is_empty() {
            return;
        }
        match commit_within(consumer, Offsets::Listed(&tpl), deadline, give_up) {
            Some(result) => self.settle_commit(offsets, result.err()),
            // Given up for a stop, whose final commit follows at once and sends these again:
            // neither an answer nor a failure.
            None => self.forget_requested(&offsets),
        }
    }

    /// Makes the next commit send `offsets` again where they are still the last requested.
    fn forget_requested(&self, offsets: &[(String, i32, i64)]) {
        let slots = lock(&self.slots);
        for (topic, partition, offset) in offsets {
            if let Some(slot) = slots.by_partition.get(&(topic.clone(), *partition)) {
                let mut state = slot.lock();
                if state.commit_requested == Some(*offset) {
                    state.commit_requested = state.committed;
                }
            }
        }
    }

    /// Records a commit answer: confirmed offsets, or a failure that makes the next round retry.
    fn settle_commit(&self, offsets: Vec<(String, i32, i64)>, error: Option<KafkaError>) {
        let error = error.map(|e| KafkaIoError::from_rdkafka("commit", e, Duration::ZERO, None));
        if error.is_some() {
            self.forget_requested(&offsets);
        } else {
            let slots = lock(&self.slots);
            for (topic, partition, offset) in &offsets {
                if let Some(slot) = slots.by_partition.get(&(topic.clone(), *partition)) {
                    let mut state = slot.lock();
                    state.committed = state.committed.max(Some(*offset));
                }
            }
        }
        let mut totals = lock(&self.totals);
        match &error {
            None => totals.commits += 1,
            Some(_) => totals.commit_errors += 1,
        }
        drop(totals);
        // Said with the lock released: see `Shared::warn_overdue`.
        if let Some(e) = &error {
            log::warn!("commit of {offsets:?} failed: {e}");
        }
        self.emit(ConsumerEvent::Committed { offsets, error });
    }
}
