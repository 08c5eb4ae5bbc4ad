//! The concurrent consumer's statistics as typed objects: what `_RawConsumer.stats` returns
//! (librdkafka's figures in it are `statistics.rs`'s).
//! Python reads attributes; `as_dict()` gives the dict `Consumer.stats()` publishes, built from
//! the same fields so the two cannot drift apart.

use ferrokafka_kafka::{ConsumerStats, PartitionCounters, PartitionStats, WorkerId};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::flat_record::{flat_record, record_of};
use crate::statistics::{PyBrokerOffsets, PyGroupStatistics};

flat_record! {
    /// Counters of one partition since its assignment, or of the consumer over its life.
    "ConsumerCounters" PyConsumerCounters {
        received: u64,
        handled: u64,
        failed: u64,
        dead_lettered: u64,
        retries: u64,
        batches: u64,
        pauses: u64,
        resumes: u64,
        dropped: u64,
        abandoned: u64,
    }
}

impl From<PartitionCounters> for PyConsumerCounters {
    fn from(c: PartitionCounters) -> Self {
        Self {
            received: c.received,
            handled: c.handled,
            failed: c.failed,
            dead_lettered: c.dead_lettered,
            retries: c.retries,
            batches: c.batches,
            pauses: c.pauses,
            resumes: c.resumes,
            dropped: c.dropped,
            abandoned: c.abandoned,
        }
    }
}

/// A snapshot of one assigned partition.
#[pyclass(
    name = "PartitionStats",
    module = "ferrokafka._native",
    frozen,
    get_all
)]
pub struct PyPartitionStats {
    topic: String,
    partition: i32,
    /// Its worker id.
    worker: WorkerId,
    /// Records queued now.
    queued: usize,
    /// Bytes queued now.
    queued_bytes: usize,
    /// Whether load control holds the partition (its queue is full: not polled).
    paused: bool,
    /// Records in the batch being handled now.
    in_flight: usize,
    /// Next offset to commit: one past the last record of the last finished batch.
    position: Option<i64>,
    /// The last offset the broker confirmed committed.
    committed: Option<i64>,
    /// Counters since the partition was assigned.
    counters: Py<PyConsumerCounters>,
    /// librdkafka's latest statistics of the partition; None until the first arrived.
    broker: Option<Py<PyBrokerOffsets>>,
    /// Offset of the first record received since the assignment.
    first_received: Option<i64>,
}

#[pymethods]
impl PyPartitionStats {
    /// The partition's figures and counters in one flat dict; `broker` a dict or None.
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = self.counters.get().as_dict(py)?;
        dict.set_item("topic", &self.topic)?;
        dict.set_item("partition", self.partition)?;
        dict.set_item("worker", self.worker)?;
        dict.set_item("queued", self.queued)?;
        dict.set_item("queued_bytes", self.queued_bytes)?;
        dict.set_item("paused", self.paused)?;
        dict.set_item("in_flight", self.in_flight)?;
        dict.set_item("position", self.position)?;
        dict.set_item("committed", self.committed)?;
        let broker = match &self.broker {
            Some(broker) => Some(broker.get().as_dict(py)?),
            None => None,
        };
        dict.set_item("broker", broker)?;
        dict.set_item("first_received", self.first_received)?;
        Ok(dict)
    }
}

/// A snapshot of the whole consumer.
#[pyclass(name = "ConsumerStats", module = "ferrokafka._native", frozen, get_all)]
pub struct PyConsumerStats {
    /// Counters over the consumer's life, including partitions no longer assigned.
    counters: Py<PyConsumerCounters>,
    /// Commit requests answered successfully.
    commits: u64,
    /// Commit requests that failed.
    commit_errors: u64,
    /// Assigned partitions, ordered by topic and partition.
    partitions: Vec<Py<PyPartitionStats>>,
    /// The group's state from the latest statistics; None without a group or statistics.
    group: Option<Py<PyGroupStatistics>>,
    /// Seconds since the poller last returned from librdkafka's poll; None before the first.
    poll_age: Option<f64>,
    /// Bytes per second received from the brokers between the latest two statistics.
    bytes_received: Option<u64>,
    /// Bytes per second sent to the brokers between the latest two statistics.
    bytes_sent: Option<u64>,
}

#[pymethods]
impl PyConsumerStats {
    /// The dict `Consumer.stats()` returns: the counters, commits, commit_errors, poll_age,
    /// bytes_received, bytes_sent, `group` (a dict or None) and `partitions` (one flat dict
    /// each, see `PartitionStats.as_dict`).
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = self.counters.get().as_dict(py)?;
        dict.set_item("commits", self.commits)?;
        dict.set_item("commit_errors", self.commit_errors)?;
        let partitions = self
            .partitions
            .iter()
            .map(|p| p.get().as_dict(py))
            .collect::<PyResult<Vec<_>>>()?;
        dict.set_item("partitions", partitions)?;
        let group = match &self.group {
            Some(group) => Some(group.get().as_dict(py)?),
            None => None,
        };
        dict.set_item("group", group)?;
        dict.set_item("poll_age", self.poll_age)?;
        dict.set_item("bytes_received", self.bytes_received)?;
        dict.set_item("bytes_sent", self.bytes_sent)?;
        Ok(dict)
    }
}

fn partition_stats(py: Python<'_>, p: PartitionStats) -> PyResult<PyPartitionStats> {
    Ok(PyPartitionStats {
        topic: p.topic,
        partition: p.partition,
        worker: p.worker,
        queued: p.queued,
        queued_bytes: p.queued_bytes,
        paused: p.paused,
        in_flight: p.in_flight,
        position: p.position,
        committed: p.committed,
        counters: Py::new(py, PyConsumerCounters::from(p.counters))?,
        broker: record_of(py, p.broker)?,
        first_received: p.first_received,
    })
}

/// The typed Python object of the engine's `stats`.
pub(crate) fn consumer_stats(py: Python<'_>, s: ConsumerStats) -> PyResult<PyConsumerStats> {
    let (bytes_received, bytes_sent) = s.transfer_rates.unzip();
    Ok(PyConsumerStats {
        counters: Py::new(py, PyConsumerCounters::from(s.totals))?,
        commits: s.commits,
        commit_errors: s.commit_errors,
        partitions: s
            .partitions
            .into_iter()
            .map(|p| Py::new(py, partition_stats(py, p)?))
            .collect::<PyResult<_>>()?,
        group: record_of(py, s.group)?,
        poll_age: s.poll_age.map(|age| age.as_secs_f64()),
        bytes_received,
        bytes_sent,
    })
}
