//! [`MarkerWriter`]: the END / KEEPALIVE side of a queue consumer, and the keepalive thread
//! that holds the messages being handled (kafka-mq-go's keep-alive timer, one thread per
//! consumer instead of one timer per message).
//!
//! Invariants:
//! - A message is *in flight* from the moment its START is acknowledged until `ack` or `nack`.
//!   While automatic keepalive is on, the keepalive thread writes a KEEPALIVE (deadline = now +
//!   redelivery timeout) for every in-flight message whose deadline was last set half a timeout
//!   ago, so a slow handler is never redelivered while its process lives.
//! - Markers of one message are handed to librdkafka under the in-flight lock, so a KEEPALIVE
//!   can never be queued after the same message's END or immediate-redelivery marker (the
//!   producer is idempotent: markers of one partition reach the topic in the order queued).
//! - Only in-flight messages get markers: an `ack`, `nack` or `keepalive` of a message this
//!   consumer did not hand out (or already finished) is refused whole, before anything is written.
//!
//! Threading: every method may be called from any thread; the keepalive thread ends when its
//! [`KeepaliveThread`] is dropped (the drop joins it). No Python runs here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrokafka_core::codec::marker_codec::append_marker;
use ferrokafka_core::markers::{Marker, MessageId};
use rdkafka::ClientContext;
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext};
use rustc_hash::FxHashMap;

use crate::batch_produce::{BatchTopic, Payloads};
use crate::daemon::now_ms;
use crate::error::{KafkaIoError, KafkaResult};
use crate::oauth::{TokenRefresh, answer_token_refresh};
use crate::polled_producer::PolledProducer;

/// Shortest pause of the keepalive thread, so a failing write cannot make it spin.
const MIN_KEEPALIVE_WAIT: Duration = Duration::from_millis(10);

/// The markers partition of every marker of a message from `queue_partition`.
pub fn markers_partition(queue_partition: i32, markers_partitions: i32) -> i32 {
    queue_partition.rem_euclid(markers_partitions.max(1))
}

/// The id of the queue message at `partition` / `offset`.
pub(super) fn message_id(partition: i32, offset: i64) -> MessageId {
    MessageId {
        partition: u32::try_from(partition).unwrap_or(0),
        offset: u64::try_from(offset).unwrap_or(0),
    }
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// How often `flush` looks whether every marker is acknowledged.
const FLUSH_POLL: Duration = Duration::from_millis(1);

/// Counts failed END/KEEPALIVE writes (those messages are redelivered after their deadline).
/// The producer reports only failures (`delivery.report.only.error`): a report per marker
/// would cost more than the marker itself.
pub(super) struct UpdateTracker {
    failed: AtomicU64,
    tokens: TokenRefresh,
}

impl UpdateTracker {
    pub(super) fn new(tokens: TokenRefresh) -> Self {
        UpdateTracker {
            failed: AtomicU64::new(0),
            tokens,
        }
    }
}

impl ClientContext for UpdateTracker {
    answer_token_refresh!(tokens);

    // rdkafka's default logs every error at ERROR, the broker failures librdkafka logs itself too.
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        crate::client::log_unless_end(error, reason);
    }
}

impl ProducerContext for UpdateTracker {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((err, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            log::warn!("marker not written, the message will be redelivered: {err}");
        }
    }
}

/// Writes the markers that follow a START, and remembers the messages in flight.
pub(super) struct MarkerWriter {
    producer: BatchTopic<UpdateTracker>,
    markers_topic: String,
    /// Read from the broker by the prefetch thread before the first START is written, so that
    /// creating a consumer does not wait for the broker.
    markers_partitions: OnceLock<i32>,
    redelivery_timeout: Duration,
    marker_timeout: Duration,
    /// In-flight messages and when their deadline was last set (FxHash: ids are not chosen by
    /// an attacker, and every ack hashes one).
    in_flight: Mutex<FxHashMap<MessageId, Instant>>,
    keepalives: AtomicU64,
}

impl MarkerWriter {
    pub(super) fn new(
        producer: PolledProducer<UpdateTracker>,
        markers_topic: String,
        redelivery_timeout: Duration,
        marker_timeout: Duration,
    ) -> KafkaResult<Self> {
        let producer = BatchTopic::new(producer, &markers_topic).map_err(|e| {
            KafkaIoError::from_rdkafka("create markers producer", e, marker_timeout, None)
        })?;
        Ok(MarkerWriter {
            producer,
            markers_topic,
            markers_partitions: OnceLock::new(),
            redelivery_timeout,
            marker_timeout,
            in_flight: Mutex::new(FxHashMap::default()),
            keepalives: AtomicU64::new(0),
        })
    }

    /// The markers topic.
    pub(super) fn markers_topic(&self) -> &str {
        &self.markers_topic
    }

    /// The markers topic's partition count, once known; set before the first START is written.
    pub(super) fn set_markers_partitions(&self, count: i32) {
        let _ = self.markers_partitions.set(count);
    }

    /// The markers partition of every marker of a message from `queue_partition` (called only
    /// once the partition count is known: for STARTs and the messages they made in flight).
    pub(super) fn markers_partition_of(&self, queue_partition: i32) -> i32 {
        markers_partition(
            queue_partition,
            *self.markers_partitions.get().unwrap_or(&1),
        )
    }

    /// A deadline one redelivery timeout from now, milliseconds.
    pub(super) fn next_deadline(&self) -> u64 {
        now_ms().saturating_add(millis(self.redelivery_timeout))
    }

