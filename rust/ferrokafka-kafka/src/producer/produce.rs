//! The callers' side: queueing records under one lock with the overflow policy ([`Refusal`]),
//! tickets for the records whose delivery result they want, waiting for room, asking for a
//! delivery, and flushing.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferrokafka_core::batch::{Overflow, PushOutcome};
use rdkafka::producer::Producer;

use super::AsyncProducer;
use super::options::DeliveryMode;
use super::pending::{POSITION_ONLY, Pending, Ticket};
use super::reports::ProducerEvent;
use crate::error::KafkaIoError;
use crate::polled_producer::{FIRST_FLUSH_SLICE, MAX_FLUSH_SLICE};

/// Why a record was not accepted.
#[derive(Debug)]
pub enum Refusal {
    /// The queue is full; the policy refused the record (given back).
    Overflow(Box<Overflow<Box<Pending>>>),
    /// The producer is shutting down or shut down.
    Closed(Box<Pending>),
    /// The producer hit a fatal error and cannot send any more (the record is given back).
    Fatal(Box<Pending>, KafkaIoError),
}

impl AsyncProducer {
    /// A fresh ticket for a record whose delivery result the caller wants.
    pub fn ticket(&self) -> Ticket {
        self.tickets(1)
    }

    /// The first of `count` consecutive tickets for the records of one batch report, each with
    /// [`POSITION_ONLY`] set.
    pub fn batch_tickets(&self, count: usize) -> Ticket {
        self.tickets(count) | POSITION_ONLY
    }

    /// The first of `count` consecutive ticket numbers, all below [`POSITION_ONLY`].
    fn tickets(&self, count: usize) -> Ticket {
        let count = count.max(1) as Ticket;
        let first = self.shared.next_ticket.fetch_add(count, Ordering::Relaxed);
        // Folded into the numbers below POSITION_ONLY, never 0, never running past it.
        (first - 1) % (POSITION_ONLY - count) + 1
    }

    /// Queues records from the front of `items` under one lock, without waiting, until all
    /// are queued or one is refused. Returns how many were queued, the queue size right after
    /// (for the `enqueue_message` event: the worker may deliver at once), and the refusal, whose
    /// record is handed back (a `block` caller puts it back in front and waits for room; a
    /// caller that gives up reports it with [`AsyncProducer::count_overflow`]).
    /// `drop_oldest` reports what it dropped in a `Dropped` event. With `hand_off_here` the
    /// caller calls [`AsyncProducer::hand_off_due`] next, so a due delivery does not wake the
    /// worker.
    pub fn try_produce(
        &self,
        items: &mut VecDeque<Box<Pending>>,
        hand_off_here: bool,
    ) -> (usize, usize, Option<Refusal>) {
        let shared = &self.shared;
        let mut state = shared.lock();
        if let Some(error) = &state.fatal {
            let error = error.clone();
            let refusal = items.pop_front().map(|p| Refusal::Fatal(p, error));
            return (0, state.buffer.len(), refusal);
        }
        if state.closing {
            let refusal = items.pop_front().map(Refusal::Closed);
            return (0, state.buffer.len(), refusal);
        }
        let mut accepted = 0;
        let mut dropped = Vec::new();
        let mut refusal = None;
        while let Some(pending) = items.pop_front() {
            let size = pending.record.size() + pending.partition_key.as_ref().map_or(0, Vec::len);
            match state.buffer.push(pending, size) {
                Ok(PushOutcome::Queued) => accepted += 1,
                Ok(PushOutcome::QueuedAfterDropping(oldest)) => {
                    accepted += 1;
                    dropped.extend(oldest);
                }
                Err(overflow) => {
                    refusal = Some(Refusal::Overflow(Box::new(overflow)));
                    break;
                }
            }
        }
        state.stats.enqueued += accepted as u64;
        state.stats.dropped += dropped.len() as u64;
        // A caller that will call `hand_off_due` itself does not wake the worker for it.
        let wake = state.worker_idle
            && !(hand_off_here && shared.mode != DeliveryMode::Transactional)
            && state.buffer.should_deliver(shared.now_ms());
        let queue_size = state.buffer.len();
        drop(state);
        if !dropped.is_empty() {
            shared.emit(ProducerEvent::Dropped { pending: dropped });
        }
        if wake {
            shared.work.notify_one();
        }
        (accepted, queue_size, refusal)
    }

    /// Counts a record finally refused for lack of room (the `overflowed` statistic).
    pub fn count_overflow(&self) {
        self.shared.lock().stats.overflowed += 1;
    }

