//! [`DeadLetterWriter`]: writes failed batches of the concurrent consumer to a dead-letter topic,
//! asynchronously and in bulk.
//!
//! Threads: [`DeadLetterWriter::write`] runs on a worker (through the bindings) and only enqueues
//! the batch's records into librdkafka, which batches them on the wire. The producer's polling
//! thread (its [`PolledProducer`]'s) runs the delivery callback, which counts a batch down
//! and, once every record of it is acknowledged, calls the batch's `done` callback (the consumer
//! then lets its offsets be committed). A record the broker refused is queued for another send
//! after a backoff; [`DeadLetterWriter::resend_due`], called by the consumer's poller, sends it.
//! No record is dropped: a batch whose records keep failing never completes, so its offsets are
//! never committed and it is read again after a restart.
//!
//! Each record keeps its key, value and headers, followed by the `ferrokafka_error_*` and
//! `ferrokafka_original_*` headers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext};

use crate::config::{ClientRole, ClientSettings};
use crate::debug_form::debug_showing;
use crate::error::KafkaResult;
use crate::headers::DEAD_LETTER_HEADERS;
use crate::locks::lock;
use crate::oauth::{self, TokenRefresh, plain_client_context};
use crate::polled_producer::PolledProducer;
use crate::record::ReceivedRecord;

/// How long a refused record waits before it is sent again.
const RESEND_BACKOFF: Duration = Duration::from_secs(1);

/// Why a batch is dead-lettered: the handler's exception.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The exception's class name.
    pub class: String,
    /// The exception's message.
    pub message: String,
}

/// One batch being written; shared by the deliveries of its records.
struct Letter {
    records: Arc<Vec<ReceivedRecord>>,
    failure: Failure,
    remaining: AtomicUsize,
    done: Box<dyn Fn() + Send + Sync>,
}

/// The delivery opaque: which record of which batch.
struct Delivery {
    letter: Arc<Letter>,
    index: usize,
}

struct Context {
    resend: Arc<Mutex<Vec<(Instant, Delivery)>>>,
    tokens: TokenRefresh,
}

plain_client_context!(Context, tokens);

impl ProducerContext for Context {
    type DeliveryOpaque = Box<Delivery>;

    fn delivery(&self, result: &DeliveryResult<'_>, delivery: Self::DeliveryOpaque) {
        match result {
            Ok(_) => {
                if delivery.letter.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                    (delivery.letter.done)();
                }
            }
            Err((error, _)) => {
                let record = &delivery.letter.records[delivery.index];
                log::warn!(
                    "dead-letter write of {}[{}]@{} failed: {error}; sending it again",
                    record.topic,
                    record.partition,
                    record.offset
                );
                let due = Instant::now() + RESEND_BACKOFF;
                lock(&self.resend).push((due, *delivery));
            }
        }
    }
}

/// Writes failed batches to one dead-letter topic; see the module docs.
pub struct DeadLetterWriter {
    topic: String,
    producer: PolledProducer<Context>,
    resend: Arc<Mutex<Vec<(Instant, Delivery)>>>,
}

debug_showing!(DeadLetterWriter, topic);

impl DeadLetterWriter {
    /// A writer to `topic` with the producer settings derived from the consumer's.
    pub fn new(settings: &ClientSettings, topic: String) -> KafkaResult<Self> {
        let resend = Arc::new(Mutex::new(Vec::new()));
        let config = settings.for_role(ClientRole::Producer).to_client_config();
        let producer = oauth::create_client(
            &config,
            Context {
                resend: Arc::clone(&resend),
                tokens: settings.token_refresh(),
            },
            "create dead-letter producer",
        )?;
        Ok(DeadLetterWriter {
            topic,
            producer,
            resend,
        })
    }

    /// Enqueues every record of `records` for the dead-letter topic; `done` runs (on librdkafka's
    /// thread) once the broker acknowledged them all. Returns at once.
    pub fn write(
        &self,
        records: Arc<Vec<ReceivedRecord>>,
        failure: Failure,
        done: Box<dyn Fn() + Send + Sync>,
    ) {
        if records.is_empty() {
            done();
            return;
        }
        let letter = Arc::new(Letter {
            remaining: AtomicUsize::new(records.len()),
            records,
            failure,
            done,
        });
        for index in 0..letter.records.len() {
            self.send(Delivery {
                letter: Arc::clone(&letter),
                index,
            });
        }
    }

    /// Sends again the records whose write failed and whose backoff passed by `now`.
    pub fn resend_due(&self, now: Instant) {
        let due: Vec<Delivery> = {
            let mut waiting = lock(&self.resend);
            if waiting.is_empty() {
                return;
            }
            let (due, later) = waiting.drain(..).partition(|(at, _)| *at <= now);
            *waiting = later;
            due.into_iter().map(|(_, delivery)| delivery).collect()
        };
        for delivery in due {
            self.send(delivery);
        }
    }

    fn send(&self, delivery: Delivery) {
        let letter = Arc::clone(&delivery.letter);
        let record = &letter.records[delivery.index];
        let failure = &letter.failure;
        let partition = record.partition.to_string();
        let offset = record.offset.to_string();
        let values: [&[u8]; 5] = [
            failure.class.as_bytes(),
            failure.message.as_bytes(),
            record.topic.as_bytes(),
            partition.as_bytes(),
            offset.as_bytes(),
        ];
        let own = record.headers.iter().map(|(k, v)| Header {
            key: k.as_str(),
            value: v.as_deref(),
        });
        let extra = DEAD_LETTER_HEADERS
            .into_iter()
            .zip(values)
            .map(|(key, value)| Header {
                key,
                value: Some(value),
            });
        let headers = own.chain(extra).fold(
            OwnedHeaders::new_with_capacity(record.headers.len() + DEAD_LETTER_HEADERS.len()),
            OwnedHeaders::insert,
        );
        let mut out = BaseRecord::<[u8], [u8], Box<Delivery>>::with_opaque_to(
            &self.topic,
            Box::new(delivery),
        )
        .headers(headers);
        if let Some(key) = record.key.as_deref() {
            out = out.key(key);
        }
        if let Some(value) = record.value.as_deref() {
            out = out.payload(value);
        }
        if let Err((error, rejected)) = self.producer.send(out) {
            // Most often a full local queue: wait for the backoff and try again.
            log::warn!("cannot enqueue a dead-letter record: {error}; trying again");
            let due = Instant::now() + RESEND_BACKOFF.min(Duration::from_millis(100));
            lock(&self.resend).push((due, *rejected.delivery_opaque));
        }
    }
}
