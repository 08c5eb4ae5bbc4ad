//! `Batch`: the records of one consumer batch, kept in the Rust memory the engine filled.
//!
//! A `Message` object is created only when a record is accessed (indexing or iterating), and
//! shares the batch's memory; the columnar accessors build one Python list per call and
//! `to_arrow` builds the Arrow buffers (one copy per value, no Python object per record; with
//! the GIL released for a large batch) and hands them to pyarrow through the Arrow C data
//! interface (`arrow_c`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ferrokafka_core::codec::columnar::ColumnBuilder;
use ferrokafka_core::codec::records::{RecordFields, RecordRows};
use ferrokafka_core::error::CoreError;
use ferrokafka_kafka::{ReceivedRecord, TimestampKind};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PySlice};

use crate::arrow_c::Node;
use crate::errors::{NativeResult, index_out_of_range};
use crate::message::PyMessage;

/// Key and value bytes above which `to_arrow` builds the columns with the GIL released (about
/// 0.3 ms of copying). Below it the build takes less than taking the GIL back does while other
/// handler threads run Python: releasing it for every batch of 1,000 records of 100 B took
/// 1.03x-1.07x the CPU per record and gave 0.91x-0.98x the records per second of a consumer
/// with six handler threads (benches/RESULTS.md).
const DETACH_ABOVE: usize = 1 << 20;

/// `pyarrow.RecordBatch._import_from_c_capsule`, looked up once.
static IMPORT_RECORD_BATCH: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The records of one partition handed to a consumer handler, in offset order, kept in Rust
/// memory: a sequence of :class:`Message` (each created when accessed), with columnar
/// accessors that make no ``Message`` at all.
///
/// Example:
///     >>> def handle(batch: Batch) -> None:
///     ...     total = sum(len(v or b"") for v in batch.values())
///     ...     table = batch.to_arrow()  # pyarrow.RecordBatch
#[pyclass(name = "Batch", module = "ferrokafka._native", frozen, sequence)]
#[derive(Debug)]
pub struct PyBatch {
    records: Arc<Vec<ReceivedRecord>>,
}

impl PyBatch {
    /// A batch over `records`, shared with the engine (no copy).
    pub fn new(records: Arc<Vec<ReceivedRecord>>) -> Self {
        PyBatch { records }
    }

    /// The offset that identifies the batch to the engine (its first record's).
    pub fn first_offset(&self) -> Option<i64> {
        self.records.first().map(|r| r.offset)
    }

    fn message(&self, py: Python<'_>, index: usize) -> PyResult<Py<PyMessage>> {
        PyMessage::in_batch(&self.records, index).into_untracked(py)
    }

    fn column<'py, T, F>(&self, py: Python<'py>, field: F) -> PyResult<Bound<'py, PyList>>
    where
        F: Fn(&ReceivedRecord) -> T,
        T: IntoPyObject<'py>,
    {
        PyList::new(py, self.records.iter().map(field))
    }
}

fn bytes<'py>(py: Python<'py>, data: Option<&Vec<u8>>) -> Option<Bound<'py, PyBytes>> {
    data.map(|d| PyBytes::new(py, d))
}

#[pymethods]
impl PyBatch {
    fn __len__(&self) -> usize {
        self.records.len()
    }

