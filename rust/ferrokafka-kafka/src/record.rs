//! Owned Kafka records: what the engines send and what they hand back.
//!
//! Records are plain owned data so they cross thread and FFI boundaries without borrowing from
//! librdkafka buffers.

use std::sync::Arc;

use rdkafka::Message;
use rdkafka::message::{Header, Headers, OwnedHeaders, Timestamp};
use rdkafka::producer::BaseRecord;
use rdkafka::util::IntoOpaque;

/// Header list in wire order; a header value may be null.
pub type HeaderList = Vec<(String, Option<Vec<u8>>)>;

/// A record to produce.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutgoingRecord {
    /// Destination topic.
    pub topic: String,
    /// Explicit partition, or `None` for the partitioner's choice.
    pub partition: Option<i32>,
    /// Record key.
    pub key: Option<Vec<u8>>,
    /// Record value; `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    /// Record headers.
    pub headers: HeaderList,
    /// Create time in milliseconds since the epoch, or `None` for "now".
    pub timestamp_ms: Option<i64>,
}

impl OutgoingRecord {
    /// Bytes this record occupies in buffers: key, value and headers.
    pub fn size(&self) -> usize {
        held_bytes(self.key.as_ref(), self.value.as_ref(), &self.headers)
    }

    /// The record as rdkafka's `BaseRecord` (borrowing its bytes; librdkafka copies them when
    /// it takes the record), with `opaque` for its delivery report.
    pub fn base_record<O: IntoOpaque>(&self, opaque: O) -> BaseRecord<'_, [u8], [u8], O> {
        let mut base = BaseRecord::with_opaque_to(&self.topic, opaque);
        if let Some(key) = &self.key {
            base = base.key(key.as_slice());
        }
        if let Some(value) = &self.value {
            base = base.payload(value.as_slice());
        }
        if let Some(partition) = self.partition {
            base = base.partition(partition);
        }
        if let Some(timestamp) = self.timestamp_ms {
            base = base.timestamp(timestamp);
        }
        if let Some(headers) = self.owned_headers() {
            base = base.headers(headers);
        }
        base
    }

    /// The headers in librdkafka's form.
    pub fn owned_headers(&self) -> Option<OwnedHeaders> {
        if self.headers.is_empty() {
            return None;
        }
        let headers = self.headers.iter().fold(
            OwnedHeaders::new_with_capacity(self.headers.len()),
            |acc, (key, value)| {
                acc.insert(Header {
                    key,
                    value: value.as_deref(),
                })
            },
        );
        Some(headers)
    }
}

/// How a record's timestamp was assigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampKind {
    /// The record has no timestamp.
    NotAvailable,
    /// Set by the producer.
    CreateTime,
    /// Set by the broker when appended.
    LogAppendTime,
}

/// A record read from, or delivered to, a topic partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedRecord {
    /// Topic name, shared by the records of one partition (one allocation fewer per record).
    pub topic: Arc<str>,
    /// Partition number.
    pub partition: i32,
    /// Offset in the partition.
    pub offset: i64,
    /// Record key.
    pub key: Option<Vec<u8>>,
    /// Record value; `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    /// Record headers.
    pub headers: HeaderList,
    /// Timestamp kind.
    pub timestamp_kind: TimestampKind,
    /// Timestamp in milliseconds since the epoch (0 when not available).
    pub timestamp_ms: i64,
}

/// Bytes a record's key, value and headers hold.
fn held_bytes(key: Option<&Vec<u8>>, value: Option<&Vec<u8>>, headers: &HeaderList) -> usize {
    key.map_or(0, Vec::len)
        + value.map_or(0, Vec::len)
        + headers
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
            .sum::<usize>()
}

impl ReceivedRecord {
    /// Bytes this record holds in memory: key, value and headers.
    pub fn size(&self) -> usize {
        held_bytes(self.key.as_ref(), self.value.as_ref(), &self.headers)
    }

    /// A record that never reached the broker, shown with partition -1 (or the one asked for)
    /// and offset -1001 (librdkafka's "invalid offset"), as confluent-kafka reports failures.
    pub fn undelivered(record: OutgoingRecord) -> Self {
        ReceivedRecord {
            topic: record.topic.into(),
            partition: record.partition.unwrap_or(-1),
            offset: -1001,
            key: record.key,
            value: record.value,
            headers: record.headers,
            timestamp_kind: if record.timestamp_ms.is_some() {
                TimestampKind::CreateTime
            } else {
                TimestampKind::NotAvailable
            },
            timestamp_ms: record.timestamp_ms.unwrap_or(0),
        }
    }

    /// Copies a librdkafka message into owned memory.
    pub fn from_message<M: Message>(message: &M) -> Self {
        Self::from_message_of(message, message.topic().into())
    }

    /// As [`ReceivedRecord::from_message`], its topic name shared with the records `names`
    /// made before: for loops over many records of few topics.
    pub fn from_message_named<M: Message>(message: &M, names: &mut TopicName) -> Self {
        Self::from_message_of(message, names.of(message.topic()))
    }

    /// As [`ReceivedRecord::from_message`] for a message of `topic`, known beforehand (a
    /// partition's own queue): the name is neither read nor compared per record.
    pub fn from_message_of<M: Message>(message: &M, topic: Arc<str>) -> Self {
        let headers = header_list(message);
        let (timestamp_kind, timestamp_ms) = match message.timestamp() {
            Timestamp::NotAvailable => (TimestampKind::NotAvailable, 0),
            Timestamp::CreateTime(ms) => (TimestampKind::CreateTime, ms),
            Timestamp::LogAppendTime(ms) => (TimestampKind::LogAppendTime, ms),
        };
        ReceivedRecord {
            topic,
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            value: message.payload().map(<[u8]>::to_vec),
            headers,
            timestamp_kind,
            timestamp_ms,
        }
    }
}

/// The topic name of the records made last, handed to the next records of that topic: one
/// allocation per run of a topic instead of one per record (and one free, often on another
/// thread).
#[derive(Debug, Default)]
pub struct TopicName(Option<Arc<str>>);

impl TopicName {
    /// `name`, shared with the previous record when it had the same topic.
    pub fn of(&mut self, name: &str) -> Arc<str> {
        match &self.0 {
            Some(last) if **last == *name => Arc::clone(last),
            _ => Arc::clone(self.0.insert(name.into())),
        }
    }
}

/// A message's headers, owned, in wire order.
pub fn header_list<M: Message>(message: &M) -> HeaderList {
    message
        .headers()
        .map(|h| {
            h.iter()
                .map(|header| (header.key.to_owned(), header.value.map(<[u8]>::to_vec)))
                .collect()
        })
        .unwrap_or_default()
}
