//! The consumer's counters and snapshots: [`PartitionCounters`] per partition and over the
//! consumer's lifetime ([`Totals`]), and [`ConcurrentConsumer::stats`].

use std::time::Duration;

use super::ConcurrentConsumer;
use super::events::WorkerId;
use crate::locks::lock;
use crate::statistics::{BrokerOffsets, GroupStatistics};

/// Counters of one partition (or totals of the consumer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionCounters {
    /// Records routed from librdkafka into the queue.
    pub received: u64,
    /// Records in batches the handler finished.
    pub handled: u64,
    /// Records in batches the handler raised on and that were acknowledged anyway.
    pub failed: u64,
    /// Records handed to the dead-letter topic.
    pub dead_lettered: u64,
    /// Handler retries (the `retry` error policy).
    pub retries: u64,
    /// Batches handed to the worker.
    pub batches: u64,
    /// Times load control stopped polling the partition (its buffer was full).
    pub pauses: u64,
    /// Times load control polled it again (its buffer went down to half).
    pub resumes: u64,
    /// Queued records dropped on revoke or shutdown (redelivered later: never committed).
    pub dropped: u64,
    /// Batches abandoned because their handler outlasted the drain time.
    pub abandoned: u64,
}

impl PartitionCounters {
    pub(super) fn add(&mut self, other: &PartitionCounters) {
        self.received += other.received;
        self.handled += other.handled;
        self.failed += other.failed;
        self.dead_lettered += other.dead_lettered;
        self.retries += other.retries;
        self.batches += other.batches;
        self.pauses += other.pauses;
        self.resumes += other.resumes;
        self.dropped += other.dropped;
        self.abandoned += other.abandoned;
    }
}

/// A snapshot of one assigned partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionStats {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
    /// Its worker id.
    pub worker: WorkerId,
    /// Records queued now.
    pub queued: usize,
    /// Bytes queued now.
    pub queued_bytes: usize,
    /// Whether load control holds the partition (its buffer is full: not polled).
    pub paused: bool,
    /// Records in the batch being handled now.
    pub in_flight: usize,
    /// Next offset to commit: one past the last record of the last finished batch.
    pub position: Option<i64>,
    /// The last offset the broker confirmed committed.
    pub committed: Option<i64>,
    /// Counters since the partition was assigned.
    pub counters: PartitionCounters,
    /// The partition's offsets from librdkafka's latest statistics (`statistics.interval.ms`),
    /// `None` until the first statistics arrived after the assignment.
    pub broker: Option<BrokerOffsets>,
    /// Offset of the first record received since the assignment.
    pub first_received: Option<i64>,
}

/// A snapshot of the whole consumer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Counters over the consumer's lifetime, including partitions no longer assigned.
    pub totals: PartitionCounters,
    /// Commit requests answered successfully.
    pub commits: u64,
    /// Commit requests that failed.
    pub commit_errors: u64,
    /// Assigned partitions, ordered by topic and partition.
    pub partitions: Vec<PartitionStats>,
    /// The group's state from the latest statistics; `None` without a group or statistics.
    pub group: Option<GroupStatistics>,
    /// Time since the poller last returned from librdkafka's poll; `None` before the first.
    pub poll_age: Option<Duration>,
    /// Bytes per second received from and sent to the brokers between the latest two
    /// statistics; `None` before the second.
    pub transfer_rates: Option<(u64, u64)>,
}

/// The counters of partitions no longer assigned, and the commit answers.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) counters: PartitionCounters,
    pub(super) commits: u64,
    pub(super) commit_errors: u64,
}

impl ConcurrentConsumer {
    /// A snapshot of the counters.
    pub fn stats(&self) -> ConsumerStats {
        let totals = lock(&self.shared.totals);
        let mut stats = ConsumerStats {
            totals: totals.counters,
            commits: totals.commits,
            commit_errors: totals.commit_errors,
            partitions: Vec::new(),
            group: self.shared.statistics.group(),
            poll_age: lock(&self.shared.polled_at).map(|at| at.elapsed()),
            transfer_rates: self.shared.statistics.transfer_rates(),
        };
        drop(totals);
        for slot in self.shared.all_slots() {
            let state = slot.lock();
            stats.totals.add(&state.counters);
            stats.partitions.push(PartitionStats {
                topic: slot.topic.to_string(),
                partition: slot.partition,
                worker: slot.worker,
                queued: state.buffer.queued(),
                queued_bytes: state.buffer.queued_bytes(),
                paused: state.buffer.is_full(),
                in_flight: state.in_flight.values().map(|f| f.records.len()).sum(),
                position: state.buffer.committable(),
                committed: state.committed,
                counters: state.counters,
                broker: state.broker.clone(),
                first_received: state.first_received,
            });
        }
        stats
    }
}
