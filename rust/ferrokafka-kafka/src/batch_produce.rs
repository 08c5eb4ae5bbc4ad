//! Handing many records of one topic to librdkafka in one call (`rd_kafka_produce_batch`):
//! [`TopicHandle::offer`] for any producer ([`TopicHandles`] keeps a producer's handles by
//! topic; the AsyncProducer hands its chunks over this way), and [`BatchTopic`], a producer of
//! one topic's small payloads, as the queue consumer writes the START and END markers of a
//! batch. rdkafka's `send` costs, per record, a topic lookup by name, its own clock reads and a
//! lock of the topic; one batch call pays those once. A batch carries no headers and no
//! timestamps (librdkafka stamps the call's time).
//!
//! Invariants: every record is copied by librdkafka (`RD_KAFKA_MSG_F_COPY`) before the call
//! returns, so the payloads may live in a reused buffer. Records librdkafka takes are reported
//! to the producer's context like those of `send` (the delivery opaque travels in the message's
//! `_private` pointer, as rdkafka's own `send` puts it); a record refused because the queue is
//! full is offered again after 1 ms (in order: librdkafka refuses every record after the first
//! full one); any other refusal ends the call with that error and the count of records taken.
//!
//! Safety: a topic handle belongs to the producer's librdkafka handle, so its owner drops it
//! before the producer (fields drop in declaration order: the handles are declared first).

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_void};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::polled_producer::PolledProducer;
use rdkafka::bindings as rdsys;
use rdkafka::error::KafkaError;
use rdkafka::producer::{Producer, ProducerContext};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
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
    producer: PolledProducer<C>,
}

/// A librdkafka handle of one topic, released when dropped: its owner must drop it before the
/// producer whose handle made it.
pub(crate) struct TopicHandle(*mut rdsys::rd_kafka_topic_t);

// SAFETY: librdkafka topic handles may be used from any thread (all access is locked inside
// librdkafka).
unsafe impl Send for TopicHandle {}
// SAFETY: see `Send`.
unsafe impl Sync for TopicHandle {}

impl TopicHandle {
    /// A handle of `name` on `producer`'s librdkafka handle.
    fn new<C: ProducerContext + 'static>(
        producer: &PolledProducer<C>,
        name: &CStr,
    ) -> Result<Self, KafkaError> {
        // SAFETY: the client pointer is live while `producer` is; a null configuration takes
        // the producer's default topic settings; the handle is destroyed in `Drop`.
        let handle = unsafe {
            rdsys::rd_kafka_topic_new(
                producer.client().native_ptr(),
                name.as_ptr(),
                std::ptr::null_mut(),
            )
        };
        if handle.is_null() {
            return Err(KafkaError::MessageProduction(
                RDKafkaErrorCode::InvalidTopic,
            ));
        }
        Ok(TopicHandle(handle))
    }

    /// Offers `messages` (see [`message`]) to librdkafka in one call; afterwards each one's `err`
    /// tells whether librdkafka took it. librdkafka takes none after the first one it refuses
    /// for a full queue.
    ///
    /// # Safety
    /// Every key and payload pointer in `messages` must be valid for the call (librdkafka
    /// copies them), and each opaque must be what the producer's context expects as its
    /// delivery opaque: a taken message's opaque belongs to librdkafka from then on.
    pub(crate) unsafe fn offer(&self, messages: &mut [rdsys::rd_kafka_message_t]) {
        let count = i32::try_from(messages.len()).expect("a batch fits librdkafka's count");
        // SAFETY: the caller vouches for the pointers; `messages` holds `count` initialised
        // messages of which librdkafka only writes the `err` fields.
        unsafe {
            rdsys::rd_kafka_produce_batch(
                self.0,
                PARTITION_UNASSIGNED,
                rdsys::RD_KAFKA_MSG_F_COPY | rdsys::RD_KAFKA_MSG_F_PARTITION,
                messages.as_mut_ptr(),
                count,
            );
        }
    }
}

impl Drop for TopicHandle {
    fn drop(&mut self) {
        // SAFETY: created by rd_kafka_topic_new and not yet destroyed; the owner keeps the
        // librdkafka handle alive until then.
        unsafe { rdsys::rd_kafka_topic_destroy(self.0) };
    }
}

