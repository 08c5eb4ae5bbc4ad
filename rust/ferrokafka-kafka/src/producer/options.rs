//! [`AsyncProducerOptions`] (the engine's settings beyond librdkafka's own, validated once) and
//! what the engine reads from librdkafka's settings: the [`DeliveryMode`] and whether keyless
//! records may go one partition per run.

use std::time::Duration;

use ferrokafka_core::PartitionKeyHashing;
use ferrokafka_core::batch::OverflowPolicy;

use crate::config::ClientSettings;
use crate::error::{KafkaIoError, KafkaResult};

/// Settings of an [`AsyncProducer`](super::AsyncProducer) beyond librdkafka's own.
#[derive(Clone, Debug, PartialEq)]
pub struct AsyncProducerOptions {
    /// Most records buffered before the overflow policy applies [1000].
    pub max_queue_size: usize,
    /// Most bytes (keys, values, headers) buffered before the overflow policy applies.
    pub max_queue_bytes: usize,
    /// What a full queue does to a new record [raise].
    pub overflow: OverflowPolicy,
    /// How long `block` waits for room before giving up.
    pub block_timeout: Duration,
    /// Deliver when this many records are buffered; 0 = off [0].
    pub delivery_threshold: usize,
    /// Deliver this often; zero = off [0].
    pub delivery_interval: Duration,
    /// Re-sends of a record after librdkafka reported it failed; -1 = unlimited [-1].
    pub max_retries: i64,
    /// Pause before a failed record is sent again [0].
    pub retry_backoff: Duration,
    /// How a record's `partition_key` is hashed into its partition [as WaterDrop].
    pub partition_key_hashing: PartitionKeyHashing,
}

impl Default for AsyncProducerOptions {
    fn default() -> Self {
        AsyncProducerOptions {
            max_queue_size: 1000,
            max_queue_bytes: 64 * 1024 * 1024,
            overflow: OverflowPolicy::Raise,
            block_timeout: Duration::from_secs(10),
            delivery_threshold: 0,
            delivery_interval: Duration::ZERO,
            max_retries: -1,
            retry_backoff: Duration::ZERO,
            partition_key_hashing: PartitionKeyHashing::default(),
        }
    }
}

impl AsyncProducerOptions {
    pub(super) fn validate(&self) -> KafkaResult<()> {
        let invalid = |message: String| Err(KafkaIoError::InvalidArgument(message));
        if self.max_queue_size == 0 {
            return invalid("max_queue_size must be positive, got 0".to_owned());
        }
        if self.max_queue_bytes == 0 {
            return invalid("max_queue_bytes must be positive, got 0".to_owned());
        }
        if self.delivery_threshold > self.max_queue_size {
            return invalid(format!(
                "delivery_threshold ({}) cannot exceed max_queue_size ({}): the queue would fill \
                 before a delivery is triggered",
                self.delivery_threshold, self.max_queue_size
            ));
        }
        if self.max_retries < -1 {
            return invalid(format!(
                "max_retries must be -1 (unlimited) or >= 0, got {}",
                self.max_retries
            ));
        }
        Ok(())
    }
}

/// How the delivery reports of records are settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DeliveryMode {
    /// Each report settles its record; transient failures are sent again by the worker.
    Plain,
    /// `enable.idempotence`: librdkafka already retried without reordering, so a failure is final.
    Idempotent,
    /// Reports are collected for the open transaction and settled by its commit or abort.
    Transactional,
}

/// Whether librdkafka's boolean setting `key` is on.
pub(super) fn setting_on(settings: &ClientSettings, key: &str) -> bool {
    settings
        .get(key)
        .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1"))
}

/// Whether librdkafka would place keyless records stickily (one random partition for a while):
/// its `*random` partitioners do unless `sticky.partitioning.linger.ms` is 0; the others hash
/// the missing key to one fixed partition.
pub(super) fn sticky_keyless(settings: &ClientSettings) -> bool {
    let partitioner = settings.get("partitioner").map(str::trim);
    let random = partitioner.is_none_or(|p| p.ends_with("random"));
    let linger = settings
        .get("sticky.partitioning.linger.ms")
        .map(|v| v.trim().parse::<u64>().unwrap_or(1));
    random && linger != Some(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(entries: &[(&str, &str)]) -> ClientSettings {
        ClientSettings::new(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
        .unwrap()
    }

    /// Keyless records go one partition per run only where librdkafka itself would place them
    /// stickily: never under a partitioner that hashes the missing key to one partition.
    #[test]
    fn keyless_runs_follow_librdkafkas_partitioner_setting() {
        let cases = [
            (vec![], true),
            (vec![("partitioner", "consistent_random")], true),
            (vec![("partitioner", "murmur2_random")], true),
            (vec![("partitioner", "random")], true),
            (vec![("partitioner", "consistent")], false),
            (vec![("partitioner", "murmur2")], false),
            (vec![("partitioner", "fnv1a")], false),
            (vec![("sticky.partitioning.linger.ms", "0")], false),
            (vec![("sticky.partitioning.linger.ms", "10")], true),
        ];
        for (entries, expected) in cases {
            let mut entries = entries;
            entries.push(("bootstrap.servers", "127.0.0.1:1"));
            assert_eq!(sticky_keyless(&settings(&entries)), expected, "{entries:?}");
        }
    }
}
