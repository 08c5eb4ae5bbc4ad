//! [`QueueConsumer`]: the consuming side of the KMQ pattern. It reads the queue topic through
//! the START prefetch, and writes END and KEEPALIVE markers through the marker writer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrokafka_core::markers::{Marker, MessageId};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::ProducerContext;

use super::QueueConsumerOptions;
use super::marker_writer::{MarkerThread, MarkerWriter, UpdateTracker, message_id};
use super::release::release;
use super::start_prefetch::{PrefetchSetup, QueueContext, StartAcks, StartPrefetch, Taken};
use crate::client::Client;
use crate::config::ClientSettings;
use crate::daemon::now_ms;
use crate::debug_form::debug_showing;
use crate::error::{KafkaIoError, KafkaResult};
use crate::oauth;
use crate::polled_producer::PolledProducer;
use crate::record::ReceivedRecord;

/// Counters of a [`QueueConsumer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueConsumerStats {
    /// Messages marked (START written, offsets committed): handed out or prefetched.
    pub received: u64,
    /// END markers sent by `ack`.
    pub acked: u64,
    /// Messages given up by `nack` (redelivered at once or after their deadline).
    pub nacked: u64,
    /// KEEPALIVE markers sent by `keepalive` and by the automatic keepalive.
    pub keepalives: u64,
    /// END or KEEPALIVE markers that librdkafka could not deliver.
    pub failed_markers: u64,
    /// Messages whose START marker the markers topic refused for good: dead-lettered or
    /// handed back, never handed out.
    pub refused: u64,
}

/// One of the queue consumer's two markers producers (START; END and KEEPALIVE), which differ
/// only in their settings and in the context their deliveries go to.
fn markers_producer<C: ProducerContext>(
    settings: &ClientSettings,
    context: C,
) -> KafkaResult<PolledProducer<C>> {
    oauth::create_client(
        &settings.to_client_config(),
        context,
        "create markers producer",
    )
}

/// The consuming side of the KMQ pattern; see the module docs.
pub struct QueueConsumer {
    /// Declared first: dropped (stopped and joined) before the writer it shares.
    prefetch: StartPrefetch,
    writer: Arc<MarkerWriter>,
    /// Dropped (held ENDs written, stopped and joined) with the consumer.
    _marker_thread: MarkerThread,
    options: QueueConsumerOptions,
    /// For the producer that puts back, at the close, what was never handed out.
    settings: ClientSettings,
    acked: AtomicU64,
    nacked: AtomicU64,
}

debug_showing!(QueueConsumer, options);

impl QueueConsumer {
    /// Creates the clients and subscribes to the queue, waiting for no broker: the markers
    /// topic's partition count is read by the prefetch thread (see `start_prefetch/`).
    pub fn new(settings: ClientSettings, options: QueueConsumerOptions) -> KafkaResult<Self> {
        settings.bootstrap()?;
        options.validate()?;
        let mut consumer_settings = settings.clone();
        consumer_settings.set("group.id", options.group_id.as_str());
        consumer_settings.set("enable.auto.commit", "false");
        consumer_settings.set_default("auto.offset.reset", "earliest");
        let consumer: BaseConsumer<QueueContext> = oauth::create_client(
            &consumer_settings.for_plain_consumer().to_client_config(),
            QueueContext::new(settings.token_refresh()),
            "create queue consumer",
        )?;
        let metadata = Client::new(settings.clone())?;
        consumer
            .subscribe(&[options.queue_topic.as_str()])
            .map_err(KafkaIoError::subscribing(
                "the queue topic",
                &[options.queue_topic.as_str()],
            ))?;
        let mut producer_settings = settings.for_plain_producer();
        // Markers of one message must stay in order: retries may not reorder them.
        producer_settings.set_default("enable.idempotence", "true");
        let mut start_settings = producer_settings.clone();
        // START markers are written synchronously per batch: linger only adds latency.
        start_settings.set_default("linger.ms", "1");
        let starts = markers_producer(&start_settings, StartAcks::new(settings.token_refresh()))?;
        // END and KEEPALIVE markers are not waited for: a longer linger packs more of them into
        // one produce request.
        producer_settings.set_default("linger.ms", "5");
        // Only failures are reported (and counted); `flush` asks librdkafka what is left.
        producer_settings.set("delivery.report.only.error", "true");
        let updates = markers_producer(
            &producer_settings,
            UpdateTracker::new(settings.token_refresh()),
        )?;
        let writer = Arc::new(MarkerWriter::new(
            updates,
            options.markers_topic.clone(),
            options.redelivery_timeout,
            options.marker_timeout,
        )?);
        let marker_thread = MarkerThread::spawn(Arc::clone(&writer), options.auto_keepalive)?;
        let prefetch = StartPrefetch::spawn(PrefetchSetup {
            consumer,
            starts,
            writer: Arc::clone(&writer),
            metadata,
            queue_topic: options.queue_topic.clone(),
            dead_letter_topic: options.dead_letter_topic.clone(),
            max_batch_size: options.max_batch_size,
            marker_timeout: options.marker_timeout,
        })?;
        Ok(QueueConsumer {
            prefetch,
            writer,
            _marker_thread: marker_thread,
            options,
            settings,
            acked: AtomicU64::new(0),
            nacked: AtomicU64::new(0),
        })
    }

