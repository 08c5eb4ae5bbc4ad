//! Choosing partitions without librdkafka's per-record partitioner:
//! - from a partition key, by the engine's [`PartitionKeyHashing`] rule (the core's
//!   `partition_key` module: by default as WaterDrop hashes it), so a key lands where a Ruby
//!   producer would put it;
//! - for a run of keyless records handed over together, one partition per run, the partitions
//!   in turn: what librdkafka's sticky partitioner does for keyless records (one partition per
//!   batch), without its topic lookup and lock for every record.
//!
//! Threading: [`PartitionCounts`] caches partition counts behind a mutex. A missing count is
//! fetched with a metadata request (blocking, bounded by a timeout); a count older than 30 s
//! (WaterDrop's cache) is fetched again, waiting at most 1 s, so partitions added to a topic are
//! used as soon as a Ruby producer uses them; a count that cannot be refreshed (broker down) is
//! kept.
//!
//! A partition key whose topic's count was never learnt has no partition: [`PartitionCounts::
//! partition_for`] says why (the metadata request's error) instead of letting librdkafka place
//! the record anywhere, and the caller retries or refuses it. A keyless run has no such rule.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferrokafka_core::PartitionKeyHashing;
use rdkafka::client::{Client, ClientContext};
use rdkafka::error::RDKafkaErrorCode;

use crate::error::KafkaIoError;

/// How long a metadata request for a partition count may take (partition keys), unless the caller
/// has a deadline of its own.
pub(crate) const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a metadata request for a keyless run may take: the run goes to librdkafka's own
/// partitioner instead of waiting longer (during an outage, say).
const RUN_METADATA_TIMEOUT: Duration = Duration::from_millis(200);
/// How old a count may be before it is fetched again: as long as WaterDrop (rdkafka-ruby) caches
/// one, so after partitions are added a partition key moves to its new partition when a Ruby
/// producer's does (librdkafka's own refresh, 5 min, split a schedule from its cancel that long).
const COUNT_MAX_AGE: Duration = Duration::from_secs(30);
/// How long the refresh of a known count may wait: the known count serves when it fails.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a failed fetch keeps the next one from being tried for the same topic.
pub(crate) const FAILED_FETCH_PAUSE: Duration = Duration::from_secs(1);
/// What failed errors name as their operation.
const CHOOSING: &str = "choosing a partition for partition_key";

/// What is known of one topic.
#[derive(Debug)]
struct TopicCount {
    /// Its partition count, once learnt.
    count: Option<u32>,
    /// Why the last fetch failed, while no count was ever learnt.
    failure: Option<KafkaIoError>,
    /// When the count was last fetched or a fetch last failed.
    checked: Instant,
    /// The next keyless run's partition (modulo the count).
    next_run: u32,
}

/// Partition counts per topic, fetched on first use, and the rule that hashes partition keys.
#[derive(Debug, Default)]
pub struct PartitionCounts {
    topics: Mutex<HashMap<String, TopicCount>>,
    hashing: PartitionKeyHashing,
}

impl PartitionCounts {
    /// Counts for an engine whose partition keys are hashed by `hashing`.
    pub fn new(hashing: PartitionKeyHashing) -> Self {
        Self {
            topics: Mutex::default(),
            hashing,
        }
    }

    /// The partition for `key` on `topic`: `None` for an empty key (librdkafka's partitioner
    /// places the record), an error when the topic's partition count has never been learnt (the
    /// metadata request's own error, within `timeout`, or the last one's during the pause after
    /// a failed fetch). Errors are retriable unless the request was refused for good.
    pub fn partition_for<C: ClientContext>(
        &self,
        client: &Client<C>,
        topic: &str,
        key: &[u8],
        timeout: Duration,
    ) -> Result<Option<i32>, KafkaIoError> {
        if key.is_empty() {
            return Ok(None);
        }
        let count = self.with_count(client, topic, timeout, |count, _| count)?;
        Ok(self
            .hashing
            .partition(key, count)
            .and_then(|p| i32::try_from(p).ok()))
    }

