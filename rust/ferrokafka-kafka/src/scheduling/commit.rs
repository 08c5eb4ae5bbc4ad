//! The offsets: stored once acted upon (a loaded partition with no retry pending) and committed
//! every [`COMMIT_INTERVAL`], so the group's lag is meaningful while running.

use std::time::{Duration, Instant};

use ferrokafka_core::codec::state::TrackerState;
use rdkafka::consumer::Consumer;

use super::SchedulerLoop;

/// How often the offsets read and acted upon are committed while running.
const COMMIT_INTERVAL: Duration = Duration::from_secs(1);

impl SchedulerLoop {
    /// Stores, for commit, the read position of every loaded partition with nothing waiting
    /// for a retry, and commits the stored offsets every [`COMMIT_INTERVAL`].
    pub(super) fn commit_progress(&mut self) {
        if self.last_commit.elapsed() < COMMIT_INTERVAL {
            return;
        }
        self.last_commit = Instant::now();
        let positions = self.consumer.position().ok();
        let mut stored = false;
        for ((topic, partition), run) in &mut self.runs {
            let settled = run.tracker.state() == TrackerState::Loaded
                && run.blocked.is_none()
                && run.dispatch_backoff.retry_at.is_none()
                && run.unread.is_empty();
            if !settled {
                continue;
            }
            // Every record polled is applied: a position past the last one passed a
            // transaction's marker or aborted records, and the commit goes there too (as a
            // Java consumer's does), or a transactionally written topic keeps a lag of one.
            let position = positions
                .as_ref()
                .and_then(|p| p.find_partition(topic, *partition))
                .and_then(|element| element.offset().to_raw());
            if let Some(position) = position {
                run.next_offset = run.next_offset.max(position);
            }
            if run.next_offset <= run.stored_offset {
                continue;
            }
            // librdkafka stores `offset + 1`: the next offset to read.
            match self
                .consumer
                .store_offset(topic, *partition, run.next_offset - 1)
            {
                Ok(()) => {
                    run.stored_offset = run.next_offset;
                    stored = true;
                }
                Err(e) => log::debug!("store offset {topic}-{partition}: {e}"),
            }
        }
        if stored
            && let Err(e) = self
                .consumer
                .commit_consumer_state(rdkafka::consumer::CommitMode::Async)
        {
            log::warn!("scheduler offset commit: {e}");
        }
    }
}
