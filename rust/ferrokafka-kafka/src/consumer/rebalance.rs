//! librdkafka's consumer context ([`RebalanceHandler`]), run on the poller thread inside `poll`:
//! a revoked partition is drained, committed (unless lost) and released before it goes; new
//! partitions get slots; statistics and errors are kept for `stats` and the connection watch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::statistics::Statistics;

use super::events::ConsumerEvent;
use super::state::{Handle, RebalanceHandler, Shared, Slot};
use crate::bounded_commit::COMMIT_WAIT;
use crate::connection_failure::watch_connection;
use crate::error::KafkaIoError;
use crate::locks::{lock, wait_timeout};
use crate::oauth::answer_token_refresh;
use crate::statistics::partitions;

impl ClientContext for RebalanceHandler {
    answer_token_refresh!(tokens);

    fn stats(&self, statistics: Statistics) {
        self.shared.record_statistics(&statistics);
    }

    watch_connection!(shared.watch);
}

impl ConsumerContext for RebalanceHandler {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let shared = &self.shared;
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let revoked: Vec<Arc<Slot>> = {
                    let slots = lock(&shared.slots);
                    tpl.elements()
                        .iter()
                        .filter_map(|e| {
                            slots
                                .by_partition
                                .get(&(e.topic().to_owned(), e.partition()))
                                .cloned()
                        })
                        .collect()
                };
                // Waiting here keeps the partition ours until its running batch finished, so the
                // next owner starts after the last committed batch instead of duplicating it.
                let lost = consumer.assignment_lost();
                shared.drain(&revoked, Instant::now() + self.drain);
                shared.release(consumer, revoked, lost, Instant::now() + COMMIT_WAIT);
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(err) => {
                log::error!("rebalance failed: {err}");
                shared.emit(ConsumerEvent::Error(KafkaIoError::from_rdkafka(
                    "rebalance",
                    err.clone(),
                    Duration::ZERO,
                    None,
                )));
            }
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            // Under the eager protocol the whole assignment arrives again; cooperative adds only
            // the new partitions. Known partitions keep their slot either way.
            let partitions = tpl
                .elements()
                .iter()
                .map(|e| (e.topic().to_owned(), e.partition(), None))
                .collect();
            let assigned = self.shared.add_slots(partitions);
            if !assigned.is_empty() {
                self.shared.emit(ConsumerEvent::Assigned(assigned));
            }
        }
    }
}

impl Shared {
    /// Stops handing out batches of `slots`, drops their queued records, and waits until their
    /// batches in flight are acknowledged or `deadline` passes; a batch still running then is
    /// abandoned.
    pub(super) fn drain(&self, slots: &[Arc<Slot>], deadline: Instant) {
        let mut dropped = 0;
        for slot in slots {
            let mut state = slot.lock();
            state.closed = true;
            let cleared = state.buffer.clear();
            dropped += cleared;
            state.counters.dropped += cleared as u64;
            drop(state);
            slot.changed.notify_all();
            self.waiting.notify(slot.worker);
        }
        self.emit(ConsumerEvent::Draining {
            partitions: slots.iter().map(|s| s.assignment()).collect(),
            dropped,
        });
        for slot in slots {
            let mut state = slot.lock();
            while !state.in_flight.is_empty() || state.dead_letters_pending > 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let running: Vec<i64> =
                        state.in_flight.drain().map(|(first, _)| first).collect();
                    for first in running {
                        state.buffer.release(first);
                    }
                    state.buffer.progress_mut().abandon_all();
                    state.counters.abandoned += 1;
                    // Said with the lock released: see `Shared::warn_overdue`.
                    drop(state);
                    log::warn!(
                        "handler for {}[{}] did not finish within the drain time; its batch is \
                         abandoned and will be redelivered",
                        slot.topic,
                        slot.partition
                    );
                    break;
                }
                state = wait_timeout(&slot.changed, state, left);
            }
        }
    }

    /// Commits (unless `lost`; waiting for the answer until `commit_by`) and forgets `slots`,
    /// drained before, then reports them unassigned.
    pub(super) fn release(
        &self,
        consumer: &Handle,
        slots: Vec<Arc<Slot>>,
        lost: bool,
        commit_by: Instant,
    ) {
        if slots.is_empty() {
            return;
        }
        if !lost {
            self.commit(consumer, &slots, commit_by, || false);
        }
        self.remove_slots(&slots);
        let partitions = slots.iter().map(|s| s.assignment()).collect();
        self.emit(ConsumerEvent::Unassigned { partitions, lost });
    }

    /// Keeps each assigned partition's offsets from librdkafka's statistics for `stats`, with
    /// the changes since the previous statistics of its assignment, and the group's state.
    fn record_statistics(&self, statistics: &Statistics) {
        self.statistics.record_client(statistics);
        let slots = lock(&self.slots);
        for figures in partitions(statistics) {
            let key = (figures.topic.to_owned(), figures.partition);
            let Some(slot) = slots.by_partition.get(&key) else {
                continue;
            };
            let mut state = slot.lock();
            state.broker = Some(figures.after(state.broker.as_ref()));
        }
    }
}