    fn __getitem__(&self, py: Python<'_>, index: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        if let Ok(slice) = index.cast::<PySlice>() {
            let range = slice.indices(self.records.len() as isize)?;
            let messages = (0..range.slicelength)
                .map(|n| self.message(py, (range.start + n as isize * range.step) as usize))
                .collect::<PyResult<Vec<_>>>()?;
            return Ok(PyList::new(py, messages)?.into_any().unbind());
        }
        let position: isize = index.extract()?;
        let len = self.records.len() as isize;
        let resolved = if position < 0 {
            position + len
        } else {
            position
        };
        if !(0..len).contains(&resolved) {
            return Err(index_out_of_range("batch"));
        }
        Ok(self.message(py, resolved as usize)?.into_any())
    }

    fn __iter__(&self) -> PyBatchIterator {
        PyBatchIterator {
            records: Arc::clone(&self.records),
            next: AtomicUsize::new(0),
        }
    }

    fn __bool__(&self) -> bool {
        !self.records.is_empty()
    }

    /// The values, in order (``None`` for a tombstone).
    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.column(py, |r| bytes(py, r.value.as_ref()))
    }

    /// The keys, in order.
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.column(py, |r| bytes(py, r.key.as_ref()))
    }

    /// The offsets, in order.
    fn offsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.column(py, |r| r.offset)
    }

    /// The timestamps in milliseconds since the epoch (0 when a record has none).
    fn timestamps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.column(py, |r| r.timestamp_ms)
    }

    /// A ``pyarrow.RecordBatch`` with columns ``key``, ``value`` (binary), ``topic``,
    /// ``partition`` (int32), ``offset`` (int64), ``timestamp`` (timestamp[ms], null when a
    /// record has none) and ``headers`` (list<struct<key: string, value: binary>>), built in
    /// Rust without a Python object per record (with the GIL released when the batch holds
    /// more than 1 MiB of keys and values). Needs pyarrow.
    fn to_arrow(&self, py: Python<'_>) -> NativeResult<Py<PyAny>> {
        let records = Arc::clone(&self.records);
        let (keys, values, topics) = records.iter().fold((0, 0, 0), |(keys, values, topics), r| {
            let len = |bytes: &Option<Vec<u8>>| bytes.as_ref().map_or(0, Vec::len);
            (
                keys + len(&r.key),
                values + len(&r.value),
                topics + r.topic.len(),
            )
        });
        let build = move || -> Result<Node, CoreError> {
            let mut rows = RecordRows::with_capacity(records.len(), keys, values, topics);
            for record in records.iter() {
                let available = record.timestamp_kind != TimestampKind::NotAvailable;
                rows.push(RecordFields {
                    key: record.key.as_deref(),
                    value: record.value.as_deref(),
                    topic: &record.topic,
                    partition: record.partition,
                    offset: record.offset,
                    timestamp_ms: available.then_some(record.timestamp_ms),
                    headers: record
                        .headers
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_deref())),
                });
            }
            // As Spark's Kafka source types them: partition int32, timestamp timestamp[ms].
            let mut columns = Node::new("", rows.finish()?);
            if let Some(partition) = columns.child_mut("partition") {
                partition.narrow_int64_to_int32();
            }
            if let Some(timestamp) = columns.child_mut("timestamp") {
                timestamp.view_int64_as(c"tsm:");
            }
            Ok(columns)
        };
        // Building the columns scales with the batch, but a small batch's build is shorter than
        // the wait to take the GIL back among busy handler threads: detached only when large.
        let columns = if keys + values > DETACH_ABOVE {
            py.detach(build)?
        } else {
            build()?
        };
        let (schema, array) = columns.into_capsules(py)?;
        let import = IMPORT_RECORD_BATCH.get_or_try_init(py, || {
            // ferrokafka.arrow imports pyarrow, or says which extra installs it.
            py.import("ferrokafka.arrow")?
                .getattr("_import_record_batch")
                .map(Bound::unbind)
        })?;
        Ok(import.call1(py, (schema, array))?)
    }

    fn __repr__(&self) -> String {
        match (self.records.first(), self.records.last()) {
            (Some(first), Some(last)) => format!(
                "Batch(topic={:?}, partition={}, offsets={}..={}, records={})",
                first.topic,
                first.partition,
                first.offset,
                last.offset,
                self.records.len()
            ),
            _ => "Batch(records=0)".to_owned(),
        }
    }
}

/// Iterates a `Batch`, creating each `Message` when it is reached.
#[pyclass(name = "BatchIterator", module = "ferrokafka._native", frozen)]
#[derive(Debug)]
pub struct PyBatchIterator {
    records: Arc<Vec<ReceivedRecord>>,
    next: AtomicUsize,
}

#[pymethods]
impl PyBatchIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyMessage>>> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        if index >= self.records.len() {
            return Ok(None);
        }
        PyMessage::in_batch(&self.records, index)
            .into_untracked(py)
            .map(Some)
    }
}