    /// Waits up to `wait` for messages and returns at most `max` of them (none when nothing
    /// came), after their START markers are acknowledged and their offsets committed; or a
    /// message handed back because its START was refused for good. The first call starts the
    /// prefetch: the next batch is marked while the caller handles this one.
    pub fn fetch(&self, max: usize, wait: Duration) -> KafkaResult<Taken> {
        self.prefetch.take(max, wait)
    }

    /// Processing of the message at `partition`/`offset` finished: its END marker is written
    /// within a millisecond, with the other single acks' (see `marker_writer`).
    pub fn ack(&self, partition: i32, offset: i64) -> KafkaResult<()> {
        self.writer.finish_later(message_id(partition, offset))?;
        self.acked.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Processing of the messages at `partition`/`offset` finished: writes their END markers
    /// (with any held back by `ack`).
    pub fn ack_many(&self, messages: &[(i32, i64)]) -> KafkaResult<()> {
        let ids: Vec<MessageId> = messages.iter().map(|&(p, o)| message_id(p, o)).collect();
        let outcome = self
            .writer
            .finish(&ids, |message_id| Some(Marker::End { message_id }));
        if outcome.is_ok() {
            self.acked.fetch_add(ids.len() as u64, Ordering::Relaxed);
        }
        outcome
    }

    /// Processing continues: moves the redelivery deadline to now + the redelivery timeout.
    pub fn keepalive(&self, partition: i32, offset: i64) -> KafkaResult<()> {
        self.writer.keepalive(message_id(partition, offset))
    }

    /// Processing failed. `now`: the deadline moves to now, so the tracker redelivers the
    /// message at once. Otherwise (kafka-mq-go's Interrupt) only its keepalive stops, so it is
    /// redelivered when its current deadline passes, at most one redelivery timeout from now.
    /// Either way it counts as a redelivery (dead-lettered after `max_redeliveries`).
    pub fn nack(&self, partition: i32, offset: i64, now: bool) -> KafkaResult<()> {
        let id = message_id(partition, offset);
        self.writer.finish(&[id], |message_id| {
            now.then(|| Marker::KeepAlive {
                message_id,
                deadline: now_ms(),
            })
        })?;
        self.nacked.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Waits up to `timeout` until every END/KEEPALIVE marker written so far is acknowledged.
    pub fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        self.writer.flush(timeout)
    }

    /// A close begins: `fetch` hands out nothing from now on (one waiting returns at once).
    pub fn stop_handing_out(&self) {
        self.prefetch.stop_handing_out();
    }

    /// Before a close: stops the prefetch, puts back on the queue the messages marked and never
    /// handed out (those it held ready and `not_handed_out`, which the caller fetched and kept;
    /// see `release.rs`), then waits for the markers; all within `timeout`, plus up to two
    /// seconds for a prefetch commit. Logs how many markers were not written (their messages
    /// are redelivered after their deadline). Dropping the consumer afterwards leaves its group.
    pub fn close(&self, not_handed_out: Vec<ReceivedRecord>, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut unhanded = self.prefetch.stop();
        unhanded.extend(not_handed_out);
        release(
            &self.settings,
            &self.writer,
            &self.options.queue_topic,
            unhanded,
            deadline,
        );
        let left = deadline.saturating_duration_since(Instant::now());
        if self.writer.flush(left).is_err() {
            log::warn!(
                "QueueConsumer closing: {} END/KEEPALIVE markers of {} not written within {:.1} s; \
                 their messages are redelivered after their deadline",
                self.writer.unwritten(),
                self.options.markers_topic,
                timeout.as_secs_f64()
            );
        }
    }

    /// The counters.
    pub fn stats(&self) -> QueueConsumerStats {
        QueueConsumerStats {
            received: self.prefetch.received(),
            acked: self.acked.load(Ordering::Relaxed),
            nacked: self.nacked.load(Ordering::Relaxed),
            keepalives: self.writer.keepalives(),
            failed_markers: self.writer.failed(),
            refused: self.prefetch.refused(),
        }
    }
}
