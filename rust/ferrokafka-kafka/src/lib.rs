//! ferrokafka-kafka: ferrokafka's Kafka engines, built on the rdkafka crate.
//!
//! Invariants: no Python here. Every call that waits on the network takes an explicit timeout,
//! and rdkafka callbacks never leave Rust: they push events into channels that the bindings drain
//! on a Python thread.

mod batch_produce;
mod bounded_commit;
pub mod client;
pub mod config;
mod connection_failure;
pub mod consumer;
mod daemon;
pub mod dead_letter;
mod debug_form;
pub mod error;
pub mod headers;
mod locks;
mod main_queue;
mod main_queue_watcher;
pub mod oauth;
mod packed_headers;
mod partition_source;
pub mod partitioner;
pub mod polled_producer;
pub mod producer;
pub mod record;
pub mod redelivery;
mod report_sample;
pub mod scheduling;
pub mod statistics;
mod topic_roles;
pub mod transaction_outcome;
mod transaction_step;
mod undecodable;
mod wake;

pub use client::{BrokerInfo, Client, ClusterInfo, NewTopicSpec, PartitionInfo, TopicInfo};
pub use config::{ClientRole, ClientSettings, redact};
pub use consumer::{
    Assignment, ConcurrentConsumer, ConsumerEvent, ConsumerOptions, ConsumerStats, ErrorPolicy,
    Fetched, OnError, OrderBy, Outcome, PartitionCounters, PartitionStats, StartAt, Subscription,
    Verdict, WorkerId,
};
pub use daemon::{Daemon, DaemonStatus};
pub use dead_letter::{DeadLetterWriter, Failure};
pub use error::{KafkaIoError, KafkaResult};
pub use oauth::{BearerToken, TokenSource};
pub use producer::{
    Acknowledgement, AsyncProducer, AsyncProducerOptions, DeliveryWaiters, POSITION_ONLY, Pending,
    ProducerEvent, ProducerStats, Refusal, Settled, Ticket,
};
pub use record::{OutgoingRecord, ReceivedRecord, TimestampKind};
pub use redelivery::{
    QueueConsumer, QueueConsumerOptions, QueueConsumerStats, RedeliveryOptions, RedeliveryTracker,
    Refused, Taken, TrackerPartitionStatus,
};
pub use scheduling::{PartitionStatus, Scheduler, SchedulerOptions};
pub use statistics::{BrokerOffsets, GroupStatistics};
pub use transaction_outcome::{TransactionOutcome, Witness, transaction_outcome};

/// The version of the librdkafka linked into this build, e.g. `"2.12.1"`.
pub fn librdkafka_version() -> String {
    rdkafka::util::get_rdkafka_version().1
}
