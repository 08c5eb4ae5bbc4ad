//! The records the dispatcher writes: targets and tombstones straight from their schedule's
//! proxy data into librdkafka's message, and dead-letter copies.

use ferrokafka_core::codec::envelope::{self, ProxySource};
use ferrokafka_core::schedule::Dispatch;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use rdkafka::types::RDKafkaErrorCode;

use super::ProxyPayload;
use super::rounds::{RoundRecord, Rounds};
use crate::daemon::{RoomWait, enqueue_with, send_waiting_for_room};
use crate::polled_producer::PolledProducer;
use crate::record::OutgoingRecord;

pub(super) fn source_of<'a>(
    topic: &'a str,
    partition: i32,
    dispatch: &'a Dispatch<ProxyPayload>,
) -> ProxySource<'a> {
    ProxySource {
        topic,
        partition,
        offset: dispatch.offset,
        key: &dispatch.key,
    }
}

/// The tombstone that marks `dispatch`'s proxy as dispatched (same key and partition).
pub(super) fn tombstone_record<'a>(
    topic: &'a str,
    partition: i32,
    dispatch: &'a Dispatch<ProxyPayload>,
) -> DispatchRecord<'a> {
    DispatchRecord::Tombstone {
        source: source_of(topic, partition, dispatch),
        dispatch,
    }
}

/// The tombstones of every schedule of `due`, in order.
pub(super) fn tombstones_of<'a>(
    topic: &'a str,
    partition: i32,
    due: &'a [Dispatch<ProxyPayload>],
) -> Vec<DispatchRecord<'a>> {
    due.iter()
        .map(|dispatch| tombstone_record(topic, partition, dispatch))
        .collect()
}

/// A record the dispatcher produces. Targets and tombstones are written straight from their
/// schedule's proxy data into librdkafka's message (headers included), with no owned copy:
/// they are most of what the daemon sends.
pub(super) enum DispatchRecord<'a> {
    /// The target message of `dispatch`, to `partition` of its topic (None: the partitioner's).
    Target {
        source: ProxySource<'a>,
        dispatch: &'a Dispatch<ProxyPayload>,
        partition: Option<i32>,
    },
    /// The tombstone retiring the proxy of `dispatch` (same key and partition, null value).
    Tombstone {
        source: ProxySource<'a>,
        dispatch: &'a Dispatch<ProxyPayload>,
    },
    /// The dead-letter copy of a schedule whose target was refused for good.
    DeadLetter(OutgoingRecord),
}

impl RoundRecord for DispatchRecord<'_> {
    fn enqueue(
        &self,
        producer: &PolledProducer<Rounds>,
        sequence: usize,
        room: RoomWait<'_>,
    ) -> Result<(), KafkaError> {
        let (record, headers) = match self {
            DispatchRecord::DeadLetter(record) => {
                return enqueue_with(producer, record, sequence, room);
            }
            DispatchRecord::Target {
                source,
                dispatch,
                partition,
            } => {
                let proxy = &dispatch.payload;
                let target = &proxy.target;
                let mut record = BaseRecord::with_opaque_to(&target.topic, sequence);
                if let Some(key) = &target.key {
                    record = record.key(key.as_bytes());
                }
                if let Some(value) = &proxy.value {
                    record = record.payload(value.as_slice());
                }
                if let Some(partition) = partition {
                    record = record.partition(*partition);
                }
                let mut headers = HeaderBuilder::new(proxy.headers.len() + 4);
                envelope::visit_dispatch_headers(proxy.headers.iter(), source, |name, value| {
                    headers.add(name, value);
                });
                (record, headers)
            }
            DispatchRecord::Tombstone { source, dispatch } => {
                let record = BaseRecord::with_opaque_to(source.topic, sequence)
                    .key(dispatch.key.as_bytes())
                    .partition(source.partition);
                let proxy_headers = &dispatch.payload.headers;
                let mut headers = HeaderBuilder::new(proxy_headers.len() + 3);
                envelope::visit_tombstone_headers(
                    proxy_headers.iter(),
                    source.offset,
                    |name, value| {
                        headers.add(name, value);
                    },
                );
                (record, headers)
            }
        };
        send_waiting_for_room(producer, record.headers(headers.build()), room)
    }
}

/// librdkafka's header list, filled one borrowed header at a time (librdkafka copies each).
struct HeaderBuilder(Option<OwnedHeaders>);

impl HeaderBuilder {
    fn new(capacity: usize) -> Self {
        HeaderBuilder(Some(OwnedHeaders::new_with_capacity(capacity)))
    }

    fn add(&mut self, name: &str, value: &[u8]) {
        self.0 = self.0.take().map(|headers| {
            headers.insert(Header {
                key: name,
                value: Some(value),
            })
        });
    }

    fn build(self) -> OwnedHeaders {
        self.0.unwrap_or_default()
    }
}

/// Whether retrying can never deliver a record that failed with `error`: it is too large, its
/// topic or partition is illegal or missing, or the producer is not allowed to write there.
pub(super) fn refused_for_good(error: &KafkaError) -> bool {
    use RDKafkaErrorCode as Code;
    matches!(
        error.rdkafka_error_code(),
        Some(
            Code::MessageSizeTooLarge
                | Code::MessageBatchTooLarge
                | Code::InvalidMessageSize
                | Code::InvalidTopic
                | Code::InvalidRecord
                | Code::PolicyViolation
                | Code::TopicAuthorizationFailed
                | Code::ClusterAuthorizationFailed
                | Code::UnknownPartition
                | Code::UnknownTopic
        )
    )
}

/// Whether a record failed only because its transaction was doomed by another record's failure:
/// refused while the transaction could only be aborted, or purged by the abort.
pub(super) fn failed_with_its_transaction(error: &KafkaError) -> bool {
    use RDKafkaErrorCode as Code;
    matches!(
        error.rdkafka_error_code(),
        Some(Code::State | Code::PurgeQueue | Code::PurgeInflight)
    )
}
