//! [`ConcurrentConsumer::fetch_waiting`]: workers waiting for records without a thread each. An
//! event loop registers the workers whose partitions ran dry
//! ([`ConcurrentConsumer::wait_for_records`]) and one thread waits for any of them, so records
//! reach the loop with one thread hop per wake-up, not one per partition and batch.

use std::collections::BTreeSet;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::ConcurrentConsumer;
use super::dispatch::Fetched;
use super::events::WorkerId;
use crate::error::KafkaResult;
use crate::locks::lock;

/// The registered workers, and whether a slot changed since the waiting thread last looked.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    state: Mutex<WaitingState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct WaitingState {
    workers: BTreeSet<WorkerId>,
    changed: bool,
}

impl Waiting {
    /// A slot changed (records routed, a batch settled, the slot closed): a registered worker
    /// may find a batch now.
    pub(super) fn notify(&self) {
        let mut state = lock(&self.state);
        if !state.workers.is_empty() {
            state.changed = true;
            self.changed.notify_one();
        }
    }
}

impl ConcurrentConsumer {
    /// Registers `worker` (whose `fetch` found nothing) for [`Self::fetch_waiting`].
    pub fn wait_for_records(&self, worker: WorkerId) {
        let waiting = &self.shared.waiting;
        let mut state = lock(&waiting.state);
        state.workers.insert(worker);
        state.changed = true;
        waiting.changed.notify_one();
    }

    /// Waits up to `wait` until a registered worker's `fetch` finds a batch or that its
    /// partition is gone, and returns what every such worker found (those leave the register);
    /// empty when nothing came. One caller at a time.
    pub fn fetch_waiting(&self, wait: Duration) -> KafkaResult<Vec<(WorkerId, Fetched)>> {
        let deadline = Instant::now() + wait;
        let waiting = &self.shared.waiting;
        loop {
            let workers: Vec<WorkerId> = {
                let mut state = lock(&waiting.state);
                state.changed = false;
                state.workers.iter().copied().collect()
            };
            let mut found = Vec::new();
            for worker in workers {
                match self.fetch(worker, Duration::ZERO)? {
                    Fetched::Empty => {}
                    fetched => found.push((worker, fetched)),
                }
            }
            let mut state = lock(&waiting.state);
            for (worker, _) in &found {
                state.workers.remove(worker);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if !found.is_empty() || left.is_zero() {
                return Ok(found);
            }
            // A change after the look above set `changed`: look again at once.
            let _ = waiting
                .changed
                .wait_timeout_while(state, left, |state| !state.changed)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}
