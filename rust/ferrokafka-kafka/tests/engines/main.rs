//! The engines against a real Kafka broker, from Rust, without Python: the AsyncProducer's
//! delivery accounting, the ConcurrentConsumer's commits across a rebalance, where it starts without a group and the events it sends, the Scheduler's
//! load-dispatch-tombstone cycle and the QueueConsumer's END markers of single acks. Modelled on
//! rust-rdkafka's `tests/test_high_producers.rs` and `tests/test_transactions.rs`: each test makes
//! its own topics and group, drives the engine through the crate's public API, and checks the
//! result with plain rdkafka clients.
//!
//! The broker comes from `KAFKA_BOOTSTRAP` (scripts/test.sh starts one with scripts/kafka.sh and
//! sets it); without it every test that needs it fails, so a green run means they ran. One test
//! binary for all engines: the static librdkafka is linked once.

mod client;
mod common;
mod consumer;
mod consumer_events;
mod consumer_start;
mod polled_producer;
mod producer;
mod queue_consumer;
mod scheduler;
mod transaction_outcome;
