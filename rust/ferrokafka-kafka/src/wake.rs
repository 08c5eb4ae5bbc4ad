//! [`Wake`]: how a thread sleeping until records arrive is woken: by librdkafka's
//! non-empty-queue callbacks (the consumer's poller, the queue consumer's prefetch thread) and by
//! workers that free room in a full buffer.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::locks::lock;

/// Wakes a sleeping reader of librdkafka queues: set by their non-empty-queue callbacks (and by
/// the consumer's workers).
#[derive(Debug, Default)]
pub(crate) struct Wake {
    pending: Mutex<bool>,
    changed: Condvar,
}

impl Wake {
    pub(crate) fn notify(&self) {
        *lock(&self.pending) = true;
        self.changed.notify_one();
    }

    /// Waits up to `wait` unless woken since the last call.
    pub(crate) fn wait(&self, wait: Duration) {
        let pending = lock(&self.pending);
        let mut pending = self
            .changed
            .wait_timeout_while(pending, wait, |p| !*p)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        *pending = false;
    }
}
