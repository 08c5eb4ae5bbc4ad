//! [`QueueSources`]: where the prefetch thread takes the queue topic's records from. Each
//! assigned partition has its own librdkafka queue, drained in runs (as the concurrent
//! consumer's poller does, see `partition_source.rs`); the consumer's queue still serves the
//! rebalances, errors and statistics, and holds the records fetched before a partition's queue
//! was split.
//!
//! rust-rdkafka's `BaseConsumer::poll` takes one record per call, reading the clock twice and
//! allocating a shared event wrapper each time: at the rates of `benches/redelivery_bench.py`
//! the prefetch thread spent about as long polling as encoding and writing the START markers,
//! and the thread bounds the queue consumer's rate (benches/RESULTS.md).
//!
//! Invariants:
//! - Offset order within a partition: a partition's own queue is drained only after the
//!   consumer's queue was found empty since that partition was split, so no record fetched
//!   before the split (left in the consumer's queue) comes after one fetched after it.
//! - Every assigned partition of the queue topic has its queue split, and a split queue is
//!   kept while its partition stays assigned: librdkafka does not forward a queue the
//!   application split back to the consumer's queue, even when the partition is assigned
//!   again, so a partition assigned and not split here would never be read. Splits follow the
//!   assignment after every rebalance ([`QueueContext`] counts them).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;

use crate::main_queue::MainQueue;
use crate::oauth::{TokenRefresh, plain_client_context};
use crate::partition_source::{PartitionSource, RawMessage};
use crate::record::ReceivedRecord;
use crate::wake::Wake;

/// The queue consumer's context: answers token refreshes and counts rebalances, so that the
/// prefetch thread splits the queues of newly assigned partitions.
pub(crate) struct QueueContext {
    tokens: TokenRefresh,
    rebalances: AtomicU64,
}

impl QueueContext {
    pub(crate) fn new(tokens: TokenRefresh) -> Self {
        QueueContext {
            tokens,
            rebalances: AtomicU64::new(0),
        }
    }
}

plain_client_context!(QueueContext, tokens);

impl ConsumerContext for QueueContext {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, _rebalance: &Rebalance<'_>) {
        self.rebalances.fetch_add(1, Ordering::Release);
    }
}

/// Most events (statistics, rebalances, commit answers) served from the consumer's queue in
/// one look: a queue that never empties still lets the caller's batch end.
const EVENTS_PER_LOOK: usize = 1024;

/// Makes the consumer's own queue set the returned [`Wake`] whenever it becomes non-empty (the
/// partitions' queues set it too, once [`QueueSources`] splits them): the prefetch thread's
/// sleep. Done before the consumer is shared.
pub(super) fn wake_on_arrival(consumer: &mut BaseConsumer<QueueContext>) -> Arc<Wake> {
    let wake = Arc::new(Wake::default());
    let woken = Arc::clone(&wake);
    consumer.set_nonempty_callback(move || woken.notify());
    wake
}

/// The queue topic's partition queues and the consumer's queue (see the module docs).
pub(super) struct QueueSources {
    /// Measures the consumer's queue (a group consumer's main queue forwards to it). Declared
    /// first: dropped before the reference to the consumer below.
    main: MainQueue,
    /// One per assigned partition of the queue topic whose queue is split.
    split: BTreeMap<i32, PartitionSource<QueueContext>>,
    consumer: Arc<BaseConsumer<QueueContext>>,
    /// The queue topic's name, which every record shares.
    topic: Arc<str>,
    /// Woken by any of the queues when it becomes non-empty.
    wake: Arc<Wake>,
    /// The rebalance count the splits follow; `None` before the first look.
    synced_at: Option<u64>,
    /// Whether a partition's queue could not be split at the last look (its metadata not
    /// known yet): look again next time.
    incomplete: bool,
    /// The partition whose queue the next look drains first (or the next one after it).
    resume_at: i32,
}

impl QueueSources {
    /// The sources of `consumer` (subscribed to `topic`), woken through `wake`, the one
    /// [`wake_on_arrival`] made for it.
    pub(super) fn new(
        consumer: &Arc<BaseConsumer<QueueContext>>,
        topic: &str,
        wake: Arc<Wake>,
    ) -> Self {
        QueueSources {
            // SAFETY: a live handle; `self.consumer` keeps it alive at least as long as this
            // reference, which is dropped first (field order).
            main: unsafe { MainQueue::of(consumer.client().native_ptr()) },
            split: BTreeMap::new(),
            consumer: Arc::clone(consumer),
            topic: topic.into(),
            wake,
            synced_at: None,
            incomplete: false,
            resume_at: 0,
        }
    }

