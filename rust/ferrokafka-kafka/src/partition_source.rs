//! [`PartitionSource`]: one assigned partition's own librdkafka queue, drained in runs.
//!
//! rust-rdkafka's `PartitionQueue::poll` returns one message per call, and each call reads the
//! clock, locks the queue, and allocates a shared event wrapper; at a million records a second
//! that was a fifth of the poller thread (perf). librdkafka's `rd_kafka_consume_batch_queue`
//! takes a whole run under one lock. The `PartitionQueue` stays, because it splits the
//! partition's queue from the consumer's and carries the non-empty callback; the source keeps a
//! second handle to the same queue (`rd_kafka_queue_get_partition` hands out counted references
//! to one queue) and drains that one.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use rdkafka::bindings as rdsys;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedHeaders, Message, Timestamp};

/// A partition's queue, split from the consumer's so that it can be polled on its own.
pub struct PartitionSource<C: ConsumerContext + 'static> {
    /// Owns the split and the non-empty callback.
    _split: PartitionQueue<C>,
    /// The handle the runs are drained through; destroyed in `Drop`.
    queue: NonNull<rdsys::rd_kafka_queue_t>,
    /// Keeps librdkafka's client alive as long as the handle.
    _consumer: Arc<BaseConsumer<C>>,
}

impl<C: ConsumerContext + 'static> std::fmt::Debug for PartitionSource<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PartitionSource")
    }
}

// SAFETY: librdkafka's queues are thread-safe; the handle is only an owned reference to one.
unsafe impl<C: ConsumerContext + 'static> Send for PartitionSource<C> {}
// SAFETY: as above: every use of the handle is a librdkafka call that locks the queue.
unsafe impl<C: ConsumerContext + 'static> Sync for PartitionSource<C> {}

impl<C: ConsumerContext + 'static> PartitionSource<C> {
    /// Splits `topic`/`partition`'s queue from `consumer`'s; `ready` runs (on a librdkafka
    /// thread) whenever the queue becomes non-empty. `None` when the partition is unknown.
    pub fn split(
        consumer: &Arc<BaseConsumer<C>>,
        topic: &str,
        partition: i32,
        ready: impl Fn() + Send + Sync + 'static,
    ) -> Option<Self> {
        let name = CString::new(topic).ok()?;
        let mut split = consumer.split_partition_queue(topic, partition)?;
        split.set_nonempty_callback(ready);
        // SAFETY: the client pointer is valid while `consumer` lives; the call returns a new
        // reference (or null), which `Drop` releases.
        let queue = unsafe {
            rdsys::rd_kafka_queue_get_partition(
                consumer.client().native_ptr(),
                name.as_ptr(),
                partition,
            )
        };
        Some(PartitionSource {
            _split: split,
            queue: NonNull::new(queue)?,
            _consumer: Arc::clone(consumer),
        })
    }

    /// Hands each message ready in the queue (up to `max`; it never waits) to `take`, in offset
    /// order, a record or an error (see [`RawMessage::result`]); returns how many it handed over.
    pub fn drain(&self, max: usize, mut take: impl FnMut(&RawMessage)) -> usize {
        let mut run: Vec<*mut rdsys::rd_kafka_message_t> = vec![std::ptr::null_mut(); max];
        // SAFETY: `run` has room for `max` pointers; librdkafka fills the first `taken`, each an
        // owned message, destroyed exactly once by `Run`'s drop.
        let taken = unsafe {
            rdsys::rd_kafka_consume_batch_queue(self.queue.as_ptr(), 0, run.as_mut_ptr(), max)
        };
        let run = Run(&run[..usize::try_from(taken).unwrap_or(0)]);
        for &pointer in run.0 {
            // SAFETY: a message librdkafka just returned, valid until `run` is dropped.
            take(unsafe { &*(pointer as *const RawMessage) });
        }
        run.0.len()
    }
}

/// The messages one `drain` took, destroyed together once all were read (or `take` panicked).
/// Each destroy frees what librdkafka's broker thread allocated for the message, under the lock
/// of that thread's malloc arena, which the broker thread takes for every message it parses. A
/// destroy between two copies met the broker thread at that lock about once a message (futex
/// sleeps and wake-ups took a tenth of the process's CPU); destroying the run at once meets it
/// far less: 1.07x-1.20x a consumer's records/s (benches/RESULTS.md).
struct Run<'a>(&'a [*mut rdsys::rd_kafka_message_t]);