    /// The partition for the next run of keyless records of `topic`: each run the next
    /// partition. `None` while the count is unknown (librdkafka's partitioner decides).
    pub fn partition_for_run<C: ClientContext>(
        &self,
        client: &Client<C>,
        topic: &str,
    ) -> Option<i32> {
        let partition = self
            .with_count(client, topic, RUN_METADATA_TIMEOUT, |count, next| {
                let partition = *next % count;
                *next = next.wrapping_add(1);
                partition
            })
            .ok()?;
        i32::try_from(partition).ok()
    }

    /// Applies `use_count` to `topic`'s count (and its run rotation), fetching the count first
    /// when it is missing or old; why there is none when it was never learnt.
    fn with_count<C: ClientContext, T>(
        &self,
        client: &Client<C>,
        topic: &str,
        timeout: Duration,
        use_count: impl FnOnce(u32, &mut u32) -> T,
    ) -> Result<T, KafkaIoError> {
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let known = topics.get(topic);
        let stale = match known {
            None => true,
            Some(t) if t.count.is_none() => now.duration_since(t.checked) >= FAILED_FETCH_PAUSE,
            Some(t) => now.duration_since(t.checked) >= COUNT_MAX_AGE,
        };
        if stale {
            let timeout = match known.and_then(|t| t.count) {
                Some(_) => timeout.min(REFRESH_TIMEOUT),
                None => timeout,
            };
            let fetched = fetch_count(client, topic, timeout);
            let entry = topics.entry(topic.to_owned()).or_insert(TopicCount {
                count: None,
                failure: None,
                checked: now,
                // Runs of producers started together should not all begin on partition 0.
                next_run: rand_start(),
            });
            entry.checked = now;
            match fetched {
                Ok(count) => {
                    entry.count = Some(count);
                    entry.failure = None;
                }
                // A count learnt before is kept (and used) until a fetch succeeds again.
                Err(failure) if entry.count.is_none() => entry.failure = Some(failure),
                Err(_) => {}
            }
        }
        let entry = topics
            .get_mut(topic)
            .expect("a topic is known once it was fetched");
        match entry.count {
            Some(count) => Ok(use_count(count, &mut entry.next_run)),
            None => Err(entry
                .failure
                .clone()
                .unwrap_or_else(|| no_partitions(topic))),
        }
    }
}

/// The partition count of `topic` from a metadata request, or why it cannot be learnt.
fn fetch_count<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    timeout: Duration,
) -> Result<u32, KafkaIoError> {
    let metadata = client
        .fetch_metadata(Some(topic), timeout)
        .map_err(|err| KafkaIoError::from_rdkafka(CHOOSING, err, timeout, None))?;
    let Some(found) = metadata.topics().first() else {
        return Err(no_partitions(topic));
    };
    if let Some(err) = found.error() {
        let code = RDKafkaErrorCode::from(err);
        return Err(KafkaIoError::from_code(
            CHOOSING,
            code,
            Some(format!("topic {topic:?}: {code}")),
        ));
    }
    u32::try_from(found.partitions().len())
        .ok()
        .filter(|&count| count > 0)
        .ok_or_else(|| no_partitions(topic))
}

/// A topic whose metadata lists no partitions (yet): one being created, say.
fn no_partitions(topic: &str) -> KafkaIoError {
    KafkaIoError::from_code(
        CHOOSING,
        RDKafkaErrorCode::UnknownTopicOrPartition,
        Some(format!("topic {topic:?} has no partitions (yet)")),
    )
}

/// A starting point for a topic's run rotation that differs between processes and producers.
fn rand_start() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    // RandomState is seeded per process and per instance: enough spread, no extra crate.
    u32::try_from(RandomState::new().hash_one(0u8) & u64::from(u32::MAX)).unwrap_or(0)
}