    /// Waits up to `wait` for the queue to have room (or to change); used by the `block` policy
    /// between attempts. A full queue is delivered at once: otherwise a producer without a
    /// delivery trigger would wait for room that nothing frees.
    pub fn wait_for_room(&self, wait: Duration) {
        let mut state = self.shared.lock();
        if state.buffer.len() >= state.buffer.limits().max_count || state.closing {
            if !state.closing && !state.deliver_requested {
                state.deliver_requested = true;
                self.shared.work.notify_one();
            }
            let _ = self.shared.progress.wait_timeout(state, wait);
        }
    }

    /// Asks the worker to deliver everything buffered now; returns at once.
    pub fn deliver_messages(&self) {
        self.shared.lock().deliver_requested = true;
        self.shared.work.notify_one();
    }

    /// Sends a [`ProducerEvent::Wake`], so that a listener waiting for events returns now: a
    /// flusher that must see every event published takes the listener's turn at once instead
    /// of after the rest of its wait.
    pub fn wake_listener(&self) {
        self.shared.emit(ProducerEvent::Wake);
    }

    /// The fatal error that stopped the producer, if one did.
    pub fn fatal_error(&self) -> Option<KafkaIoError> {
        self.shared.lock().fatal.clone()
    }

    /// Why librdkafka cannot connect (a refused TLS handshake or SASL authentication), as the
    /// error of `operation`, while that lasts: waiting for delivery will not help.
    pub fn connection_failure(&self, operation: &str) -> Option<KafkaIoError> {
        self.shared
            .watch
            .failure()
            .map(|failure| failure.error(operation))
    }

    /// The error of a `flush` that did not settle every record within `timeout`: how many were
    /// left, and why no broker could be reached, if librdkafka said so.
    pub fn flush_timed_out(&self, timeout: Duration) -> KafkaIoError {
        let stats = self.stats();
        let operation = format!(
            "flush ({} record(s) buffered, {} in flight)",
            stats.queue_size, stats.in_flight
        );
        let timed_out =
            KafkaIoError::timed_out(&operation, timeout, self.settings.bootstrap().ok());
        self.shared.watch.explain_timeout(timed_out)
    }

    /// Delivers everything buffered and waits up to `wait` for every record to settle. Returns
    /// true when settled. Callers wait in slices to check for signals.
    ///
    /// While librdkafka holds records, the wait is librdkafka's own flush, during which it
    /// sends at once instead of after `linger.ms` (as confluent-kafka's `flush` does): one
    /// record and a flush take a round trip, not the linger. It is called in slices from
    /// [`FIRST_FLUSH_SLICE`] doubling to [`MAX_FLUSH_SLICE`], each waking librdkafka's broker
    /// threads again (a thread can miss the first wake-up). Only while librdkafka
    /// holds records, and never again straight after a call that returned early: with nothing
    /// in librdkafka (records still with the worker, in a metadata request for a partition
    /// key, say) `rd_kafka_flush` returns at once, and calling it again and again would spin,
    /// waking the broker threads each time. The flusher waits for progress instead, looking
    /// again every [`FLUSH_RECHECK`] for records that reached librdkafka meanwhile. In
    /// transactional mode the worker's commit flushes.
    pub fn flush_step(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut slice = FIRST_FLUSH_SLICE;
        let mut state = self.shared.lock();
        loop {
            if self.shared.settled(&state) {
                return true;
            }
            if !state.buffer.is_empty() {
                state.deliver_requested = true;
                self.shared.work.notify_one();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if self.shared.mode != DeliveryMode::Transactional {
                // Not under the state lock: librdkafka's flush waits, and a fatal error's new
                // instance is installed by a thread that takes it.
                drop(state);
                let producer = self.producer();
                let mut timed_out = false;
                if producer.in_flight_count() > 0 {
                    let this = left.min(slice);
                    let started = Instant::now();
                    producer.send_lingering_for(this);
                    timed_out = started.elapsed() >= this;
                    // A long flush is many deliveries, not a missed wake-up: fewer calls.
                    slice = (slice * 2).min(MAX_FLUSH_SLICE);
                }
                drop(producer);
                state = self.shared.lock();
                if self.shared.settled(&state) {
                    return true;
                }
                // librdkafka still holds records: flush again, which wakes its broker threads
                // again (one that went back to its linger sleep before seeing the first flush
                // would otherwise keep the records for `linger.ms`).
                if timed_out {
                    continue;
                }
            }
            // Any progress ends the wait: records settled, or records reaching librdkafka
            // (`delivered_chunk`), to be flushed at once. A wake-up missed between the checks
            // above and this wait costs at most FLUSH_RECHECK.
            state = self
                .shared
                .progress
                .wait_timeout(state, left.min(FLUSH_RECHECK))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// How often a flusher looks for records that reached librdkafka while it waited for progress.
const FLUSH_RECHECK: Duration = Duration::from_millis(1);