/// One message for [`TopicHandle::offer`]: `partition` (-1 for librdkafka's partitioner), key,
/// payload and delivery opaque. The slices must outlive the offer.
pub(crate) fn message(
    partition: Option<i32>,
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    opaque: *mut c_void,
) -> rdsys::rd_kafka_message_t {
    // SAFETY: an all-zero rd_kafka_message_t is a valid empty message (null key and payload).
    let mut message: rdsys::rd_kafka_message_t = unsafe { std::mem::zeroed() };
    message.partition = partition.unwrap_or(PARTITION_UNASSIGNED);
    // librdkafka copies keys and payloads (F_COPY) and never writes through them.
    if let Some(key) = key {
        message.key = key.as_ptr().cast_mut().cast();
        message.key_len = key.len();
    }
    if let Some(payload) = payload {
        message.payload = payload.as_ptr().cast_mut().cast();
        message.len = payload.len();
    }
    message._private = opaque;
    message
}

/// librdkafka handles of the topics a producer writes, made on first use; its owner drops it
/// before the producer.
#[derive(Default)]
pub(crate) struct TopicHandles {
    handles: Mutex<HashMap<String, Arc<TopicHandle>>>,
}

impl TopicHandles {
    /// The handle of `topic` on `producer`.
    pub(crate) fn get<C: ProducerContext + 'static>(
        &self,
        producer: &PolledProducer<C>,
        topic: &str,
    ) -> Result<Arc<TopicHandle>, KafkaError> {
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(handle) = handles.get(topic) {
            return Ok(Arc::clone(handle));
        }
        let name = CString::new(topic)
            .map_err(|_| KafkaError::MessageProduction(RDKafkaErrorCode::InvalidTopic))?;
        let handle = Arc::new(TopicHandle::new(producer, &name)?);
        handles.insert(topic.to_owned(), Arc::clone(&handle));
        Ok(handle)
    }
}

impl<C: ProducerContext + 'static> BatchTopic<C> {
    /// `producer`, writing `topic`.
    pub(crate) fn new(producer: PolledProducer<C>, topic: &str) -> Result<Self, KafkaError> {
        let name = CString::new(topic)
            .map_err(|_| KafkaError::MessageProduction(RDKafkaErrorCode::InvalidTopic))?;
        Ok(BatchTopic {
            name,
            topic: OnceLock::new(),
            producer,
        })
    }

    fn topic(&self) -> Result<&TopicHandle, KafkaError> {
        if let Some(handle) = self.topic.get() {
            return Ok(handle);
        }
        let handle = TopicHandle::new(&self.producer, &self.name)?;
        Ok(self.topic.get_or_init(|| handle))
    }

    /// The producer (its context counts the deliveries).
    pub(crate) fn producer(&self) -> &PolledProducer<C> {
        &self.producer
    }

    /// Produces `payloads` with `opaque` as each one's delivery opaque. Records refused because
    /// librdkafka's queue is full are offered again until `full_wait` has passed. On a refusal,
    /// returns the error with how many records librdkafka took (their delivery reports will
    /// come).
    pub(crate) fn produce(
        &self,
        payloads: &Payloads,
        opaque: C::DeliveryOpaque,
        full_wait: Duration,
    ) -> Result<(), (KafkaError, usize)>
    where
        C::DeliveryOpaque: Copy,
    {
        let topic = self.topic().map_err(|e| (e, 0))?;
        let give_up = Instant::now() + full_wait;
        let records = payloads.slices();
        let mut taken = 0;
        let mut rest = records.as_slice();
        while !rest.is_empty() {
            let mut messages: Vec<rdsys::rd_kafka_message_t> = rest
                .iter()
                .map(|&(partition, payload)| {
                    message(Some(partition), None, Some(payload), opaque.into_ptr())
                })
                .collect();
            // SAFETY: the payloads live in `payloads` through the call; the opaque is the
            // context's own delivery opaque type.
            unsafe { topic.offer(&mut messages) };
            let refused = messages
                .iter()
                .position(|m| m.err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR);
            let Some(first) = refused else {
                return Ok(());
            };
            taken += first;
            let err = messages[first].err;
            if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR__QUEUE_FULL || Instant::now() >= give_up {
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
