//! The queue consumer's counters and the redelivery tracker's partition rows as typed objects:
//! what `_RawQueueConsumer.stats` and `_RawRedeliveryTracker.status` return. Python reads
//! attributes; `as_dict()` gives the dicts the public `stats()` and `status()` return.

use ferrokafka_kafka::{QueueConsumerStats, TrackerPartitionStatus};
use pyo3::prelude::*;

use crate::flat_record::{flat_record, record_of};
use crate::statistics::PyBrokerOffsets;

flat_record! {
    /// Counters of a queue consumer.
    "QueueConsumerStats" PyQueueConsumerStats {
        /// Messages marked (START written, offsets committed): handed out or prefetched.
        received: u64,
        /// END markers sent by `ack`.
        acked: u64,
        /// Messages given up by `nack`.
        nacked: u64,
        /// KEEPALIVE markers sent, by `keepalive` and automatically.
        keepalives: u64,
        /// END or KEEPALIVE markers librdkafka could not deliver.
        failed_markers: u64,
        /// Messages whose START the markers topic refused for good: dead-lettered or handed back.
        refused: u64,
    }
}

flat_record! {
    /// One markers partition of a redelivery tracker.
    "RedeliveryPartitionStatus" PyRedeliveryPartitionStatus {
        /// Markers partition.
        partition: i32,
        /// Whether the partition was read to its end (redelivery runs only then).
        caught_up: bool,
        /// Messages tracked: open, or being redelivered.
        open: usize,
        /// Markers read.
        applied: u64,
        /// Messages re-produced to the queue topic.
        redelivered: u64,
        /// Messages produced to the dead-letter topic.
        dead_lettered: u64,
        /// Messages past `max_redeliveries` dropped for want of a dead-letter topic.
        dropped: u64,
        /// Markers that could not be decoded (logged and skipped).
        undecodable: u64,
        /// Last committed markers offset.
        committed: Option<u64>,
    }
    records {
        /// The partition's offsets from librdkafka's latest statistics; None before the first.
        broker: PyBrokerOffsets,
    }
}

impl From<QueueConsumerStats> for PyQueueConsumerStats {
    fn from(s: QueueConsumerStats) -> Self {
        Self {
            received: s.received,
            acked: s.acked,
            nacked: s.nacked,
            keepalives: s.keepalives,
            failed_markers: s.failed_markers,
            refused: s.refused,
        }
    }
}

/// The typed Python object of one of the tracker's partition rows.
pub(crate) fn tracker_partition_status(
    py: Python<'_>,
    s: TrackerPartitionStatus,
) -> PyResult<PyRedeliveryPartitionStatus> {
    Ok(PyRedeliveryPartitionStatus {
        partition: s.partition,
        caught_up: s.caught_up,
        open: s.open,
        applied: s.applied,
        redelivered: s.redelivered,
        dead_lettered: s.dead_lettered,
        dropped: s.dropped,
        undecodable: s.undecodable,
        committed: s.committed,
        broker: record_of(py, s.broker)?,
    })
}