impl Drop for Run<'_> {
    fn drop(&mut self) {
        for &pointer in self.0 {
            // SAFETY: returned by rd_kafka_consume_batch_queue and not used after this.
            unsafe { rdsys::rd_kafka_message_destroy(pointer) };
        }
    }
}

impl<C: ConsumerContext + 'static> Drop for PartitionSource<C> {
    fn drop(&mut self) {
        // SAFETY: the reference taken in `split`, released once; the split queue is released
        // after it by the field's own drop.
        unsafe { rdsys::rd_kafka_queue_destroy(self.queue.as_ptr()) }
    }
}

/// A message taken from a partition's queue, read in place (a view of `rd_kafka_message_t`).
#[repr(transparent)]
pub struct RawMessage(rdsys::rd_kafka_message_t);

impl RawMessage {
    /// The record, or the consumer error this message carries instead of one.
    pub fn result(&self) -> Result<&Self, KafkaError> {
        self.error().map_or(Ok(self), Err)
    }

    /// librdkafka's description of the error this message carries (what its inline
    /// `rd_kafka_message_errstr` returns): the payload holds it when librdkafka wrote one,
    /// e.g. "Decompression (codec 0x4) of message at 1 of 3871 bytes failed: ...".
    pub fn error_detail(&self) -> String {
        match self.payload() {
            Some(text) => String::from_utf8_lossy(text).into_owned(),
            None => self.error().map(|e| e.to_string()).unwrap_or_default(),
        }
    }

    fn error(&self) -> Option<KafkaError> {
        match self.0.err {
            rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => None,
            rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__PARTITION_EOF => {
                Some(KafkaError::PartitionEOF(self.0.partition))
            }
            code => Some(KafkaError::MessageConsumption(RDKafkaErrorCode::from(code))),
        }
    }

    fn bytes(pointer: *mut std::ffi::c_void, len: usize) -> Option<&'static [u8]> {
        // SAFETY: librdkafka's (pointer, length) pair for a key or payload; the caller bounds
        // the lifetime to the message's.
        (!pointer.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(pointer as *const u8, len) })
    }
}

impl Message for RawMessage {
    type Headers = BorrowedHeaders;

    fn key(&self) -> Option<&[u8]> {
        Self::bytes(self.0.key, self.0.key_len)
    }

    fn payload(&self) -> Option<&[u8]> {
        Self::bytes(self.0.payload, self.0.len)
    }

    unsafe fn payload_mut(&mut self) -> Option<&mut [u8]> {
        let pointer = self.0.payload as *mut u8;
        // SAFETY: the caller guarantees exclusive access (the trait's contract).
        (!pointer.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(pointer, self.0.len) })
    }

    fn topic(&self) -> &str {
        // SAFETY: every fetched message has its topic handle; its name lives as long as it.
        let name = unsafe { std::ffi::CStr::from_ptr(rdsys::rd_kafka_topic_name(self.0.rkt)) };
        name.to_str().unwrap_or_default()
    }

    fn partition(&self) -> i32 {
        self.0.partition
    }

    fn offset(&self) -> i64 {
        self.0.offset
    }

    fn timestamp(&self) -> Timestamp {
        let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: a valid message and an out-parameter of the right type.
        let ms = unsafe { rdsys::rd_kafka_message_timestamp(&self.0, &mut kind) };
        if ms == -1 {
            return Timestamp::NotAvailable;
        }
        match kind {
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_CREATE_TIME => {
                Timestamp::CreateTime(ms)
            }
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => {
                Timestamp::LogAppendTime(ms)
            }
            _ => Timestamp::NotAvailable,
        }
    }

    fn headers(&self) -> Option<&BorrowedHeaders> {
        let mut headers = std::ptr::null_mut();
        // SAFETY: a valid message; librdkafka keeps the parsed headers with it.
        let found = unsafe { rdsys::rd_kafka_message_headers(&self.0, &mut headers) };
        if found != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || headers.is_null() {
            return None;
        }
        // SAFETY: `BorrowedHeaders` is rust-rdkafka's zero-sized stand-in for a
        // `rd_kafka_headers_t`, read through that pointer (how rust-rdkafka builds it too).
        Some(unsafe { &*(headers as *const BorrowedHeaders) })
    }
}
