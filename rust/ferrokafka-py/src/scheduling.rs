//! `_RawScheduler`: the native half of `ferrokafka.scheduling.Scheduler`.
//!
//! GIL: the daemon runs on its own Rust thread; `wait` waits detached in slices and checks for
//! signals between them, so `Scheduler.run()` can be stopped with Ctrl-C or SIGTERM handlers.

use ferrokafka_kafka::{DaemonStatus, PartitionStatus, Scheduler, SchedulerOptions};
use pyo3::prelude::*;

use crate::blocking::DaemonHandle;
use crate::errors::NativeResult;
use crate::flat_record::{flat_record, record_of};
use crate::options::{Config, Fields, FromKeywords, Keywords, constructor_args};
use crate::report_samples::PySourceSample;
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
        /// Schedules dispatched by this daemon.
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

/// The native scheduler daemon; use `ferrokafka.scheduling.Scheduler`.
#[pyclass(name = "_RawScheduler", module = "ferrokafka._native", frozen)]
#[derive(Debug)]
pub struct PyRawScheduler {
    daemon: DaemonHandle<DaemonStatus<PartitionStatus>>,
}

#[pymethods]
impl PyRawScheduler {
    #[new]
    #[pyo3(signature = (config, **options))]
    fn new(py: Python<'_>, config: Config, options: Option<Keywords>) -> NativeResult<Self> {
        let (settings, options) = constructor_args::<SchedulerOptions>(config, options)?;
        // Creating a transactional producer waits for the broker.
        let daemon = py.detach(move || Scheduler::start(settings, options))?;
        Ok(PyRawScheduler {
            daemon: DaemonHandle::new(daemon, "ferrokafka.scheduling.Scheduler"),
        })
    }

    /// Asks the daemon to stop; returns at once.
    fn request_stop(&self) -> PyResult<()> {
        self.daemon.request_stop()
    }

    /// Waits up to `timeout` seconds (forever when None) for the daemon to end; True once it has.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        self.daemon.wait(py, timeout)
    }

    /// Per-partition figures.
    fn status(&self, py: Python<'_>) -> PyResult<Vec<PySchedulerPartitionStatus>> {
        let rows = self.daemon.status().partitions;
        rows.into_iter().map(|s| partition_status(py, s)).collect()
    }

    /// This daemon's part of a process report, as of its last loop.
    fn report_sample(&self) -> PySourceSample {
        PySourceSample(self.daemon.report_sample())
    }
}
