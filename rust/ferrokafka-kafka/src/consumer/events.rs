//! What the engine tells the bindings, in the order it happened: [`ConsumerEvent`]s, and the
//! [`Assignment`] of a partition to its workers ([`WorkerId`]); and what a worker's fetch
//! found ([`Fetched`]).

use std::sync::Arc;

use crate::error::KafkaIoError;
use crate::record::ReceivedRecord;

/// Identifies one assignment of one partition; a re-assigned partition gets a new id, so a late
/// acknowledgement from an abandoned worker can never touch the new owner's offsets.
pub type WorkerId = u64;

/// What [`ConcurrentConsumer::fetch`](super::ConcurrentConsumer::fetch) found.
#[derive(Debug)]
pub enum Fetched {
    /// The next records of the partition, in offset order; acknowledge or fail them by their
    /// first offset.
    Batch(Arc<Vec<ReceivedRecord>>),
    /// Nothing arrived within the wait.
    Empty,
    /// The partition is no longer this worker's (revoked, abandoned or shutting down): exit.
    Gone,
}

/// One partition handed to its workers (several with ordering by key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The worker id to fetch and acknowledge with.
    pub worker: WorkerId,
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
}

/// Something the bindings report to Python, in the order it happened.
#[derive(Debug)]
pub enum ConsumerEvent {
    /// Partitions were assigned; start one worker for each.
    Assigned(Vec<Assignment>),
    /// Partitions stopped handing out batches (revoked, or the consumer is stopping): their
    /// queued records were dropped, and their running batches get the drain time.
    Draining {
        /// The partitions.
        partitions: Vec<Assignment>,
        /// Queued records dropped (never committed, so redelivered later).
        dropped: usize,
    },
    /// Partitions were taken away after their workers drained (or were abandoned).
    Unassigned {
        /// The partitions.
        partitions: Vec<Assignment>,
        /// True when the assignment was lost (offsets were not committed).
        lost: bool,
    },
    /// A consumer without a group handled its partition up to the high watermark seen at start.
    CaughtUp {
        /// Topic name.
        topic: String,
        /// Partition number.
        partition: i32,
        /// The offset reached (the high watermark).
        offset: i64,
    },
    /// Load control stopped polling a full partition (`paused == true`), or polls it again;
    /// sent once asked for ([`ConcurrentConsumer::report_load_changes`](super::ConcurrentConsumer::report_load_changes)).
    LoadControl {
        /// Topic name.
        topic: String,
        /// Partition number.
        partition: i32,
        /// Paused, or resumed.
        paused: bool,
        /// Records queued at that moment.
        queued: usize,
        /// Bytes queued at that moment.
        queued_bytes: usize,
    },
    /// The broker answered a commit.
    Committed {
        /// `(topic, partition, next offset)` of each partition in the commit.
        offsets: Vec<(String, i32, i64)>,
        /// The error, if the commit failed.
        error: Option<KafkaIoError>,
    },
    /// An error reported by librdkafka while consuming; the consumer keeps running.
    Error(KafkaIoError),
}
