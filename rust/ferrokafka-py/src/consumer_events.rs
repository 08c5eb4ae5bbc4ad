//! The concurrent consumer's events as typed objects: what `_RawConsumer.poll_events` hands the
//! Python dispatcher, one class per kind, so Python reads attributes instead of unpacking tuples
//! whose shape lives in two languages.

use ferrokafka_kafka::{ConsumerEvent, WorkerId};
use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;

use crate::errors::exception_of;

/// One partition handed to a worker: fetch and acknowledge its batches with `worker`.
#[pyclass(name = "Assignment", module = "ferrokafka._native", frozen, get_all)]
pub struct PyAssignment {
    topic: String,
    partition: i32,
    worker: WorkerId,
}

/// Partitions were assigned; start their workers.
#[pyclass(
    name = "ConsumerAssigned",
    module = "ferrokafka._native",
    frozen,
    get_all
)]
pub struct PyConsumerAssigned {
    partitions: Vec<Py<PyAssignment>>,
}

/// Partitions stopped handing out batches (revoked, or the consumer is stopping): `dropped`
/// queued records were dropped, and running batches get the drain time.
#[pyclass(
    name = "ConsumerDraining",
    module = "ferrokafka._native",
    frozen,
    get_all
)]
pub struct PyConsumerDraining {
    partitions: Vec<Py<PyAssignment>>,
    dropped: usize,
}

/// Partitions were taken away after their workers drained; `lost` when their offsets were not
/// committed.
#[pyclass(
    name = "ConsumerUnassigned",
    module = "ferrokafka._native",
    frozen,
    get_all
)]
pub struct PyConsumerUnassigned {
    partitions: Vec<Py<PyAssignment>>,
    lost: bool,
}

/// A consumer without a group handled its partition up to the high watermark seen at start.
#[pyclass(
    name = "ConsumerCaughtUp",
    module = "ferrokafka._native",
    frozen,
    get_all
)]
pub struct PyConsumerCaughtUp {
    topic: String,
    partition: i32,
    offset: i64,
}

/// Load control stopped polling a full partition (`paused`), or polls it again.
#[pyclass(
    name = "ConsumerLoadControl",
    module = "ferrokafka._native",
    frozen,
    get_all
)]
pub struct PyConsumerLoadControl {
    topic: String,
    partition: i32,
    paused: bool,
    queued: usize,
    queued_bytes: usize,
}

/// The broker answered a commit of `offsets` (`(topic, partition, next_offset)`, the shape the
/// `commit` payload publishes); `error` when it failed.
#[pyclass(
    name = "ConsumerCommitted",
    module = "ferrokafka._native",
    frozen,
    get_all
)]
pub struct PyConsumerCommitted {
    offsets: Vec<(String, i32, i64)>,
    error: Option<Py<PyAny>>,
}

// The error objects are the caller's to extend (attributes, `__notes__`): a cycle back to the
// event must be visible to the GC (here and in every event that holds one).
#[pymethods]
impl PyConsumerCommitted {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.error)
    }
}

/// librdkafka reported an error while consuming; the consumer keeps running.
#[pyclass(name = "ConsumerError", module = "ferrokafka._native", frozen, get_all)]
pub struct PyConsumerError {
    error: Py<PyAny>,
}

#[pymethods]
impl PyConsumerError {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.error)
    }
}

fn assignments(
    py: Python<'_>,
    partitions: Vec<ferrokafka_kafka::Assignment>,
) -> PyResult<Vec<Py<PyAssignment>>> {
    partitions
        .into_iter()
        .map(|a| {
            Py::new(
                py,
                PyAssignment {
                    topic: a.topic,
                    partition: a.partition,
                    worker: a.worker,
                },
            )
        })
        .collect()
}

/// The typed Python object of `event`.
pub(crate) fn event_object(py: Python<'_>, event: ConsumerEvent) -> PyResult<Py<PyAny>> {
    Ok(match event {
        ConsumerEvent::Assigned(partitions) => {
            let partitions = assignments(py, partitions)?;
            Py::new(py, PyConsumerAssigned { partitions })?.into_any()
        }
        ConsumerEvent::Draining {
            partitions,
            dropped,
        } => {
            let partitions = assignments(py, partitions)?;
            Py::new(
                py,
                PyConsumerDraining {
                    partitions,
                    dropped,
                },
            )?
            .into_any()
        }
        ConsumerEvent::Unassigned { partitions, lost } => {
            let partitions = assignments(py, partitions)?;
            Py::new(py, PyConsumerUnassigned { partitions, lost })?.into_any()
        }
        ConsumerEvent::CaughtUp {
            topic,
            partition,
            offset,
        } => Py::new(
            py,
            PyConsumerCaughtUp {
                topic,
                partition,
                offset,
            },
        )?
        .into_any(),
        ConsumerEvent::LoadControl {
            topic,
            partition,
            paused,
            queued,
            queued_bytes,
        } => Py::new(
            py,
            PyConsumerLoadControl {
                topic,
                partition,
                paused,
                queued,
                queued_bytes,
            },
        )?
        .into_any(),
        ConsumerEvent::Committed { offsets, error } => {
            let error = error.map(|e| exception_of(py, e));
            Py::new(py, PyConsumerCommitted { offsets, error })?.into_any()
        }
        ConsumerEvent::Error(error) => {
            let error = exception_of(py, error);
            Py::new(py, PyConsumerError { error })?.into_any()
        }
    })
}
