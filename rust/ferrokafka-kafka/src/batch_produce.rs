//! [`BatchTopic`]: hands many small records of one topic to librdkafka in one call
//! (`rd_kafka_produce_batch`), as the queue consumer does with the START and END markers of a
//! batch. rdkafka's `send` costs, per record, a topic lookup by name, its own clock reads and a
//! lock of the topic; one batch call pays those once.
//!
//! Invariants: every record is copied by librdkafka (`RD_KAFKA_MSG_F_COPY`) before the call
//! returns, so the payloads may live in a reused buffer. Records librdkafka takes are reported
//! to the producer's context like those of `send` (the delivery opaque travels in the message's
//! `_private` pointer, as rdkafka's own `send` puts it); a record refused because the queue is
//! full is offered again after 1 ms (in order: librdkafka refuses every record after the first
//! full one); any other refusal ends the call with that error and the count of records taken.
//!
//! Safety: the topic handle belongs to the producer's librdkafka handle; the [`BatchTopic`] owns
//! the producer, so the handle is released (in `Drop`) before the producer is.

use std::ffi::CString;
use std::sync::OnceLock;
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::error::KafkaError;
use rdkafka::producer::{Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::util::IntoOpaque;

/// The payloads of a batch of records, encoded one after another into one buffer.
#[derive(Default)]
pub(crate) struct Payloads {
    bytes: Vec<u8>,
    /// Each record's partition and where its payload ends in `bytes`.
    records: Vec<(i32, usize)>,
}

impl Payloads {
    /// Room for `records` records of `bytes` bytes in all.
    pub(crate) fn with_capacity(records: usize, bytes: usize) -> Self {
        Payloads {
            bytes: Vec::with_capacity(bytes),
            records: Vec::with_capacity(records),
        }
    }

    /// Adds a record for `partition` whose payload `encode` appends to the buffer.
    pub(crate) fn push(&mut self, partition: i32, encode: impl FnOnce(&mut Vec<u8>)) {
        encode(&mut self.bytes);
        self.records.push((partition, self.bytes.len()));
    }

    fn slices(&self) -> Vec<(i32, &[u8])> {
        let mut begin = 0;
        self.records
            .iter()
            .map(|&(partition, end)| {
                let payload = &self.bytes[begin..end];
                begin = end;
                (partition, payload)
            })
            .collect()
    }
}

/// librdkafka's RD_KAFKA_PARTITION_UA (a macro the bindings lack): with `F_PARTITION` each
/// message's own partition is used instead.
const PARTITION_UNASSIGNED: i32 = -1;

/// A producer with a librdkafka handle of the one topic it writes, for [`BatchTopic::produce`].
pub(crate) struct BatchTopic<C: ProducerContext + 'static> {
    name: CString,
    /// Created at the first `produce`: a handle made when the consumer started, before the
    /// producer had connected, held the first markers back by ~0.4 s (measured; librdkafka
    /// seemingly learnt the topic's partitions only at a later metadata refresh).
    topic: OnceLock<TopicHandle>,
    /// Dropped after `topic` is released.
    producer: ThreadedProducer<C>,
}

/// A librdkafka topic handle (null if librdkafka refused to make it).
struct TopicHandle(*mut rdsys::rd_kafka_topic_t);

// SAFETY: librdkafka topic handles may be used from any thread (all access is locked inside
// librdkafka).
unsafe impl Send for TopicHandle {}
// SAFETY: see `Send`.
unsafe impl Sync for TopicHandle {}

impl<C: ProducerContext + 'static> BatchTopic<C> {
    /// `producer`, writing `topic`.
    pub(crate) fn new(producer: ThreadedProducer<C>, topic: &str) -> Result<Self, KafkaError> {
        let name = CString::new(topic).map_err(|_| {
            KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::InvalidTopic)
        })?;
        Ok(BatchTopic {
            name,
            topic: OnceLock::new(),
            producer,
        })
    }

    fn topic(&self) -> Result<*mut rdsys::rd_kafka_topic_t, KafkaError> {
        let handle = self.topic.get_or_init(|| {
            // SAFETY: the client pointer is live while `self.producer` is; a null configuration
            // takes the producer's default topic settings; the handle is destroyed in `Drop`.
            TopicHandle(unsafe {
                rdsys::rd_kafka_topic_new(
                    self.producer.client().native_ptr(),
                    self.name.as_ptr(),
                    std::ptr::null_mut(),
                )
            })
        });
        if handle.0.is_null() {
            return Err(KafkaError::MessageProduction(
                rdkafka::types::RDKafkaErrorCode::InvalidTopic,
            ));
        }
        Ok(handle.0)
    }

    /// The producer (its context counts the deliveries).
    pub(crate) fn producer(&self) -> &ThreadedProducer<C> {
        &self.producer
    }

    /// Produces `payloads` with `opaque` as each one's delivery opaque. On a refusal other than
    /// a full queue, returns the error with how many records librdkafka took (their delivery
    /// reports will come).
    pub(crate) fn produce(
        &self,
        payloads: &Payloads,
        opaque: C::DeliveryOpaque,
    ) -> Result<(), (KafkaError, usize)>
    where
        C::DeliveryOpaque: Copy,
    {
        let topic = self.topic().map_err(|e| (e, 0))?;
        let records = payloads.slices();
        let mut taken = 0;
        let mut rest = records.as_slice();
        while !rest.is_empty() {
            let mut messages: Vec<rdsys::rd_kafka_message_t> = rest
                .iter()
                .map(|&(partition, payload)| {
                    // SAFETY: an all-zero rd_kafka_message_t is a valid empty message.
                    let mut message: rdsys::rd_kafka_message_t = unsafe { std::mem::zeroed() };
                    message.partition = partition;
                    // librdkafka copies the payload (F_COPY) and never writes through it.
                    message.payload = payload.as_ptr().cast_mut().cast();
                    message.len = payload.len();
                    message._private = opaque.into_ptr();
                    message
                })
                .collect();
            let count = i32::try_from(messages.len()).unwrap_or(i32::MAX);
            // SAFETY: `messages` holds `count` initialised messages whose payloads outlive the
            // call; librdkafka copies them (F_COPY) and only writes the `err` fields.
            unsafe {
                rdsys::rd_kafka_produce_batch(
                    topic,
                    PARTITION_UNASSIGNED,
                    rdsys::RD_KAFKA_MSG_F_COPY | rdsys::RD_KAFKA_MSG_F_PARTITION,
                    messages.as_mut_ptr(),
                    count,
                );
            }
            let refused = messages
                .iter()
                .position(|m| m.err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR);
            let Some(first) = refused else {
                return Ok(());
            };
            taken += first;
            let err = messages[first].err;
            if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR__QUEUE_FULL {
                // Records after a refused one that librdkafka still took are counted too.
                taken += messages[first..]
                    .iter()
                    .filter(|m| m.err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR)
                    .count();
                return Err((KafkaError::MessageProduction(err.into()), taken));
            }
            // Every record from the first full one on was refused: offer them again.
            rest = &rest[first..];
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

impl<C: ProducerContext + 'static> Drop for BatchTopic<C> {
    fn drop(&mut self) {
        if let Some(handle) = self.topic.get()
            && !handle.0.is_null()
        {
            // SAFETY: created by rd_kafka_topic_new and not yet destroyed; `self.producer`
            // (dropped after this) keeps the librdkafka handle alive until then.
            unsafe { rdsys::rd_kafka_topic_destroy(handle.0) };
        }
    }
}
