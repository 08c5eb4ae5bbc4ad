//! The headers a redelivered or dead-lettered queue message carries, and the dead letter built
//! with them.

use ferrokafka_core::markers::MessageId;

use crate::headers::{
    ORIGINAL_OFFSET_HEADER, ORIGINAL_PARTITION_HEADER, ORIGINAL_TOPIC_HEADER,
    REDELIVERY_COUNT_HEADER,
};
use crate::record::{HeaderList, OutgoingRecord};

/// The redelivery count a message carries (0 when the header is missing or unreadable).
pub fn redelivery_count(headers: &[(String, Option<Vec<u8>>)]) -> u32 {
    headers
        .iter()
        .rev()
        .find(|(name, _)| name == REDELIVERY_COUNT_HEADER)
        .and_then(|(_, value)| value.as_deref())
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The dead letter of the queue message `id` of `queue_topic` (its key, value and headers):
/// to `topic`, with the redelivery `count` and the `ferrokafka_original_*` headers.
pub(super) fn dead_letter(
    topic: &str,
    queue_topic: &str,
    id: MessageId,
    count: u32,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: &HeaderList,
) -> OutgoingRecord {
    OutgoingRecord {
        topic: topic.to_owned(),
        partition: None,
        key,
        value,
        headers: dead_letter_headers(queue_topic, id, count, headers),
        timestamp_ms: None,
    }
}

/// The headers of the dead letter of the queue message `id` of `queue_topic`: its own `headers`
/// without a redelivery count, then the count (`count`) and the `ferrokafka_original_*` headers.
/// Both backends write these: the tracker and the prefetch (markers), and the share backend
/// through the bindings.
pub fn dead_letter_headers(
    queue_topic: &str,
    id: MessageId,
    count: u32,
    headers: &HeaderList,
) -> HeaderList {
    let mut headers: HeaderList = headers
        .iter()
        .filter(|(name, _)| name != REDELIVERY_COUNT_HEADER)
        .cloned()
        .collect();
    headers.extend([
        (
            REDELIVERY_COUNT_HEADER.to_owned(),
            Some(count.to_string().into_bytes()),
        ),
        (
            ORIGINAL_TOPIC_HEADER.to_owned(),
            Some(queue_topic.as_bytes().to_vec()),
        ),
        (
            ORIGINAL_PARTITION_HEADER.to_owned(),
            Some(id.partition.to_string().into_bytes()),
        ),
        (
            ORIGINAL_OFFSET_HEADER.to_owned(),
            Some(id.offset.to_string().into_bytes()),
        ),
    ]);
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redelivery_count_reads_the_last_header_and_defaults_to_zero() {
        let header = |v: &str| {
            (
                REDELIVERY_COUNT_HEADER.to_owned(),
                Some(v.as_bytes().to_vec()),
            )
        };
        assert_eq!(redelivery_count(&[]), 0);
        assert_eq!(redelivery_count(&[header("1"), header("2")]), 2);
        assert_eq!(redelivery_count(&[header("x")]), 0);
    }
}
