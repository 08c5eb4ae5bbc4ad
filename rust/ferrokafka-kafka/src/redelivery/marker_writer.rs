//! [`MarkerWriter`]: the END / KEEPALIVE side of a queue consumer, and the marker thread that
//! holds the messages being handled (kafka-mq-go's keep-alive timer, one thread per consumer
//! instead of one timer per message) and writes the END markers of single acks.
//!
//! Invariants:
//! - A message is *in flight* from the moment its START is acknowledged until `ack` or `nack`.
//!   While automatic keepalive is on, the marker thread writes a KEEPALIVE (deadline = now +
//!   redelivery timeout) for every in-flight message whose deadline was last set half a timeout
//!   ago, so a slow handler is never redelivered while its process lives.
//! - Markers of one message are handed to librdkafka under the in-flight lock, so a KEEPALIVE
//!   can never be queued after the same message's END or immediate-redelivery marker (the
//!   producer is idempotent: markers of one partition reach the topic in the order queued).
//! - Only in-flight messages get markers: an `ack`, `nack` or `keepalive` of a message this
//!   consumer did not hand out (or already finished) is refused whole, before anything is written.
//! - The END marker of a single `ack` is held back and written with others in one call to
//!   librdkafka (the README's `for job in queue: ... queue.ack(job)` loop otherwise pays a
//!   produce call per message): at the latest [`END_LINGER`] after the ack (the marker thread's
//!   timer), at once when [`END_BATCH`] are held, and with the next `ack_many` or `nack`, `flush`
//!   or close. A held END is counted by `unwritten` and waited for by `flush`.
//! - No write blocks for long: one refused because librdkafka's queue stays full fails after
//!   [`QUEUE_FULL_WAIT`], its markers counted as failed (their messages are redelivered).
//!   Writes made for many callers (held ENDs, keepalive rounds) log a failure and count it;
//!   only `ack_many`, `nack`, `keepalive` and `flush` raise it, to the caller whose markers
//!   they are.
//!
//! Threading: every method may be called from any thread; the marker thread ends when its
//! [`MarkerThread`] is dropped (the drop writes the held ENDs and joins it). No Python runs here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrokafka_core::codec::marker_codec::append_marker;
use ferrokafka_core::markers::{Marker, MessageId};
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext};
use rustc_hash::FxHashMap;

use crate::batch_produce::{BatchTopic, Payloads};
use crate::daemon::now_ms;
use crate::error::{KafkaIoError, KafkaResult};
use crate::locks::{lock, wait_timeout};
use crate::oauth::{TokenRefresh, plain_client_context};
use crate::polled_producer::PolledProducer;

/// Shortest pause of the marker thread between keepalive rounds, so a failing write cannot
/// make it spin.
const MIN_KEEPALIVE_WAIT: Duration = Duration::from_millis(10);
/// Longest the END marker of a single ack is held back to be written with others. The markers
/// producer lingers 5 ms before sending anyway, so this adds no latency that matters.
const END_LINGER: Duration = Duration::from_millis(1);
/// Most END markers held back: the ack that reaches this many writes them at once.
const END_BATCH: usize = 500;
/// Longest a marker write waits for room in librdkafka's queue, full when the broker has been
/// unreachable for long (markers expire only after `message.timeout.ms`). Writes happen under
/// the in-flight lock, and `ack`/`ack_many`/`nack`/`keepalive` hold the GIL: an unbounded wait
/// hung every thread of the process until the broker came back or the queued markers expired
/// (`message.timeout.ms`, 5 minutes by default). Refused markers are counted as failed; their
/// messages come back after their deadline.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(100);
/// How long the marker thread sleeps when it has nothing to keep alive and no END held: it is
/// woken by the first held END and by its stop.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

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

plain_client_context!(UpdateTracker, tokens);

