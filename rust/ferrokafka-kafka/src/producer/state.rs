//! What the callers, the delivery worker and librdkafka's delivery callback share: the buffer
//! and retry queue under one mutex ([`State`]), and around it ([`Shared`]) the condition
//! variables, the in-flight and delivered counts (atomics, so a successful delivery never takes
//! the lock), the event channel and the open transaction's reports.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ferrokafka_core::batch::BatchBuffer;

use super::isolation::Suspect;
use super::options::{AsyncProducerOptions, DeliveryMode};
use super::pending::Pending;
use super::reports::{Acknowledgement, ProducerEvent, ProducerStats, Written};
use super::round::OpenRound;
use crate::connection_failure::ConnectionWatch;
use crate::error::KafkaIoError;
use crate::locks::lock;
use crate::oauth::TokenRefresh;

pub(super) struct State {
    pub(super) buffer: BatchBuffer<Box<Pending>>,
    /// Records waiting to be sent again, oldest first; at shutdown also the records the worker
    /// took but could not hand over.
    pub(super) retries: VecDeque<(Instant, Box<Pending>)>,
    /// Records the broker refused with their batch, perhaps for a neighbour's fault, for the
    /// worker to send again in halves (plain mode, `isolation`).
    pub(super) suspects: Vec<Suspect>,
    pub(super) deliver_requested: bool,
    pub(super) closing: bool,
    /// The worker is waiting on `work`; producers only notify then, which keeps a futex wake
    /// off the path of every record while the worker is busy.
    pub(super) worker_idle: bool,
    /// A fatal error of the librdkafka producer: nothing more can be sent.
    pub(super) fatal: Option<KafkaIoError>,
    pub(super) stats: ProducerStats,
}

pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    /// The worker waits here for work; producers and delivery reports notify it.
    pub(super) work: Condvar,
    /// Blocked producers and flushers wait here for room or for settling.
    pub(super) progress: Condvar,
    pub(super) events: Sender<ProducerEvent>,
    pub(super) options: AsyncProducerOptions,
    pub(super) mode: DeliveryMode,
    /// Set when the shutdown's grace period is over: the worker hands nothing more over.
    pub(super) stopping: AtomicBool,
    /// Held by whoever moves buffered records to librdkafka (the worker, or a caller of
    /// [`hand_off_due`](super::AsyncProducer::hand_off_due)) from taking a chunk until it is
    /// sent, so chunks reach librdkafka in buffer order. Only ever taken with `try_lock`: no
    /// thread waits for it.
    pub(super) handoff: Mutex<()>,
    /// The open transaction's reports (transactional mode only).
    pub(super) round: Mutex<OpenRound>,
    /// The worker waits here for the open transaction's reports.
    pub(super) round_reported: Condvar,
    /// Records handed to librdkafka and not settled. Atomic so that the delivery callback of a
    /// successful record never takes the state lock; it is only incremented under that lock,
    /// so "buffer empty and nothing in flight" is never seen in between.
    pub(super) in_flight: AtomicUsize,
    /// Records confirmed written, counted without the lock for the same reason.
    pub(super) delivered: AtomicU64,
    /// Batch reports' records written since the bindings last took them.
    pub(super) acknowledged: Mutex<Vec<Acknowledgement>>,
    pub(super) epoch: Instant,
    pub(super) next_ticket: AtomicU64,
    /// Why librdkafka cannot connect (refused TLS or SASL), given to records that then fail.
    pub(super) watch: ConnectionWatch,
    pub(super) tokens: TokenRefresh,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock would be a bug in this engine; keep serving regardless.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn lock_round(&self) -> MutexGuard<'_, OpenRound> {
        self.round.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes up to `max` buffered records when a delivery is due; as ruby-kafka, a trigger
    /// delivers everything buffered (in hand-off chunks), so it stays requested until the
    /// buffer is empty.
    pub(super) fn take_due(&self, state: &mut State, max: usize) -> Vec<Box<Pending>> {
        let now_ms = self.now_ms();
        if state.buffer.should_deliver(now_ms) {
            state.deliver_requested = true;
        }
        if !state.deliver_requested {
            return Vec::new();
        }
        let batch = state.buffer.drain_chunk(max);
        if state.buffer.is_empty() {
            state.deliver_requested = false;
            state.buffer.mark_delivered(now_ms);
            state.stats.deliveries += u64::from(!batch.is_empty());
        }
        batch
    }

    /// True when nothing is buffered, waiting for a retry or to be sent again in halves, or in
    /// flight.
    pub(super) fn settled(&self, state: &State) -> bool {
        state.buffer.is_empty()
            && state.retries.is_empty()
            && state.suspects.is_empty()
            && self.in_flight.load(Ordering::Acquire) == 0
    }

    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Tells a tracked record's waiter it was written: a `Delivered` event, or an entry in the
    /// acknowledgements (and an `Acknowledged` event if they were empty).
    pub(super) fn report_written(&self, written: Written) {
        match written {
            Written::Record(ticket, record) => {
                self.emit(ProducerEvent::Delivered { ticket, record });
            }
            Written::Position(acknowledgement) => {
                let mut acknowledged = lock(&self.acknowledged);
                acknowledged.push(acknowledgement);
                if acknowledged.len() == 1 {
                    self.emit(ProducerEvent::Acknowledged);
                }
            }
        }
    }

    pub(super) fn emit(&self, event: ProducerEvent) {
        // The receiver lives as long as the producer; after shutdown nobody listens any more.
        let _ = self.events.send(event);
    }

    /// Settles `count` records that left the worker's care: wakes flushers once all settled.
    pub(super) fn settle(&self, count: usize) {
        if count > 0 && self.in_flight.fetch_sub(count, Ordering::AcqRel) == count {
            // Notify under the lock: a flusher checks and waits under it, so it cannot miss
            // this wake-up.
            let _state = self.lock();
            self.progress.notify_all();
        }
    }

    /// Hands records back after their final failure.
    pub(super) fn fail(&self, records: impl IntoIterator<Item = (Box<Pending>, KafkaIoError)>) {
        let mut count = 0;
        for (pending, error) in records {
            count += 1;
            self.emit(ProducerEvent::Failed { pending, error });
        }
        self.lock().stats.failed += count as u64;
        self.settle(count);
    }

    /// Counts a failed send of `pending`: a `transient` failure is sent again after `backoff`
    /// while retries are left and the producer is not stopping (a `DeliveryError` event says
    /// so); otherwise the record is handed back with `error`.
    pub(super) fn retry_or_fail(
        &self,
        mut pending: Box<Pending>,
        error: KafkaIoError,
        transient: bool,
        backoff: Duration,
    ) {
        pending.failures += 1;
        if transient && self.may_retry(pending.failures) {
            self.schedule_retry(pending, error, backoff);
        } else {
            self.fail([(pending, error)]);
        }
    }

    /// Whether a record that failed `failures` times with a transient error gets another send.
    pub(super) fn may_retry(&self, failures: u32) -> bool {
        let max = self.options.max_retries;
        !self.stopping.load(Ordering::Acquire) && (max < 0 || i64::from(failures) <= max)
    }

    /// Keeps a record the broker refused with its batch for the worker to send again in halves.
    pub(super) fn suspect(&self, pending: Box<Pending>, error: KafkaIoError) {
        let mut state = self.lock();
        state.suspects.push((pending, error));
        // Under the lock that `settled` is read under: never seen in neither place.
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        drop(state);
        self.work.notify_one();
    }

    /// The suspects kept since the last call, counted in flight again: the worker's now.
    pub(super) fn take_suspects(&self, state: &mut State) -> Vec<Suspect> {
        let suspects = std::mem::take(&mut state.suspects);
        self.in_flight.fetch_add(suspects.len(), Ordering::AcqRel);
        suspects
    }

    /// `count` records counted in flight were put back into `State` (its lock held, so that
    /// `stats` and `settled` never count them twice or not at all): wakes flushers once none
    /// is left in flight.
    pub(super) fn put_back_from_flight(&self, _state: &State, count: usize) {
        if count > 0 && self.in_flight.fetch_sub(count, Ordering::AcqRel) == count {
            self.progress.notify_all();
        }
    }

    /// Queues a failed record to be sent again after `backoff`; `Failed` later if it never is.
    fn schedule_retry(&self, pending: Box<Pending>, error: KafkaIoError, backoff: Duration) {
        let topic = pending.record.topic.clone();
        let attempt = pending.failures;
        let mut state = self.lock();
        state.stats.retried += 1;
        state.retries.push_back((Instant::now() + backoff, pending));
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        drop(state);
        self.work.notify_one();
        self.emit(ProducerEvent::DeliveryError {
            topic,
            error,
            attempt,
        });
    }
}
