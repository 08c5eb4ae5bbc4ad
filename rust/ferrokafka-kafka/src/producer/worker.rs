//! The delivery worker thread: it waits for a reason to deliver (threshold, interval, explicit
//! request, shutdown, a due retry, records refused with their batch), takes the next chunk with
//! the hand-off lock, and sends it (in a transaction of its own in transactional mode), or
//! sends the refused batch's records again in halves (`isolation`).

use std::sync::MutexGuard;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::isolation::Suspect;
use super::options::DeliveryMode;
use super::pending::Pending;
use super::reports::ProducerEvent;
use super::{AsyncProducer, HANDOFF_CHUNK, WORKER_TICK};
use crate::locks::wait_timeout;

/// What the worker does next.
enum Work {
    /// Send a chunk: due retries, then the buffer.
    Chunk(Vec<Box<Pending>>),
    /// Send the records of refused batches again in halves.
    Isolate(Vec<Suspect>),
}

impl AsyncProducer {
    pub(super) fn run_worker(&self) {
        loop {
            let Some((handoff, work)) = self.next_work() else {
                return;
            };
            match work {
                Work::Chunk(batch) => {
                    let count = batch.len();
                    if self.shared.mode == DeliveryMode::Transactional {
                        self.hand_off_transactions(batch);
                    } else {
                        self.hand_off(batch, true);
                    }
                    drop(handoff);
                    self.delivered_chunk(count);
                }
                Work::Isolate(suspects) => {
                    self.isolate(suspects);
                    drop(handoff);
                    self.shared.progress.notify_all();
                }
            }
        }
    }

    /// Reports one chunk handed to librdkafka (ruby-kafka's `deliver_messages` notification),
    /// and tells a flusher waiting for progress that librdkafka has records to flush.
    pub(super) fn delivered_chunk(&self, count: usize) {
        self.shared.progress.notify_all();
        let queue_size = self.shared.lock().buffer.len();
        self.shared.emit(ProducerEvent::DeliverMessages {
            message_count: count,
            queue_size,
        });
    }

    /// Waits for a reason to deliver and takes the next work, with the hand-off lock that is
    /// held until it is done; `None` when the worker should stop.
    fn next_work(&self) -> Option<(MutexGuard<'_, ()>, Work)> {
        let shared = &self.shared;
        let mut state = shared.lock();
        loop {
            if self.stopping() || state.fatal.is_some() {
                return None;
            }
            let now = Instant::now();
            // A caller handing a due chunk over itself holds the lock: wait for it to finish.
            if let Ok(handoff) = shared.handoff.try_lock() {
                if !state.suspects.is_empty() {
                    let suspects = shared.take_suspects(&mut state);
                    return Some((handoff, Work::Isolate(suspects)));
                }
                let mut batch: Vec<Box<Pending>> = Vec::new();
                // At most a chunk, due retries included: a transaction's records carry their
                // position in 16 bits (InFlight::in_transaction).
                while batch.len() < HANDOFF_CHUNK
                    && state.retries.front().is_some_and(|(due, _)| *due <= now)
                {
                    if let Some((_, pending)) = state.retries.pop_front() {
                        batch.push(pending);
                    }
                }
                let room = HANDOFF_CHUNK - batch.len().min(HANDOFF_CHUNK);
                batch.extend(shared.take_due(&mut state, room));
                if !batch.is_empty() {
                    shared.in_flight.fetch_add(batch.len(), Ordering::AcqRel);
                    drop(state);
                    shared.progress.notify_all();
                    return Some((handoff, Work::Chunk(batch)));
                }
            }
            if state.closing
                && state.buffer.is_empty()
                && state.retries.is_empty()
                && state.suspects.is_empty()
            {
                return None;
            }
            let next_retry = state
                .retries
                .front()
                .map(|(due, _)| due.saturating_duration_since(now));
            let wait = next_retry.map_or(WORKER_TICK, |d| d.min(WORKER_TICK));
            state.worker_idle = true;
            state = wait_timeout(&shared.work, state, wait);
            state.worker_idle = false;
        }
    }
}