impl ProducerContext for UpdateTracker {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((err, _)) = result {
            // With the broker away every queued marker fails (thousands at a close): the first
            // and every thousandth are said; `stats()["failed_markers"]` has the count.
            let failed = self.failed.fetch_add(1, Ordering::Relaxed) + 1;
            if failed == 1 || failed % 1000 == 0 {
                log::warn!(
                    "{failed} markers not written so far, their messages will be redelivered \
                     after their deadline; the latest: {err}"
                );
            } else {
                log::debug!("marker not written, the message will be redelivered: {err}");
            }
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
    /// The in-flight lock.
    open: Mutex<Open>,
    /// Wakes the marker thread: the first END held back, or its stop.
    marker_thread_wake: Condvar,
    keepalives: AtomicU64,
}

/// What the in-flight lock guards.
#[derive(Default)]
struct Open {
    /// In-flight messages and when their deadline was last set (FxHash: ids are not chosen by
    /// an attacker, and every ack hashes one).
    in_flight: FxHashMap<MessageId, Instant>,
    /// Acked messages whose END marker is held back, in ack order.
    held_ends: Vec<MessageId>,
    /// When the first of `held_ends` was held back.
    held_since: Option<Instant>,
    /// The marker thread is to write the held ENDs and end.
    stopping: bool,
}

impl Open {
    /// The held END markers, taken out, followed by `then`.
    fn take_held_ends(&mut self, then: usize) -> Vec<(MessageId, Marker)> {
        self.held_since = None;
        let mut markers = Vec::with_capacity(self.held_ends.len() + then);
        markers.extend(
            self.held_ends
                .drain(..)
                .map(|message_id| (message_id, Marker::End { message_id })),
        );
        markers
    }
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
            open: Mutex::new(Open::default()),
            marker_thread_wake: Condvar::new(),
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

    fn open(&self) -> MutexGuard<'_, Open> {
        lock(&self.open)
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
        self.producer
            .produce(&payloads, (), QUEUE_FULL_WAIT)
            .map_err(|(e, taken)| {
                // Those librdkafka took report their own outcome; the rest fail here.
                let refused = markers.len().saturating_sub(taken);
                self.tracker()
                    .failed
                    .fetch_add(refused as u64, Ordering::Relaxed);
                KafkaIoError::from_rdkafka("write marker", e, self.marker_timeout, None)
            })
    }

    /// The messages of a batch are in flight; their deadline was set at `set_at`.
    pub(super) fn begin(&self, messages: impl IntoIterator<Item = MessageId>, set_at: Instant) {
        self.open()
            .in_flight
            .extend(messages.into_iter().map(|id| (id, set_at)));
    }

    /// Whether `message` is in flight (handed out or ready, and neither acked nor nacked).
    pub(super) fn is_in_flight(&self, message: MessageId) -> bool {
        self.open().in_flight.contains_key(&message)
    }

    /// Handling of `messages` is over: each leaves the in-flight set and gets `marker(id)`
    /// (none when it returns `None`), all in one write with the held ENDs. Should librdkafka
    /// refuse it, the messages whose marker was not written come back after their deadline.
    /// Refused whole, before anything changes, when one of them is not in flight.
    pub(super) fn finish(
        &self,
        messages: &[MessageId],
        marker: impl Fn(MessageId) -> Option<Marker>,
    ) -> KafkaResult<()> {
        let mut open = self.open();
        if let Some(&stranger) = messages.iter().find(|id| !open.in_flight.contains_key(id)) {
            return Err(not_in_flight(stranger));
        }
        let mut markers = open.take_held_ends(messages.len());
        for &id in messages {
            open.in_flight.remove(&id);
            if let Some(marker) = marker(id) {
                markers.push((id, marker));
            }
        }
        self.write(&markers)
    }