    /// Hands records (or errors) to `take`, up to `max`: first from the consumer's queue, then,
    /// once that is empty, from the partitions' own queues; `take` returns false to end the
    /// batch there (after an error). Waits up to `first_wait` for the first; returns how many
    /// messages it took off the queues.
    pub(super) fn take(
        &mut self,
        max: usize,
        first_wait: Duration,
        mut take: impl FnMut(Result<ReceivedRecord, KafkaError>) -> bool,
    ) -> usize {
        let deadline = Instant::now() + first_wait;
        loop {
            let taken = self.take_ready(max, &mut take);
            let left = deadline.saturating_duration_since(Instant::now());
            if taken > 0 || left.is_zero() {
                return taken;
            }
            self.wake.wait(left);
        }
    }

    /// [`Self::take`] without waiting.
    fn take_ready(
        &mut self,
        max: usize,
        take: &mut impl FnMut(Result<ReceivedRecord, KafkaError>) -> bool,
    ) -> usize {
        self.follow_assignment();
        let mut taken = 0;
        let mut events = 0;
        // The consumer's queue first, until empty: its records were fetched before their
        // partition's queue was split, and it serves the rebalances.
        loop {
            if taken >= max {
                return taken;
            }
            match self.consumer.poll(Duration::ZERO) {
                Some(result) => {
                    taken += 1;
                    let result = result.map(|m| self.record_of(&m));
                    if !take(result) {
                        return taken;
                    }
                }
                // Nothing, or an event served (a rebalance, statistics): empty only if so.
                None if self.main.len() == 0 => break,
                None => {
                    events += 1;
                    if events >= EVENTS_PER_LOOK {
                        return taken;
                    }
                }
            }
        }
        // A rebalance served just now may have assigned partitions whose queues are not split
        // yet: their records still come through the consumer's queue, next time. Each look
        // begins after the partition that gave the last records, so that one partition with a
        // backlog does not keep the others waiting until it is drained.
        let after = self.split.range(self.resume_at..);
        let before = self.split.range(..self.resume_at);
        for (&partition, source) in after.chain(before) {
            let room = max - taken;
            if room == 0 {
                break;
            }
            let mut enough = false;
            let drained = source.drain(room, |message: &RawMessage| {
                if enough {
                    // After an error the batch ends; librdkafka fetches again from where the
                    // error is, so what follows it in this run is that error again.
                    return;
                }
                let result = message.result().map(|m| self.record_of(m));
                enough = !take(result);
            });
            if drained > 0 {
                taken += drained;
                self.resume_at = partition.saturating_add(1);
            }
            if enough {
                break;
            }
        }
        taken
    }

    /// The record `message` of the queue topic (the consumer reads no other).
    fn record_of(&self, message: &impl Message) -> ReceivedRecord {
        ReceivedRecord::from_message_of(message, Arc::clone(&self.topic))
    }

    /// Splits the queue of every assigned partition of the queue topic not split yet and drops
    /// the splits of partitions no longer assigned, once after each rebalance.
    fn follow_assignment(&mut self) {
        let rebalances = self.consumer.context().rebalances.load(Ordering::Acquire);
        if self.synced_at == Some(rebalances) && !self.incomplete {
            return;
        }
        let Ok(assignment) = self.consumer.assignment() else {
            return;
        };
        let assigned: Vec<i32> = assignment
            .elements_for_topic(&self.topic)
            .iter()
            .map(|element| element.partition())
            .collect();
        self.split
            .retain(|partition, _| assigned.contains(partition));
        self.incomplete = false;
        for partition in assigned {
            if self.split.contains_key(&partition) {
                continue;
            }
            let wake = Arc::clone(&self.wake);
            match PartitionSource::split(&self.consumer, &self.topic, partition, move || {
                wake.notify()
            }) {
                Some(source) => {
                    self.split.insert(partition, source);
                }
                None => self.incomplete = true,
            }
        }
        self.synced_at = Some(rebalances);
    }
}
