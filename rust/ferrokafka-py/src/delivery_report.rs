//! `DeliveryReport`: where every record of one `produce_many(..., on_delivery=...)` call landed,
//! handed to its callback once, when the last of them is settled. The positions stay in Rust
//! vectors until asked for, so a report of 10,000 records is one Python object, not 10,000.

use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;

/// The delivery results of one ``produce_many(..., on_delivery=...)`` call, in the order of
/// its records: one object per call, the positions kept in Rust until asked for.
#[pyclass(name = "DeliveryReport", module = "ferrokafka._native", frozen)]
#[derive(Debug)]
pub struct PyDeliveryReport {
    partitions: Vec<i32>,
    offsets: Vec<i64>,
    /// (index in the call, the error), in index order.
    errors: Vec<(usize, Py<PyAny>)>,
}

impl PyDeliveryReport {
    /// A report of `count` records: `partitions`/`offsets` filled for the delivered ones (-1 for
    /// the others), `errors` for the failed ones by index (as the engine's report has them).
    pub(crate) fn new(
        partitions: Vec<i32>,
        offsets: Vec<i64>,
        errors: Vec<(usize, Py<PyAny>)>,
    ) -> Self {
        PyDeliveryReport {
            partitions,
            offsets,
            errors,
        }
    }
}

#[pymethods]
impl PyDeliveryReport {
    // The errors are the caller's to extend: a cycle back to the report must be visible to the GC.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for (_, error) in &self.errors {
            visit.call(error)?;
        }
        Ok(())
    }

    /// Records the call queued (those it accepted).
    #[getter]
    fn count(&self) -> usize {
        self.offsets.len()
    }

    /// Records the broker acknowledged.
    #[getter]
    fn delivered(&self) -> usize {
        self.offsets.len() - self.errors.len()
    }

    /// Records that finally failed; they are also handed back (``take_failed``,
    /// ``shutdown``).
    #[getter]
    fn failed(&self) -> usize {
        self.errors.len()
    }

    /// Each record's partition, in call order; -1 for a failed record.
    fn partitions(&self) -> Vec<i32> {
        self.partitions.clone()
    }

    /// Each record's offset, in call order; -1 for a failed record.
    fn offsets(&self) -> Vec<i64> {
        self.offsets.clone()
    }

    /// ``(index, error)`` of each failed record, by index.
    fn errors(&self, py: Python<'_>) -> Vec<(usize, Py<PyAny>)> {
        self.errors
            .iter()
            .map(|(index, error)| (*index, error.clone_ref(py)))
            .collect()
    }

    fn __len__(&self) -> usize {
        self.offsets.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "DeliveryReport(count={}, delivered={}, failed={})",
            self.count(),
            self.delivered(),
            self.failed()
        )
    }
}
