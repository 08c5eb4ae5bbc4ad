//! The concurrent consumer's events as typed objects: what `_RawConsumer.poll_events` hands the
//! Python dispatcher, one class per kind, so Python reads attributes instead of unpacking tuples
//! whose shape lives in two languages.

use ferrokafka_kafka::{ConsumerEvent, WorkerId};
use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;

use crate::errors::exception_of;
use crate::flat_record::frozen_record;

frozen_record! {
    /// One partition handed to a worker: fetch and acknowledge its batches with `worker`.
    "Assignment" PyAssignment {
        topic: String,
        partition: i32,
        worker: WorkerId,
    }
}

frozen_record! {
    /// Partitions were assigned; start their workers.
    "ConsumerAssigned" PyConsumerAssigned {
        partitions: Vec<Py<PyAssignment>>,
    }
}

frozen_record! {
    /// Partitions stopped handing out batches (revoked, or the consumer is stopping): `dropped`
    /// queued records were dropped, and running batches get the drain time.
    "ConsumerDraining" PyConsumerDraining {
        partitions: Vec<Py<PyAssignment>>,
        dropped: usize,
    }
}

frozen_record! {
    /// Partitions were taken away after their workers drained; `lost` when their offsets were not
    /// committed.
    "ConsumerUnassigned" PyConsumerUnassigned {
        partitions: Vec<Py<PyAssignment>>,
        lost: bool,
    }
}

frozen_record! {
    /// A consumer without a group handled its partition up to the high watermark seen at start.
    "ConsumerCaughtUp" PyConsumerCaughtUp {
        topic: String,
        partition: i32,
        offset: i64,
    }
}

frozen_record! {
    /// Load control stopped polling a full partition (`paused`), or polls it again.
    "ConsumerLoadControl" PyConsumerLoadControl {
        topic: String,
        partition: i32,
        paused: bool,
        queued: usize,
        queued_bytes: usize,
    }
}

frozen_record! {
    /// The broker answered a commit of `offsets` (`(topic, partition, next_offset)`, the shape the
    /// `commit` payload publishes); `error` when it failed.
    "ConsumerCommitted" PyConsumerCommitted {
        offsets: Vec<(String, i32, i64)>,
        error: Option<Py<PyAny>>,
    }
}

// The error objects are the caller's to extend (attributes, `__notes__`): a cycle back to the
// event must be visible to the GC (here and in every event that holds one).
#[pymethods]
impl PyConsumerCommitted {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.error)
    }
}

frozen_record! {
    /// librdkafka reported an error while consuming; the consumer keeps running.
    "ConsumerError" PyConsumerError {
        error: Py<PyAny>,
    }
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