    /// Handling of `message` is over: it leaves the in-flight set and its END marker is held
    /// back to be written with others (see the module docs). Refused, before anything changes,
    /// when it is not in flight.
    pub(super) fn finish_later(&self, message: MessageId) -> KafkaResult<()> {
        let mut open = self.open();
        if open.in_flight.remove(&message).is_none() {
            return Err(not_in_flight(message));
        }
        open.held_ends.push(message);
        if open.held_ends.len() >= END_BATCH {
            // Written for many acks, not this one's alone: a refusal is logged and counted, as
            // the marker thread's is, not raised to whichever ack came 500th.
            let unwritten = self.write_held_ends(&mut open);
            drop(open);
            NotWritten::say_all(unwritten);
            return Ok(());
        }
        if open.held_since.is_none() {
            open.held_since = Some(Instant::now());
            self.marker_thread_wake.notify_one();
        }
        Ok(())
    }

    /// Writes the held END markers in one call; should librdkafka refuse it, their messages
    /// come back after their deadline.
    fn write_held(&self, open: &mut Open) -> KafkaResult<()> {
        self.write(&open.take_held_ends(0))
    }

    /// [`Self::write_held`] where nobody waits for the outcome (the marker thread, an ack that
    /// fills the batch): a refusal is to be logged (`write` counted it as failed markers).
    fn write_held_ends(&self, open: &mut Open) -> Option<NotWritten> {
        let held = open.held_ends.len();
        self.write_held(open).err().map(|e| {
            NotWritten(format!(
                "{held} END markers not written, their messages will be redelivered: {e}"
            ))
        })
    }

    /// Moves the deadline of the in-flight `message` to now + the redelivery timeout.
    pub(super) fn keepalive(&self, message: MessageId) -> KafkaResult<()> {
        let mut open = self.open();
        let Some(last) = open.in_flight.get_mut(&message) else {
            return Err(not_in_flight(message));
        };
        self.write_keepalives(&[message])?;
        *last = Instant::now();
        Ok(())
    }

