//! `_RawScheduler`: the native half of `ferrokafka.scheduling.Scheduler`.
//!
//! GIL: the daemon runs on its own Rust thread; `wait` waits detached in slices and checks for
//! signals between them, so `Scheduler.run()` can be stopped with Ctrl-C or SIGTERM handlers.

use ferrokafka_kafka::{PartitionStatus, Scheduler, SchedulerOptions};
use pyo3::prelude::*;

use crate::daemon_class::daemon_class;
use crate::flat_record::{flat_record, record_of};
use crate::options::{Fields, FromKeywords};
use crate::statistics::PyBrokerOffsets;

flat_record! {
    /// One schedules partition of a scheduler.
    "SchedulerPartitionStatus" PySchedulerPartitionStatus {
        /// Schedules topic.
        topic: String,
        partition: i32,
        /// fresh, loading, loaded, stopped; or blocked (a record with a newer schema stopped
        /// the partition until the daemon is upgraded).
        state: String,
        /// Schedules pending in memory and beyond the horizon.
        pending: usize,
        /// Schedules dispatched by this daemon since it started (over every assignment of
        /// the partition).
        dispatched: u64,
        /// Records skipped as undecodable.
        skipped: u64,
        /// Schedules whose target was refused for good.
        failed: u64,
        /// Records applied.
        applied: u64,
    }
    records {
        /// The partition's offsets from librdkafka's latest statistics; None before the first.
        broker: PyBrokerOffsets,
    }
}

fn partition_status(py: Python<'_>, s: PartitionStatus) -> PyResult<PySchedulerPartitionStatus> {
    Ok(PySchedulerPartitionStatus {
        topic: s.topic,
        partition: s.partition,
        state: s.state.to_owned(),
        pending: s.pending,
        dispatched: s.dispatched,
        skipped: s.skipped,
        failed: s.failed,
        applied: s.applied,
        broker: record_of(py, s.broker)?,
    })
}

/// The keyword arguments of `Scheduler` the engine takes.
impl FromKeywords for SchedulerOptions {
    fn read(fields: &Fields<'_, '_>) -> PyResult<Self> {
        Ok(SchedulerOptions {
            schedules_topics: fields.topics("schedules_topics")?,
            group_id: fields.text("group_id")?,
            flush_batch_size: fields.count("flush_batch_size")?,
            state_interval: fields.seconds("state_interval")?,
            states_postfix: fields.text("states_postfix")?,
            horizon: fields.seconds("horizon")?,
            dead_letter_topic: fields.optional_text("dead_letter_topic")?,
            partition_key_hashing: fields.partition_key_hashing()?,
            ..SchedulerOptions::default()
        })
    }
}

daemon_class! {
    /// The native scheduler daemon; use `ferrokafka.scheduling.Scheduler`.
    "_RawScheduler" PyRawScheduler for "ferrokafka.scheduling.Scheduler" {
        start: Scheduler::start,
        /// Per-partition figures.
        status: PartitionStatus => PySchedulerPartitionStatus, by partition_status,
    }
}
