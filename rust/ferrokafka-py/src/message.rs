//! `Message`: a record read from or delivered to Kafka, shaped like confluent-kafka's `Message`
//! (accessor methods, `timestamp()` as a `(type, ms)` pair).

use std::sync::Arc;

use ferrokafka_kafka::{KafkaIoError, ReceivedRecord, TimestampKind};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::exception_of;

/// A Kafka record, shaped like confluent-kafka's ``Message``.
///
/// Example:
///     >>> msg = client.produce("orders", b"paid", key=b"order-1")
///     >>> (msg.topic(), msg.key(), msg.value(), msg.offset())
///     ('orders', b'order-1', b'paid', 0)
#[pyclass(name = "Message", module = "ferrokafka._native", frozen)]
#[derive(Debug)]
pub struct PyMessage {
    record: Record,
    error: Option<KafkaIoError>,
}

/// Where a message's record lives: its own, or one of a consumed batch that Rust keeps (a
/// consumer batch shares its records with its messages instead of copying them).
#[derive(Debug)]
enum Record {
    Owned(ReceivedRecord),
    InBatch(Arc<Vec<ReceivedRecord>>, usize),
}

impl From<ReceivedRecord> for PyMessage {
    fn from(record: ReceivedRecord) -> Self {
        PyMessage {
            record: Record::Owned(record),
            error: None,
        }
    }
}

impl PyMessage {
    /// A record that was not delivered, with the reason.
    pub fn failed(record: ReceivedRecord, error: KafkaIoError) -> Self {
        PyMessage {
            record: Record::Owned(record),
            error: Some(error),
        }
    }

    /// Record `index` of `batch`, sharing the batch's memory. `index` must be in bounds.
    pub fn in_batch(batch: &Arc<Vec<ReceivedRecord>>, index: usize) -> Self {
        PyMessage {
            record: Record::InBatch(Arc::clone(batch), index),
            error: None,
        }
    }

    /// The message as a Python object the cyclic garbage collector does not track. A message
    /// holds no Python object, so it can never be part of a reference cycle (CPython untracks
    /// its own tuples and dicts of such values for the same reason); tracked, the delivered
    /// messages that a million futures hold, or the batches a consumer loop keeps, would be
    /// walked again at every collection.
    pub(crate) fn into_untracked(self, py: Python<'_>) -> PyResult<Py<PyMessage>> {
        let message = Py::new(py, self)?;
        // SAFETY: a live object of a pyclass (a GC type); CPython allows untracking one at any
        // time, and its deallocation untracks it only if it is still tracked.
        unsafe { pyo3::ffi::PyObject_GC_UnTrack(message.as_ptr().cast()) };
        Ok(message)
    }

    /// Owned records as messages, each [untracked](Self::into_untracked).
    pub(crate) fn untracked_all(
        py: Python<'_>,
        records: Vec<ReceivedRecord>,
    ) -> PyResult<Vec<Py<PyMessage>>> {
        records
            .into_iter()
            .map(|record| PyMessage::from(record).into_untracked(py))
            .collect()
    }

    /// Partition and offset, read without going through Python.
    pub(crate) fn position(&self) -> (i32, i64) {
        (self.record().partition, self.record().offset)
    }

    /// A copy of the record, for Rust to keep.
    pub(crate) fn to_record(&self) -> ReceivedRecord {
        self.record().clone()
    }

    fn record(&self) -> &ReceivedRecord {
        match &self.record {
            Record::Owned(record) => record,
            Record::InBatch(batch, index) => &batch[*index],
        }
    }
}

fn bytes_or_none<'py>(py: Python<'py>, data: Option<&Vec<u8>>) -> Option<Bound<'py, PyBytes>> {
    data.map(|d| PyBytes::new(py, d))
}

#[pymethods]
impl PyMessage {
    /// The topic name.
    pub(crate) fn topic(&self) -> &str {
        &self.record().topic
    }

    /// The partition number.
    pub(crate) fn partition(&self) -> i32 {
        self.record().partition
    }

    /// The offset in the partition.
    pub(crate) fn offset(&self) -> i64 {
        self.record().offset
    }

    /// The record key, or ``None``.
    fn key<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        bytes_or_none(py, self.record().key.as_ref())
    }

    /// The record value, or ``None`` for a tombstone.
    fn value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        bytes_or_none(py, self.record().value.as_ref())
    }

    /// The headers in wire order, or ``None`` when there are none.
    fn headers<'py>(&self, py: Python<'py>) -> Option<Vec<(String, Option<Bound<'py, PyBytes>>)>> {
        if self.record().headers.is_empty() {
            return None;
        }
        Some(
            self.record()
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), bytes_or_none(py, v.as_ref())))
                .collect(),
        )
    }

    /// ``(kind, milliseconds)``; kind is 0 not available, 1 create time, 2 log-append time.
    fn timestamp(&self) -> (i32, i64) {
        let kind = match self.record().timestamp_kind {
            TimestampKind::NotAvailable => 0,
            TimestampKind::CreateTime => 1,
            TimestampKind::LogAppendTime => 2,
        };
        (kind, self.record().timestamp_ms)
    }

    /// ``None`` for a record read or delivered; for a record handed back undelivered, the
    /// :class:`ferrokafka.FerrokafkaError` that explains why.
    fn error(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.error.clone().map(|e| exception_of(py, e))
    }

    fn __len__(&self) -> usize {
        self.record().value.as_ref().map_or(0, Vec::len)
    }

    fn __repr__(&self) -> String {
        format!(
            "Message(topic={:?}, partition={}, offset={}, key={}, value_len={})",
            self.record().topic,
            self.record().partition,
            self.record().offset,
            self.record().key.as_ref().map_or_else(
                || "None".to_owned(),
                |k| format!("{:?}", String::from_utf8_lossy(k))
            ),
            self.__len__()
        )
    }
}