    /// Writes a KEEPALIVE for each of `messages` (one deadline for all, in one write) and
    /// counts them once written.
    fn write_keepalives(&self, messages: &[MessageId]) -> KafkaResult<()> {
        let deadline = self.next_deadline();
        let markers: Vec<(MessageId, Marker)> = messages
            .iter()
            .map(|&message_id| {
                let marker = Marker::KeepAlive {
                    message_id,
                    deadline,
                };
                (message_id, marker)
            })
            .collect();
        self.write(&markers)?;
        self.keepalives
            .fetch_add(markers.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Writes a KEEPALIVE for every in-flight message whose deadline was set half a timeout
    /// ago; returns how long until the next one is due, and the refusal to log.
    ///
    /// All in one write: a round over thousands of messages is one call to librdkafka, and
    /// one refusal (at most [`QUEUE_FULL_WAIT`]) when its queue is full.
    fn keep_alive_due(&self, open: &mut Open, now: Instant) -> (Duration, Option<NotWritten>) {
        let period = self.redelivery_timeout / 2;
        let mut next = period;
        let mut due_now = Vec::new();
        for (&message_id, last) in open.in_flight.iter_mut() {
            let due = *last + period;
            if due > now {
                next = next.min(due - now);
                continue;
            }
            due_now.push(message_id);
            *last = now;
        }
        // A failed write is retried one period later; the deadline may pass meanwhile, then the
        // messages are redelivered (at-least-once, nothing lost).
        let unwritten = self.write_keepalives(&due_now).err().map(|e| {
            NotWritten(format!(
                "{} keepalive markers not written: {e}",
                due_now.len()
            ))
        });
        (next.max(MIN_KEEPALIVE_WAIT), unwritten)
    }

    /// Keepalive markers written (by `keepalive` and automatically).
    pub(super) fn keepalives(&self) -> u64 {
        self.keepalives.load(Ordering::Relaxed)
    }

    /// END or KEEPALIVE markers that librdkafka could not deliver.
    pub(super) fn failed(&self) -> u64 {
        self.tracker().failed.load(Ordering::Relaxed)
    }

    /// END or KEEPALIVE markers not yet acknowledged or failed: held back, or in librdkafka.
    pub(super) fn unwritten(&self) -> usize {
        let held = self.open().held_ends.len();
        held + usize::try_from(self.producer.producer().in_flight_count()).unwrap_or(0)
    }

    /// Writes the held END markers, then waits up to `timeout` until every marker written so
    /// far is acknowledged: until librdkafka holds none of them any more (neither unsent,
    /// unacknowledged nor with a failure report not yet counted). The wait is librdkafka's own
    /// flush, during which it sends at once instead of after `linger.ms`: a loop's last acks
    /// take a round trip, not the linger.
    pub(super) fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        let deadline = Instant::now() + timeout;
        self.write_held(&mut self.open())?;
        if self.producer.producer().flush_until(deadline) {
            Ok(())
        } else {
            Err(KafkaIoError::timed_out("flush markers", timeout, None))
        }
    }
}

/// Markers that a write made for many callers could not hand to librdkafka (counted as failed
/// already), to be logged once the in-flight lock is released: the record goes to Python's
/// `logging`, which needs the GIL, and `ack`/`nack`/`keepalive` take that lock holding the GIL.
#[must_use = "said with `say_all` once the in-flight lock is released"]
struct NotWritten(String);

impl NotWritten {
    /// Logs each of `unwritten` at WARNING; called with the in-flight lock released.
    fn say_all(unwritten: impl IntoIterator<Item = Self>) {
        for NotWritten(text) in unwritten {
            log::warn!("{text}");
        }
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

/// The thread that keeps in-flight messages alive (with automatic keepalive) and writes the
/// held END markers; dropping this writes the ENDs still held, stops and joins it.
pub(super) struct MarkerThread {
    writer: Arc<MarkerWriter>,
    thread: Option<JoinHandle<()>>,
}

impl MarkerThread {
    pub(super) fn spawn(writer: Arc<MarkerWriter>, auto_keepalive: bool) -> KafkaResult<Self> {
        let thread = {
            let writer = Arc::clone(&writer);
            std::thread::Builder::new()
                .name("ferrokafka-markers".to_owned())
                .spawn(move || run_marker_thread(&writer, auto_keepalive))
                .map_err(|e| {
                    KafkaIoError::InvalidArgument(format!("cannot start the marker thread: {e}"))
                })?
        };
        Ok(MarkerThread {
            writer,
            thread: Some(thread),
        })
    }
}

/// The marker thread: keepalive rounds when due, the held ENDs once [`END_LINGER`] old, until
/// asked to stop (then the held ENDs are written at once).
fn run_marker_thread(writer: &MarkerWriter, auto_keepalive: bool) {
    let mut open = writer.open();
    // A keepalive round walks every message in flight: only when one is due, not at each wake.
    let mut next_keepalive = auto_keepalive.then(Instant::now);
    while !open.stopping {
        let now = Instant::now();
        let mut wait = IDLE_WAIT;
        let mut unwritten = Vec::new();
        if let Some(due) = next_keepalive.as_mut() {
            if *due <= now {
                let (next, refused) = writer.keep_alive_due(&mut open, now);
                *due = now + next;
                unwritten.extend(refused);
            }
            wait = due.saturating_duration_since(now);
        }
        if let Some(since) = open.held_since {
            let due = since + END_LINGER;
            if due <= now {
                unwritten.extend(writer.write_held_ends(&mut open));
            } else {
                wait = wait.min(due - now);
            }
        }
        if !unwritten.is_empty() {
            drop(open);
            NotWritten::say_all(unwritten);
            open = writer.open();
            continue; // what is due was reckoned under the lock released meanwhile
        }
        open = wait_timeout(&writer.marker_thread_wake, open, wait);
    }
    let unwritten = writer.write_held_ends(&mut open);
    drop(open);
    NotWritten::say_all(unwritten);
}

impl Drop for MarkerThread {
    fn drop(&mut self) {
        self.writer.open().stopping = true;
        self.writer.marker_thread_wake.notify_all();
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
