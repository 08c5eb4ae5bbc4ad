//! Choosing partitions without librdkafka's per-record partitioner:
//! - from a partition key, by the engine's [`PartitionKeyHashing`] rule (the core's
//!   `partition_key` module: by default as WaterDrop hashes it), so a key lands where a Ruby
//!   producer would put it;
//! - for a run of keyless records handed over together, one partition per run, the partitions
//!   in turn: what librdkafka's sticky partitioner does for keyless records (one partition per
//!   batch), without its topic lookup and lock for every record.
//!
//! Threading: [`PartitionCounts`] caches partition counts behind a mutex. A missing count is
//! fetched with a metadata request (blocking, bounded by a timeout); a count older than
//! librdkafka's default metadata refresh interval is fetched again, so partitions added to a
//! topic are used; a count that cannot be refreshed (broker down) is kept.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferrokafka_core::PartitionKeyHashing;
use rdkafka::client::{Client, ClientContext};

/// How long a metadata request for a partition count may take (partition keys), unless the caller
/// has a deadline of its own.
pub(crate) const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a metadata request for a keyless run may take: the run goes to librdkafka's own
/// partitioner instead of waiting longer (during an outage, say).
const RUN_METADATA_TIMEOUT: Duration = Duration::from_millis(200);
/// How old a count may be before it is fetched again (librdkafka's
/// `topic.metadata.refresh.interval.ms` default).
const COUNT_MAX_AGE: Duration = Duration::from_secs(300);
/// How long a failed fetch keeps the next one from being tried for the same topic.
const FAILED_FETCH_PAUSE: Duration = Duration::from_secs(1);

/// What is known of one topic.
#[derive(Debug)]
struct TopicCount {
    /// Its partition count, once learnt.
    count: Option<u32>,
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

    /// The partition for `key` on `topic`, or `None` for an empty key or when the topic's
    /// partition count cannot be learned within `timeout` (the record then goes to librdkafka's
    /// partitioner).
    pub fn partition_for<C: ClientContext>(
        &self,
        client: &Client<C>,
        topic: &str,
        key: &[u8],
        timeout: Duration,
    ) -> Option<i32> {
        if key.is_empty() {
            return None;
        }
        let count = self.with_count(client, topic, timeout, |count, _| count)?;
        i32::try_from(self.hashing.partition(key, count)?).ok()
    }

    /// The partition for the next run of keyless records of `topic`: each run the next
    /// partition. `None` while the count is unknown (librdkafka's partitioner decides).
    pub fn partition_for_run<C: ClientContext>(
        &self,
        client: &Client<C>,
        topic: &str,
    ) -> Option<i32> {
        let partition = self.with_count(client, topic, RUN_METADATA_TIMEOUT, |count, next| {
            let partition = *next % count;
            *next = next.wrapping_add(1);
            partition
        })?;
        i32::try_from(partition).ok()
    }

    /// Applies `use_count` to `topic`'s count (and its run rotation), fetching the count first
    /// when it is missing or old.
    fn with_count<C: ClientContext, T>(
        &self,
        client: &Client<C>,
        topic: &str,
        timeout: Duration,
        use_count: impl FnOnce(u32, &mut u32) -> T,
    ) -> Option<T> {
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let known = topics.get(topic);
        let stale = match known {
            None => true,
            Some(t) if t.count.is_none() => now.duration_since(t.checked) >= FAILED_FETCH_PAUSE,
            Some(t) => now.duration_since(t.checked) >= COUNT_MAX_AGE,
        };
        if stale {
            let fetched = fetch_count(client, topic, timeout);
            let entry = topics.entry(topic.to_owned()).or_insert(TopicCount {
                count: None,
                checked: now,
                // Runs of producers started together should not all begin on partition 0.
                next_run: rand_start(),
            });
            entry.checked = now;
            entry.count = fetched.or(entry.count);
        }
        let entry = topics.get_mut(topic)?;
        let count = entry.count?;
        Some(use_count(count, &mut entry.next_run))
    }
}

/// The partition count of `topic` from a metadata request; `None` when it cannot be learnt.
fn fetch_count<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    timeout: Duration,
) -> Option<u32> {
    let metadata = client.fetch_metadata(Some(topic), timeout).ok()?;
    let topic = metadata.topics().first()?;
    if topic.error().is_some() {
        return None;
    }
    u32::try_from(topic.partitions().len())
        .ok()
        .filter(|&count| count > 0)
}

/// A starting point for a topic's run rotation that differs between processes and producers.
fn rand_start() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    // RandomState is seeded per process and per instance: enough spread, no extra crate.
    u32::try_from(RandomState::new().hash_one(0u8) & u64::from(u32::MAX)).unwrap_or(0)
}
