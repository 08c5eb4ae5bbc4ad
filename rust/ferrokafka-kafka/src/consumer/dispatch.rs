//! The workers' side: [`ConcurrentConsumer::fetch`] hands out the next batch a worker may run
//! ([`Fetched`]), and [`ConcurrentConsumer::ack`] / [`ConcurrentConsumer::fail`] apply its
//! [`Outcome`] or the error policy's [`Verdict`] (retry, commit, dead-letter or abandon): the
//! core's [`ErrorPolicy`](ferrokafka_core::ErrorPolicy) decides, this room does what it says.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokafka_core::LoadChange;
use ferrokafka_core::error_policy::{Decision, Settlement};

use super::ConcurrentConsumer;
use super::events::{Fetched, WorkerId};
use super::overdue::SettledNote;
use super::state::{InFlight, Slot, SlotState};
use crate::dead_letter::Failure;
use crate::error::KafkaResult;
use crate::locks::wait_timeout;
use crate::record::ReceivedRecord;

/// How a worker finished a batch (a handler exception goes to [`ConcurrentConsumer::fail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The handler returned: the batch's offsets become committable.
    Handled,
    /// The worker gave up on the batch (stopping while retrying): nothing becomes committable,
    /// so its records are redelivered; the partition no longer waits for it.
    Abandoned,
}

/// What the worker does after [`ConcurrentConsumer::fail`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Call the handler again with the same batch after this wait (or abandon the batch if the
    /// consumer stops meanwhile).
    Retry(Duration),
    /// The batch is settled (committed, being dead-lettered, or abandoned): fetch the next.
    Settled,
}

impl ConcurrentConsumer {
    /// Waits up to `wait` for the next batch of `worker`'s partition: one that may run now
    /// (while fewer than the allowed batches of the partition run, and, ordered by key, of keys
    /// no running batch holds).
    pub fn fetch(&self, worker: WorkerId, wait: Duration) -> KafkaResult<Fetched> {
        let Some(slot) = self.shared.slot(worker) else {
            return Ok(Fetched::Gone);
        };
        let deadline = Instant::now() + wait;
        let concurrency = self.shared.options.concurrency();
        let mut state = slot.lock();
        loop {
            if state.closed {
                return Ok(Fetched::Gone);
            }
            if state.may_hand_out(concurrency) {
                let batch = self.take_batch(&slot, &mut state);
                if !batch.is_empty() {
                    return Ok(Fetched::Batch(batch));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Fetched::Empty);
            }
            state = wait_timeout(&slot.changed, state, left);
        }
    }

    /// Waits up to `wait` (a retry's backoff) for `worker`'s partition to stop being its own:
    /// true once it is (revoked, abandoned or shutting down), so the worker abandons its batch
    /// at once instead of sleeping through the revocation's drain time and calling the handler
    /// again on records the partition's next owner gets.
    pub fn wait_gone(&self, worker: WorkerId, wait: Duration) -> bool {
        let Some(slot) = self.shared.slot(worker) else {
            return true;
        };
        let state = slot.lock();
        let (state, _) = slot
            .changed
            .wait_timeout_while(state, wait, |state| !state.closed)
            .unwrap_or_else(|p| p.into_inner());
        state.closed
    }

    fn take_batch(&self, slot: &Slot, state: &mut SlotState) -> Arc<Vec<ReceivedRecord>> {
        let (batch, change) = state.buffer.take_batch();
        let batch = Arc::new(batch);
        if let Some(first) = batch.first() {
            let running = InFlight {
                first_offset: first.offset,
                records: Arc::clone(&batch),
                retries: 0,
                started: Instant::now(),
                overdue_said: false,
            };
            state.in_flight.insert(first.offset, running);
            state.counters.batches += 1;
        }
        if change == Some(LoadChange::Open) {
            state.counters.resumes += 1;
            self.shared.say_load_change(slot, state, false);
            self.shared.wake.notify();
        }
        batch
    }

