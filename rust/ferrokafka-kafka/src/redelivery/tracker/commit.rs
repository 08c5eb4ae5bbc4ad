//! The markers offsets: each partition committed up to its smallest open START, while running
//! and at the stop, whose last steps this file also holds.

use std::sync::Mutex;
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::{Tracker, TrackerPartitionStatus};
use crate::bounded_commit::{Offsets, commit_before};
use crate::daemon::{
    DaemonStatus, GroupContext, SHUTDOWN_BUDGET, commit_and_close, flush_before, publish,
};

impl Tracker {
    /// Commits (asynchronously) each partition up to its smallest open START, when enough
    /// markers were read or the interval passed.
    pub(super) fn commit(&mut self) {
        let (offsets, committed) = self.commit_positions(false);
        if committed.is_empty() {
            return;
        }
        if let Err(e) = self.consumer.commit(&offsets, CommitMode::Async) {
            log::warn!("markers offsets not committed: {e}");
            return;
        }
        self.note_committed(committed);
    }

    /// The offsets to commit (each partition's smallest open START, when due or `all`) and the
    /// (partition, position) pairs they stand for.
    fn commit_positions(&self, all: bool) -> (TopicPartitionList, Vec<(i32, u64)>) {
        let mut offsets = TopicPartitionList::new();
        let mut committed = Vec::new();
        for (partition, run) in &self.partitions {
            let Some(position) = run.queue.smallest_open_marker_offset() else {
                continue;
            };
            let due = all
                || run.applied_since_commit >= self.options.num_offsets_per_commit
                || run.last_commit.elapsed() >= self.options.commit_interval;
            if !due || run.status.committed == Some(position) {
                continue;
            }
            let Ok(offset) = i64::try_from(position) else {
                continue;
            };
            if offsets
                .add_partition_offset(
                    &self.options.markers_topic,
                    *partition,
                    Offset::Offset(offset),
                )
                .is_ok()
            {
                committed.push((*partition, position));
            }
        }
        (offsets, committed)
    }

    fn note_committed(&mut self, committed: Vec<(i32, u64)>) {
        for (partition, position) in committed {
            if let Some(run) = self.partitions.get_mut(&partition) {
                run.status.committed = Some(position);
                run.applied_since_commit = 0;
                run.last_commit = Instant::now();
            }
        }
    }

    /// Stops within [`SHUTDOWN_BUDGET`] (and the close's grace) whatever the broker does:
    /// redeliveries on their way are flushed, then every partition's position is committed
    /// and the group left; the status is published with what the commit confirmed.
    pub(super) fn shutdown(self, status: &Mutex<DaemonStatus<TrackerPartitionStatus>>) {
        let deadline = Instant::now() + SHUTDOWN_BUDGET;
        flush_before(
            &self.producer,
            deadline,
            "redelivery tracker",
            "redelivered message(s)",
        );
        let (offsets, committed) = self.commit_positions(true);
        let mut status_now = self.status();
        let Tracker { consumer, .. } = self;
        let final_commit = move |consumer: &BaseConsumer<GroupContext>, by| {
            if offsets.count() == 0 {
                return Ok(());
            }
            commit_before(consumer, Offsets::Listed(&offsets), by)
        };
        match commit_and_close(consumer, final_commit, deadline, "redelivery tracker") {
            Some(Ok(())) => {
                for (partition, position) in committed {
                    let rows = &mut status_now.partitions;
                    if let Some(row) = rows.iter_mut().find(|row| row.partition == partition) {
                        row.committed = Some(position);
                    }
                }
            }
            Some(Err(e)) => log::warn!("markers offsets not committed: {e}"),
            None => {}
        }
        publish(status, status_now);
        log::info!("redelivery tracker stopped");
    }
}
