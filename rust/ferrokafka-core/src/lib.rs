//! ferrokafka-core: the pure heart of ferrokafka.
//!
//! Invariants: no I/O, no threads, no clock reads (time is always an argument: milliseconds since
//! the Unix epoch as `u64` unless a name says seconds), no Python and no Kafka. Every structure
//! here is deterministic, so it is tested with `cargo test` alone (unit tests, proptest models and
//! fuzz-style totality tests in `tests/`) and benchmarked with criterion (`benches/`).

#![deny(unsafe_code)]

pub mod batch;
pub mod calendar;
pub mod codec;
pub mod consumer_lag;
pub mod deadline_queue;
pub mod delivery_report;
pub mod error;
pub mod error_policy;
pub mod first_records;
pub mod markers;
pub mod partition_buffer;
pub mod partition_key;
pub mod partition_progress;
pub mod redact;
pub mod schedule;
pub mod topic_name;
pub mod tracking;

pub use batch::{
    BatchBuffer, BufferLimits, DeliveryPolicy, Overflow, OverflowLimit, OverflowPolicy, PushOutcome,
};
pub use codec::json::{Document, decode_document, encode_document, encode_json_document};
pub use codec::state::TrackerState;
pub use deadline_queue::DeadlineQueue;
pub use delivery_report::{DeliveryReport, DeliveryReports};
pub use error::CoreError;
pub use error_policy::{ErrorPolicy, OnError};
pub use first_records::FirstRecords;
pub use markers::{
    Marker, MarkerOutcome, MarkersQueue, MarkersQueueConfig, MessageId, MessagePayload, Redelivery,
};
pub use partition_buffer::{BufferedRecord, LoadChange, OrderBy, PartitionBuffer, PartitionLimits};
pub use partition_key::PartitionKeyHashing;
pub use partition_progress::PartitionProgress;
pub use schedule::{
    ApplyOutcome, Dispatch, PayloadFetch, ScheduleRecord, ScheduleTracker, TrackerConfig,
};