    /// Takes the batch starting at `first` off its handler: its keys go free for other batches.
    /// The note is said once `state`'s lock is released.
    fn settle(slot: &Slot, state: &mut SlotState, first: i64) -> Option<(InFlight, SettledNote)> {
        let done = state.in_flight.remove(&first)?;
        state.buffer.release(first);
        let note = SettledNote::of(slot, &done);
        Some((done, note))
    }

    /// Marks `worker`'s batch starting at offset `first` finished (its offsets are committed
    /// once every batch before them finished) or abandoned. Returns false when the batch no
    /// longer counts (abandoned, or the partition was revoked).
    pub fn ack(&self, worker: WorkerId, first: i64, outcome: Outcome) -> bool {
        let Some(slot) = self.shared.slot(worker) else {
            return false;
        };
        let mut state = slot.lock();
        let Some((done, note)) = Self::settle(&slot, &mut state, first) else {
            return false;
        };
        match outcome {
            Outcome::Handled => {
                state.counters.handled += done.records.len() as u64;
                self.shared.finish(&slot, &mut state, done.first_offset);
            }
            Outcome::Abandoned => {
                state.counters.abandoned += 1;
                state.buffer.progress_mut().abandon(done.first_offset);
            }
        }
        drop(state);
        note.say();
        slot.changed.notify_all();
        self.shared.waiting.notify(worker);
        true
    }

    /// Applies the error policy (the core's
    /// [`ErrorPolicy::decide`](ferrokafka_core::ErrorPolicy::decide)) to `worker`'s batch
    /// starting at `first`, whose handler raised `failure`: another try after a backoff, or the
    /// batch is settled: committed, handed to the dead-letter writer (its offsets become
    /// committable once the broker acknowledged the write, and the partition moves on
    /// meanwhile), or, when it would be retried while its partition is revoked or the consumer
    /// stops, abandoned.
    pub fn fail(&self, worker: WorkerId, first: i64, failure: Failure) -> Verdict {
        let Some(slot) = self.shared.slot(worker) else {
            return Verdict::Settled;
        };
        let mut state = slot.lock();
        let closed = state.closed;
        let Some(in_flight) = state.in_flight.get_mut(&first) else {
            return Verdict::Settled;
        };
        let settlement = match self.shared.options.errors.decide(in_flight.retries, closed) {
            Decision::Retry(wait) => {
                in_flight.retries += 1;
                state.counters.retries += 1;
                return Verdict::Retry(wait);
            }
            Decision::Settle(settlement) => settlement,
        };
        let Some((done, note)) = Self::settle(&slot, &mut state, first) else {
            return Verdict::Settled;
        };
        let records = done.records.len() as u64;
        let mut letter = None;
        match (settlement, &self.dead_letters) {
            (Settlement::Commit, _) => state.counters.failed += records,
            (Settlement::Abandon, _) => state.counters.abandoned += 1,
            (Settlement::DeadLetter, Some(writer)) => {
                state.counters.dead_lettered += records;
                state.dead_letters_pending += 1;
                let shared = Arc::downgrade(&self.shared);
                let written = move || {
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    let Some(slot) = shared.slot(worker) else {
                        return;
                    };
                    let mut state = slot.lock();
                    state.dead_letters_pending = state.dead_letters_pending.saturating_sub(1);
                    shared.finish(&slot, &mut state, first);
                    drop(state);
                    slot.changed.notify_all();
                    shared.waiting.notify(worker);
                };
                letter = Some((writer, done.records, failure, Box::new(written)));
            }
            (Settlement::DeadLetter, None) => {
                unreachable!("`new` creates the writer whenever the policy names a topic")
            }
        }
        settlement.apply(state.buffer.progress_mut(), first);
        self.shared.report_caught_up(&slot, &mut state);
        drop(state);
        note.say();
        // Written with the lock released: a full local queue is logged (see
        // `Shared::warn_overdue`), and the write's acknowledgement takes the lock.
        if let Some((writer, records, failure, written)) = letter {
            writer.write(records, failure, written);
        }
        slot.changed.notify_all();
        self.shared.waiting.notify(worker);
        Verdict::Settled
    }
}
