//! `_RawScheduler`: the native half of `ferrokafka.scheduling.Scheduler`.
//!
//! GIL: the daemon runs on its own Rust thread; `wait` waits detached in slices and checks for
//! signals between them, so `Scheduler.run()` can be stopped with Ctrl-C or SIGTERM handlers.

use ferrokafka_kafka::{PartitionStatus, Scheduler, SchedulerOptions};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::blocking::{DaemonHandle, timeout_arg};
use crate::convert::settings_from_dict;
use crate::errors::NativeResult;

/// The native scheduler daemon; use `ferrokafka.scheduling.Scheduler`.
#[pyclass(name = "_RawScheduler", module = "ferrokafka._native", frozen)]
#[derive(Debug)]
pub struct PyRawScheduler {
    daemon: DaemonHandle<Vec<PartitionStatus>>,
}

#[pymethods]
impl PyRawScheduler {
    #[new]
    #[pyo3(signature = (config, schedules_topics, group_id, flush_batch_size, state_interval, states_postfix, horizon, dead_letter_topic=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyDict>,
        schedules_topics: Vec<String>,
        group_id: String,
        flush_batch_size: usize,
        state_interval: f64,
        states_postfix: String,
        horizon: f64,
        dead_letter_topic: Option<String>,
    ) -> NativeResult<Self> {
        let settings = settings_from_dict(config)?;
        let options = SchedulerOptions {
            schedules_topics,
            group_id,
            flush_batch_size,
            state_interval: timeout_arg("state_interval", state_interval)?,
            states_postfix,
            horizon: timeout_arg("horizon", horizon)?,
            dead_letter_topic,
            ..SchedulerOptions::default()
        };
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

    /// Per-partition figures: topic, partition, state, pending, dispatched, skipped, failed,
    /// applied.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.daemon
            .status()
            .into_iter()
            .map(|s| {
                let row = PyDict::new(py);
                row.set_item("topic", s.topic)?;
                row.set_item("partition", s.partition)?;
                row.set_item("state", s.state)?;
                row.set_item("pending", s.pending)?;
                row.set_item("dispatched", s.dispatched)?;
                row.set_item("skipped", s.skipped)?;
                row.set_item("failed", s.failed)?;
                row.set_item("applied", s.applied)?;
                Ok(row)
            })
            .collect()
    }
}
