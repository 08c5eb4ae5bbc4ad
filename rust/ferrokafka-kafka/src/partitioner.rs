//! Choosing a partition from a partition key, as ruby-kafka and librdkafka's `consistent`
//! partitioner do (CRC32 of the key modulo the partition count), so a key lands where the Ruby
//! and librdkafka producers would put it.
//!
//! Threading: [`PartitionCounts`] caches partition counts behind a mutex; a missing count is
//! fetched once with a metadata request (blocking, bounded by a timeout).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::client::{Client, ClientContext};

/// How long a metadata request for a partition count may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Partition counts per topic, fetched on first use.
#[derive(Debug, Default)]
pub struct PartitionCounts {
    counts: Mutex<HashMap<String, u32>>,
}

impl PartitionCounts {
    /// The partition for `key` on `topic`, or `None` when the topic's partition count cannot be
    /// learned (the record then goes to librdkafka's partitioner).
    pub fn partition_for<C: ClientContext>(
        &self,
        client: &Client<C>,
        topic: &str,
        key: &[u8],
    ) -> Option<i32> {
        let count = self.count(client, topic)?;
        i32::try_from(crc32fast::hash(key) % count).ok()
    }

    fn count<C: ClientContext>(&self, client: &Client<C>, topic: &str) -> Option<u32> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get(topic) {
            return Some(*count);
        }
        let metadata = client.fetch_metadata(Some(topic), METADATA_TIMEOUT).ok()?;
        let count = u32::try_from(metadata.topics().first()?.partitions().len()).ok()?;
        if count == 0 {
            return None;
        }
        counts.insert(topic.to_owned(), count);
        Some(count)
    }
}
