//! `_RawConsumer`: the native half of `ferrokafka.Consumer` and `ferrokafka.AsyncConsumer`.
//!
//! GIL: creating the engine (which may ask the broker for watermarks and offsets) and every wait
//! (`fetch` with a timeout, `poll_events`, `stop`) run detached, in slices of at most `SLICE` with
//! signal checks between them. `ack`, `fail`, `stats` and a `fetch` that finds a batch ready are
//! O(1) or O(batch) in memory and stay attached. A fetched batch stays in Rust memory (`Batch`);
//! its records become `Message` objects only when the handler reaches them. Python handlers never
//! run here: the wrapper's worker threads (or asyncio tasks) call `fetch`/`ack`, and its
//! dispatcher thread calls `poll_events`.

use std::sync::Arc;
use std::time::Duration;

use ferrokafka_kafka::{
    Assignment, ConcurrentConsumer, ConsumerEvent, ConsumerOptions, ErrorPolicy, Failure, Fetched,
    OnError, OrderBy, Outcome, PartitionCounters, StartAt, Subscription, Verdict, WorkerId,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::batch::PyBatch;
use crate::blocking::{EventInbox, ForkGuard, ReleaseOnDrop, SLICE, seconds_or_off, timeout_arg};
use crate::convert::settings_from_dict;
use crate::errors::{NativeError, NativeResult};

/// The native concurrent consumer engine; use `ferrokafka.Consumer` or `ferrokafka.AsyncConsumer`.
#[pyclass(name = "_RawConsumer", module = "ferrokafka._native", frozen)]
#[derive(Debug)]
pub struct PyRawConsumer {
    engine: ReleaseOnDrop<Arc<ConcurrentConsumer>>,
    events: EventInbox<ConsumerEvent>,
    guard: ForkGuard,
}

/// One subscription: a topic name, or `(topic, partition, kind, value)` with kind one of
/// `stored`, `beginning`, `end`, `offset`, `timestamp` (the wrapper normalises user input).
fn subscription(item: &Bound<'_, PyAny>) -> PyResult<Subscription> {
    if let Ok(topic) = item.cast::<PyString>() {
        return Ok(Subscription::Topic(topic.to_str()?.to_owned()));
    }
    let (topic, partition, kind, value): (String, i32, String, i64) =
        item.extract().map_err(|_| {
            PyTypeError::new_err(
                "each subscription must be a topic name or (topic, partition, kind, value)",
            )
        })?;
    let start = match kind.as_str() {
        "stored" => StartAt::Stored,
        "beginning" => StartAt::Beginning,
        "end" => StartAt::End,
        "offset" => StartAt::Offset(value),
        "timestamp" => StartAt::Timestamp(value),
        other => {
            return Err(PyValueError::new_err(format!(
                "subscription start must be stored, beginning, end, offset or timestamp, got \
                 {other:?}"
            )));
        }
    };
    Ok(Subscription::Partition {
        topic,
        partition,
        start,
    })
}

fn outcome(name: &str) -> PyResult<Outcome> {
    match name {
        "handled" => Ok(Outcome::Handled),
        "abandoned" => Ok(Outcome::Abandoned),
        other => Err(PyValueError::new_err(format!(
            "outcome must be 'handled' or 'abandoned', got {other:?}"
        ))),
    }
}

fn ordering(name: &str) -> PyResult<OrderBy> {
    match name {
        "partition" => Ok(OrderBy::Partition),
        "key" => Ok(OrderBy::Key),
        other => Err(PyValueError::new_err(format!(
            "ordering must be 'partition' or 'key', got {other:?}"
        ))),
    }
}

/// The engine's id of a fetched batch: its first offset.
fn batch_id(batch: &PyBatch) -> PyResult<i64> {
    batch
        .first_offset()
        .ok_or_else(|| PyValueError::new_err("an empty batch has nothing to acknowledge"))
}

fn on_error(name: &str) -> PyResult<OnError> {
    match name {
        "commit" => Ok(OnError::Commit),
        "retry" => Ok(OnError::Retry),
        "dead_letter" => Ok(OnError::DeadLetter),
        other => Err(PyValueError::new_err(format!(
            "on_error must be 'commit', 'retry' or 'dead_letter', got {other:?}"
        ))),
    }
}

fn counters_into(dict: &Bound<'_, PyDict>, c: &PartitionCounters) -> PyResult<()> {
    for (name, value) in [
        ("received", c.received),
        ("handled", c.handled),
        ("failed", c.failed),
        ("dead_lettered", c.dead_lettered),
        ("retries", c.retries),
        ("batches", c.batches),
        ("pauses", c.pauses),
        ("resumes", c.resumes),
        ("dropped", c.dropped),
        ("abandoned", c.abandoned),
    ] {
        dict.set_item(name, value)?;
    }
    Ok(())
}

fn assignments(partitions: Vec<Assignment>) -> Vec<(String, i32, WorkerId)> {
    partitions
        .into_iter()
        .map(|a| (a.topic, a.partition, a.worker))
        .collect()
}

/// An event as a tuple `(name, ...)`, in the shape the Python dispatcher expects.
fn event_tuple(py: Python<'_>, event: ConsumerEvent) -> PyResult<Py<PyTuple>> {
    let tuple = match event {
        ConsumerEvent::Assigned(partitions) => {
            ("assigned", assignments(partitions)).into_pyobject(py)?
        }
        ConsumerEvent::Draining {
            partitions,
            dropped,
        } => ("draining", assignments(partitions), dropped).into_pyobject(py)?,
        ConsumerEvent::Unassigned { partitions, lost } => {
            ("unassigned", assignments(partitions), lost).into_pyobject(py)?
        }
        ConsumerEvent::CaughtUp {
            topic,
            partition,
            offset,
        } => ("caught_up", topic, partition, offset).into_pyobject(py)?,
        ConsumerEvent::LoadControl {
            topic,
            partition,
            paused,
            queued,
            queued_bytes,
        } => (
            if paused { "paused" } else { "resumed" },
            topic,
            partition,
            queued,
            queued_bytes,
        )
            .into_pyobject(py)?,
        ConsumerEvent::Committed { offsets, error } => {
            let error = error.map(|e| PyErr::from(NativeError::Kafka(e)).into_value(py));
            ("commit", offsets, error).into_pyobject(py)?
        }
        ConsumerEvent::Error(error) => {
            let exception = PyErr::from(NativeError::Kafka(error)).into_value(py);
            ("error", exception).into_pyobject(py)?
        }
    };
    Ok(tuple.unbind())
}

#[pymethods]
impl PyRawConsumer {
    #[new]
    #[pyo3(signature = (config, subscriptions, max_batch_size, commit_interval, max_queue_records, max_queue_bytes, drain, on_error, max_retries, retry_backoff, max_retry_backoff, dead_letter_topic, ordering, max_concurrency))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyDict>,
        subscriptions: &Bound<'_, PyAny>,
        max_batch_size: Option<usize>,
        commit_interval: f64,
        max_queue_records: usize,
        max_queue_bytes: usize,
        drain: f64,
        on_error: &str,
        max_retries: u32,
        retry_backoff: f64,
        max_retry_backoff: f64,
        dead_letter_topic: Option<String>,
        ordering: &str,
        max_concurrency: usize,
    ) -> NativeResult<Self> {
        let settings = settings_from_dict(config)?;
        let subscriptions = subscriptions
            .try_iter()?
            .map(|item| subscription(&item?))
            .collect::<PyResult<Vec<_>>>()?;
        let options = ConsumerOptions {
            subscriptions,
            max_batch_size,
            commit_interval: timeout_arg("commit_interval", commit_interval)?,
            max_queue_records,
            max_queue_bytes,
            errors: ErrorPolicy {
                on_error: self::on_error(on_error)?,
                max_retries,
                retry_backoff: seconds_or_off("retry_backoff", retry_backoff)?,
                max_retry_backoff: seconds_or_off("max_retry_backoff", max_retry_backoff)?,
                dead_letter_topic,
            },
            ordering: self::ordering(ordering)?,
            max_concurrency,
        };
        let drain = seconds_or_off("drain", drain)?;
        // Assigning explicit partitions may ask the broker for offsets and watermarks.
        let engine = py.detach(move || ConcurrentConsumer::new(settings, options, drain))?;
        let events = engine.take_events();
        Ok(PyRawConsumer {
            engine: ReleaseOnDrop::new(engine),
            events: EventInbox::new(events),
            guard: ForkGuard::new("ferrokafka.Consumer"),
        })
    }

    /// The next batch of `worker`'s partition (empty when nothing came within `timeout`), or
    /// `None` once the partition is no longer the worker's.
    fn fetch(
        &self,
        py: Python<'_>,
        worker: WorkerId,
        timeout: f64,
    ) -> NativeResult<Option<PyBatch>> {
        self.guard.check()?;
        let wait = seconds_or_off("timeout", timeout)?.min(SLICE);
        // A ready batch is taken attached: releasing the GIL for it would hand the GIL to
        // another partition's worker and queue this one behind it, once per batch.
        let fetched = match self.engine.fetch(worker, Duration::ZERO)? {
            Fetched::Empty if !wait.is_zero() => {
                let engine = Arc::clone(&*self.engine);
                py.detach(move || engine.fetch(worker, wait))?
            }
            fetched => fetched,
        };
        Ok(match fetched {
            Fetched::Gone => None,
            Fetched::Empty => Some(PyBatch::new(Arc::default())),
            Fetched::Batch(records) => Some(PyBatch::new(records)),
        })
    }

    /// Marks `worker`'s `batch` finished; false when it no longer counts (abandoned or revoked).
    fn ack(
        &self,
        worker: WorkerId,
        batch: PyRef<'_, PyBatch>,
        outcome_name: &str,
    ) -> PyResult<bool> {
        let first = batch_id(&batch)?;
        Ok(self.engine.ack(worker, first, outcome(outcome_name)?))
    }

    /// Applies the error policy to `worker`'s `batch`, whose handler raised: seconds to wait
    /// before calling the handler again with it, or `None` when the batch is settled
    /// (committed, dead-lettered or abandoned).
    fn fail(
        &self,
        worker: WorkerId,
        batch: PyRef<'_, PyBatch>,
        error_class: String,
        error_message: String,
    ) -> PyResult<Option<f64>> {
        let failure = Failure {
            class: error_class,
            message: error_message,
        };
        Ok(match self.engine.fail(worker, batch_id(&batch)?, failure) {
            Verdict::Retry(wait) => Some(wait.as_secs_f64()),
            Verdict::Settled => None,
        })
    }

    /// Waits up to `timeout` seconds for events and returns at most `max_events` of them.
    #[pyo3(signature = (timeout, max_events=10_000))]
    fn poll_events(
        &self,
        py: Python<'_>,
        timeout: f64,
        max_events: usize,
    ) -> NativeResult<Vec<Py<PyTuple>>> {
        let wait = seconds_or_off("timeout", timeout)?.min(SLICE);
        let events = self.events.drain(py, wait, max_events);
        events
            .into_iter()
            .map(|event| event_tuple(py, event))
            .collect::<PyResult<_>>()
            .map_err(NativeError::from)
    }

    /// Stops: drops queued records, gives running batches `drain` seconds, commits what
    /// finished, and closes the consumer. Waits for all of it; calling again is a no-op.
    fn stop(&self, py: Python<'_>, drain: f64) -> NativeResult<()> {
        self.guard.check()?;
        self.engine.begin_stop(seconds_or_off("drain", drain)?);
        loop {
            let engine = Arc::clone(&*self.engine);
            if py.detach(move || engine.wait_stopped(SLICE)) {
                return Ok(());
            }
            py.check_signals()?;
        }
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.engine.stats();
        let stats = PyDict::new(py);
        counters_into(&stats, &s.totals)?;
        stats.set_item("commits", s.commits)?;
        stats.set_item("commit_errors", s.commit_errors)?;
        let partitions = PyList::empty(py);
        for p in s.partitions {
            let entry = PyDict::new(py);
            entry.set_item("topic", p.topic)?;
            entry.set_item("partition", p.partition)?;
            entry.set_item("worker", p.worker)?;
            entry.set_item("queued", p.queued)?;
            entry.set_item("queued_bytes", p.queued_bytes)?;
            entry.set_item("paused", p.paused)?;
            entry.set_item("in_flight", p.in_flight)?;
            entry.set_item("position", p.position)?;
            entry.set_item("committed", p.committed)?;
            counters_into(&entry, &p.counters)?;
            let broker = match p.broker {
                Some(b) => {
                    let offsets = PyDict::new(py);
                    offsets.set_item("lo_offset", b.lo_offset)?;
                    offsets.set_item("hi_offset", b.hi_offset)?;
                    offsets.set_item("ls_offset", b.ls_offset)?;
                    offsets.set_item("committed_offset", b.committed_offset)?;
                    offsets.set_item("stored_offset", b.stored_offset)?;
                    offsets.set_item("next_offset", b.next_offset)?;
                    offsets.set_item("fetch_state", b.fetch_state)?;
                    offsets.set_item("eof_offset", b.eof_offset)?;
                    offsets.set_item("partitions_cnt", b.partitions_cnt)?;
                    offsets.set_item("lag", b.lag.value)?;
                    offsets.set_item("lag_d", b.lag.delta)?;
                    offsets.set_item("lag_stored", b.lag_stored.value)?;
                    offsets.set_item("lag_stored_d", b.lag_stored.delta)?;
                    offsets.set_item("committed_offset_fd", b.committed.frozen_ms)?;
                    offsets.set_item("stored_offset_fd", b.stored.frozen_ms)?;
                    offsets.set_item("hi_offset_fd", b.hi.frozen_ms)?;
                    offsets.set_item("ls_offset_d", b.ls.delta)?;
                    offsets.set_item("ls_offset_fd", b.ls.frozen_ms)?;
                    Some(offsets)
                }
                None => None,
            };
            entry.set_item("broker", broker)?;
            entry.set_item("first_received", p.first_received)?;
            partitions.append(entry)?;
        }
        stats.set_item("partitions", partitions)?;
        let group = match s.group {
            Some(g) => {
                let group = PyDict::new(py);
                group.set_item("state", g.state)?;
                group.set_item("join_state", g.join_state)?;
                group.set_item("stateage", g.stateage)?;
                group.set_item("rebalance_age", g.rebalance_age)?;
                group.set_item("rebalance_cnt", g.rebalance_cnt)?;
                group.set_item("rebalance_reason", g.rebalance_reason)?;
                Some(group)
            }
            None => None,
        };
        stats.set_item("group", group)?;
        stats.set_item("poll_age", s.poll_age.map(|age| age.as_secs_f64()))?;
        let (received, sent) = s.transfer_rates.unzip();
        stats.set_item("bytes_received", received)?;
        stats.set_item("bytes_sent", sent)?;
        Ok(stats)
    }
}