    fn in_flight(&self) -> MutexGuard<'_, FxHashMap<MessageId, Instant>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tracker(&self) -> &UpdateTracker {
        self.producer.producer().context()
    }

    /// Writes `markers` (each with the message it is about) in one call to librdkafka.
    fn write(&self, markers: &[(MessageId, Marker)]) -> KafkaResult<()> {
        if markers.is_empty() {
            return Ok(());
        }
        let mut payloads = Payloads::with_capacity(markers.len(), 16 * markers.len());
        for (message, marker) in markers {
            let partition = i32::try_from(message.partition).unwrap_or(0);
            payloads.push(self.markers_partition_of(partition), |out| {
                append_marker(out, marker);
            });
        }
        self.producer.produce(&payloads, ()).map_err(|(e, _)| {
            KafkaIoError::from_rdkafka("write marker", e, self.marker_timeout, None)
        })
    }

    /// The messages of a batch are in flight; their deadline was set at `set_at`.
    pub(super) fn begin(&self, messages: impl IntoIterator<Item = MessageId>, set_at: Instant) {
        self.in_flight()
            .extend(messages.into_iter().map(|id| (id, set_at)));
    }

    /// Handling of `messages` is over: each leaves the in-flight set and gets `marker(id)`
    /// (none when it returns `None`), all in one write. Should librdkafka refuse it, the
    /// messages whose marker was not written come back after their deadline. Refused whole,
    /// before anything changes, when one of them is not in flight.
    pub(super) fn finish(
        &self,
        messages: &[MessageId],
        marker: impl Fn(MessageId) -> Option<Marker>,
    ) -> KafkaResult<()> {
        let mut in_flight = self.in_flight();
        if let Some(&stranger) = messages.iter().find(|id| !in_flight.contains_key(id)) {
            return Err(not_in_flight(stranger));
        }
        let mut markers = Vec::with_capacity(messages.len());
        for &id in messages {
            in_flight.remove(&id);
            if let Some(marker) = marker(id) {
                markers.push((id, marker));
            }
        }
        self.write(&markers)
    }

    /// Moves the deadline of the in-flight `message` to now + the redelivery timeout.
    pub(super) fn keepalive(&self, message: MessageId) -> KafkaResult<()> {
        let mut in_flight = self.in_flight();
        let Some(last) = in_flight.get_mut(&message) else {
            return Err(not_in_flight(message));
        };
        self.write_keepalive(message)?;
        *last = Instant::now();
        Ok(())
    }

    fn write_keepalive(&self, message_id: MessageId) -> KafkaResult<()> {
        let deadline = self.next_deadline();
        self.write(&[(
            message_id,
            Marker::KeepAlive {
                message_id,
                deadline,
            },
        )])?;
        self.keepalives.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes a KEEPALIVE for every in-flight message whose deadline was set half a timeout
    /// ago; returns how long until the next one is due.
    fn keep_alive_due(&self) -> Duration {
        let period = self.redelivery_timeout / 2;
        let mut in_flight = self.in_flight();
        let now = Instant::now();
        let mut next = period;
        for (&id, last) in in_flight.iter_mut() {
            let due = *last + period;
            if due > now {
                next = next.min(due - now);
                continue;
            }
            // A failed write is retried one period later; the deadline may pass meanwhile, then
            // the message is redelivered (at-least-once, nothing lost).
            if let Err(e) = self.write_keepalive(id) {
                log::warn!("keepalive of {id:?} not written: {e}");
            }
            *last = now;
        }
        next.max(MIN_KEEPALIVE_WAIT)
    }

    /// Keepalive markers written (by `keepalive` and automatically).
    pub(super) fn keepalives(&self) -> u64 {
        self.keepalives.load(Ordering::Relaxed)
    }

    /// END or KEEPALIVE markers that librdkafka could not deliver.
    pub(super) fn failed(&self) -> u64 {
        self.tracker().failed.load(Ordering::Relaxed)
    }

    /// END or KEEPALIVE markers librdkafka still holds (not yet acknowledged or failed).
    pub(super) fn unwritten(&self) -> i32 {
        self.producer.producer().in_flight_count()
    }

    /// Waits up to `timeout` until every marker written so far is acknowledged: until
    /// librdkafka holds none of them any more (neither unsent, unacknowledged nor with a
    /// failure report not yet counted).
    pub(super) fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        let deadline = Instant::now() + timeout;
        while self.producer.producer().in_flight_count() > 0 {
            if Instant::now() >= deadline {
                return Err(KafkaIoError::Timeout {
                    operation: "flush markers".to_owned(),
                    timeout,
                    bootstrap: None,
                });
            }
            std::thread::sleep(FLUSH_POLL);
        }
        Ok(())
    }
}

/// The refusal of a marker for `message`, which this consumer does not hold.
fn not_in_flight(message: MessageId) -> KafkaIoError {
    KafkaIoError::InvalidArgument(format!(
        "partition {} offset {} is not an open message of this QueueConsumer (already acked or \
         nacked, or not handed out by it): ack, nack and keepalive take the messages it handed out",
        message.partition, message.offset
    ))
}

/// The thread that keeps in-flight messages alive; dropping this stops and joins it.
pub(super) struct KeepaliveThread {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl KeepaliveThread {
    pub(super) fn spawn(writer: Arc<MarkerWriter>) -> KafkaResult<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("ferrokafka-keepalive".to_owned())
            .spawn(move || {
                // Any message or a dropped sender ends the loop.
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(writer.keep_alive_due())
                {}
            })
            .map_err(|e| KafkaIoError::InvalidArgument(format!("cannot start keepalive: {e}")))?;
        Ok(KeepaliveThread {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for KeepaliveThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_of_a_queue_partition_share_one_markers_partition() {
        assert_eq!(markers_partition(5, 3), 2);
        assert_eq!(markers_partition(2, 3), 2);
        assert_eq!(markers_partition(7, 0), 0);
    }
}
