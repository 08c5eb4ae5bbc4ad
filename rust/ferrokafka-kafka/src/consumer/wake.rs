//! [`Wake`]: how the sleeping poller is woken, by librdkafka's non-empty-queue callbacks and by
//! workers that free room in a full buffer.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::locks::lock;

/// Wakes the sleeping poller: set by librdkafka's non-empty-queue callbacks and by workers.
#[derive(Debug, Default)]
pub(super) struct Wake {
    pending: Mutex<bool>,
    changed: Condvar,
}

impl Wake {
    pub(super) fn notify(&self) {
        *lock(&self.pending) = true;
        self.changed.notify_one();
    }

    /// Waits up to `wait` unless woken since the last call.
    pub(super) fn wait(&self, wait: Duration) {
        let pending = lock(&self.pending);
        let mut pending = self
            .changed
            .wait_timeout_while(pending, wait, |p| !*p)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        *pending = false;
    }
}
