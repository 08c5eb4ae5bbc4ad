//! `_RawQueueConsumer` and `_RawRedeliveryTracker`: the native halves of
//! `ferrokafka.redelivery.QueueConsumer` and `RedeliveryTracker`.
//!
//! GIL: `fetch`, `flush`, `close` and `wait` wait detached in slices of at most [`SLICE`] and
//! check for signals between slices. `ack`, `ack_many`, `nack` and `keepalive` only hand markers to
//! librdkafka's queue and stay attached (detaching would cost more than they do). Engines sit
//! behind an `Arc` so that a detached call never borrows from the pyclass, and are dropped
//! without the GIL ([`ReleaseOnDrop`]): dropping joins threads that may be logging through
//! `pyo3-log`. A tracker collected while running is stopped first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ferrokafka_core::markers::MessageId;
use ferrokafka_kafka::redelivery::{dead_letter_headers, redelivery_count};
use ferrokafka_kafka::{
    KafkaIoError, QueueConsumer, QueueConsumerOptions, RedeliveryOptions, RedeliveryTracker, Taken,
    TrackerPartitionStatus,
};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::blocking::{ForkGuard, TimeoutArg, timeout_arg, wait_sliced};
use crate::convert;
use crate::daemon_class::daemon_class;
use crate::engine_drops::ReleaseOnDrop;
use crate::errors::{NativeResult, refused_message, wrong_type};
use crate::message::PyMessage;
use crate::options::{Config, Fields, FromKeywords, Keywords, build_engine};
use crate::redelivery_status::{
    PyQueueConsumerStats, PyRedeliveryPartitionStatus, tracker_partition_status,
};

/// The topics and group both engines name: `(queue_topic, markers_topic, group_id)`.
fn topics_and_group(fields: &Fields<'_, '_>) -> PyResult<(String, String, String)> {
    let queue_topic = fields.text("queue_topic")?;
    let markers_topic = fields.text("markers_topic")?;
    Ok((queue_topic, markers_topic, fields.text("group_id")?))
}

/// The keyword arguments of `QueueConsumer` (markers backend) the engine takes.
impl FromKeywords for QueueConsumerOptions {
    fn read(fields: &Fields<'_, '_>) -> PyResult<Self> {
        let (queue_topic, markers_topic, group_id) = topics_and_group(fields)?;
        Ok(QueueConsumerOptions {
            redelivery_timeout: fields.seconds("redelivery_timeout")?,
            marker_timeout: fields.seconds("marker_timeout")?,
            max_batch_size: fields.count("max_batch_size")?,
            auto_keepalive: fields.flag("auto_keepalive")?,
            dead_letter_topic: fields.optional_text("dead_letter_topic")?,
            queue_topic,
            markers_topic,
            group_id,
        })
    }
}

/// The keyword arguments of `RedeliveryTracker` the engine takes.
impl FromKeywords for RedeliveryOptions {
    fn read(fields: &Fields<'_, '_>) -> PyResult<Self> {
        let (queue_topic, markers_topic, group_id) = topics_and_group(fields)?;
        Ok(RedeliveryOptions {
            max_redeliveries: fields.count("max_redeliveries")?,
            dead_letter_topic: fields.optional_text("dead_letter_topic")?,
            use_now_if_no_marker_seen: fields.seconds("use_now_if_no_marker_seen")?,
            num_offsets_per_commit: fields.count("num_offsets_per_commit")?,
            commit_interval: fields.seconds("commit_interval")?,
            max_backoff: fields.seconds("max_backoff")?,
            produce_timeout: fields.seconds("produce_timeout")?,
            queue_topic,
            markers_topic,
            group_id,
        })
    }
}

/// The native queue consumer; use `ferrokafka.redelivery.QueueConsumer`.
#[pyclass(name = "_RawQueueConsumer", module = "ferrokafka._native", frozen)]
#[derive(Debug)]
pub struct PyRawQueueConsumer {
    engine: Mutex<Option<ReleaseOnDrop<Arc<QueueConsumer>>>>,
    /// A close began (`stop_handing_out`): fetches end, though acks are still taken.
    closing: AtomicBool,
    /// `close` was called: a second call returns at once.
    close_begun: AtomicBool,
    guard: ForkGuard,
}

impl PyRawQueueConsumer {
    fn is_closed(&self) -> bool {
        self.closing.load(Ordering::Acquire)
            || self
                .engine
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_none()
    }

    fn engine(&self) -> NativeResult<Arc<QueueConsumer>> {
        self.guard.check()?;
        let engine = self.engine.lock().unwrap_or_else(|p| p.into_inner());
        engine
            .as_ref()
            .map(|engine| Arc::clone(engine))
            .ok_or_else(|| KafkaIoError::Closed("QueueConsumer").into())
    }
}

#[pymethods]
impl PyRawQueueConsumer {
    #[new]
    #[pyo3(signature = (config, **options))]
    fn new(py: Python<'_>, config: Config, options: Option<Keywords>) -> NativeResult<Self> {
        let engine = build_engine(py, config, options, QueueConsumer::new)?;
        Ok(PyRawQueueConsumer {
            engine: Mutex::new(Some(ReleaseOnDrop::new(Arc::new(engine)))),
            closing: AtomicBool::new(false),
            close_begun: AtomicBool::new(false),
            guard: ForkGuard::new("ferrokafka.redelivery.QueueConsumer"),
        })
    }

    /// Up to `max_messages` messages whose START markers are written and offsets committed;
    /// `[]` when none came within `timeout` seconds (None: wait until one comes). A message
    /// whose START the markers topic refused for good (and no dead-letter topic took) is raised
    /// as `MarkerRefusedError` carrying it.
    #[pyo3(signature = (max_messages, timeout=None))]
    fn fetch(
        &self,
        py: Python<'_>,
        max_messages: usize,
        timeout: Option<TimeoutArg>,
    ) -> NativeResult<Vec<Py<PyMessage>>> {
        let timeout = timeout.map(|TimeoutArg(s)| s);
        let engine = self.engine()?;
        let fetched = wait_sliced(py, timeout, |slice| {
            // A `close` from another thread ends a wait that would otherwise never end.
            if self.is_closed() {
                return Some(Err(KafkaIoError::Closed("QueueConsumer")));
            }
            match engine.fetch(max_messages, slice) {
                Ok(Taken::Records(records)) if records.is_empty() => None,
                other => Some(other),
            }
        });
        // After a concurrent `close` this may be the last reference: drop it without the GIL.
        py.detach(move || drop(engine));
        match fetched?.transpose()? {
            None => Ok(Vec::new()),
            Some(Taken::Records(records)) => Ok(PyMessage::untracked_all(py, records)?),
            Some(Taken::Refused(refused)) => {
                let message = PyMessage::from(refused.record).into_untracked(py)?;
                Err(refused_message(py, refused.error, message.into_any())?.into())
            }
        }
    }

    /// The END marker of one message: the README's `for job in queue: ... queue.ack(job)` loop
    /// crosses here once per message, without a list around it.
    fn ack(&self, message: Bound<'_, PyAny>) -> NativeResult<()> {
        let (partition, offset) = queue_position(&message)?;
        Ok(self.engine()?.ack(partition, offset)?)
    }

    /// One call (one lock, no GIL release) for a whole batch of END markers.
    fn ack_many(&self, messages: Vec<Bound<'_, PyAny>>) -> NativeResult<()> {
        let positions = messages
            .iter()
            .map(queue_position)
            .collect::<PyResult<Vec<_>>>()?;
        Ok(self.engine()?.ack_many(&positions)?)
    }

    fn nack(&self, message: Bound<'_, PyAny>, now: bool) -> NativeResult<()> {
        let (partition, offset) = queue_position(&message)?;
        Ok(self.engine()?.nack(partition, offset, now)?)
    }

    fn keepalive(&self, message: Bound<'_, PyAny>) -> NativeResult<()> {
        let (partition, offset) = queue_position(&message)?;
        Ok(self.engine()?.keepalive(partition, offset)?)
    }

    /// Waits until every END/KEEPALIVE marker so far is acknowledged; TimeoutError after
    /// `timeout` seconds.
    fn flush(&self, py: Python<'_>, timeout: TimeoutArg) -> NativeResult<()> {
        let TimeoutArg(timeout) = timeout;
        let engine = self.engine()?;
        let flushed = wait_sliced(py, Some(timeout), |slice| engine.flush(slice).ok())?;
        match flushed {
            Some(()) => Ok(()),
            None => Err(KafkaIoError::timed_out(
                "QueueConsumer.flush",
                timeout_arg("timeout", timeout)?,
                None,
            )
            .into()),
        }
    }

    /// A close begins: fetches under way end within a slice and raise `ClosedError`, and no
    /// fetch hands out anything from now on; acks are still taken.
    fn stop_handing_out(&self) -> NativeResult<()> {
        self.closing.store(true, Ordering::Release);
        if let Ok(engine) = self.engine() {
            engine.stop_handing_out();
        }
        Ok(())
    }

    /// Puts back on the queue the messages marked and never handed out (those the engine held
    /// and `not_handed_out`, fetched by the caller and kept) and waits for the markers, within
    /// `timeout` seconds (logging what was not written), then closes the consumer; idempotent.
    #[pyo3(signature = (timeout, not_handed_out=Vec::new()))]
    fn close(
        &self,
        py: Python<'_>,
        timeout: TimeoutArg,
        not_handed_out: Vec<PyRef<'_, PyMessage>>,
    ) -> NativeResult<()> {
        self.guard.check()?;
        let wait = timeout.duration()?;
        self.closing.store(true, Ordering::Release);
        if self.close_begun.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // The engine stays in place while it closes: a handler finishing its message meanwhile
        // (another thread's loop) still acks it.
        let Ok(engine) = self.engine() else {
            return Ok(());
        };
        let kept = not_handed_out.iter().map(|m| m.to_record()).collect();
        py.detach(move || engine.close(kept, wait));
        let taken = self.engine.lock().unwrap_or_else(|p| p.into_inner()).take();
        // The drop leaves the group without the GIL.
        drop(taken);
        Ok(())
    }

    fn stats(&self) -> NativeResult<PyQueueConsumerStats> {
        Ok(self.engine()?.stats().into())
    }
}

/// Partition and offset of a message: read straight from a `Message` that `fetch` handed out
/// (a batch costs no Python calls), else through its `partition()` and `offset()` methods; a
/// TypeError naming what is expected for anything else.
fn queue_position(message: &Bound<'_, PyAny>) -> PyResult<(i32, i64)> {
    if let Ok(fetched) = message.cast::<PyMessage>() {
        return Ok(fetched.get().position());
    }
    let read = || -> PyResult<(Option<i32>, Option<i64>)> {
        Ok((
            message.call_method0("partition")?.extract()?,
            message.call_method0("offset")?.extract()?,
        ))
    };
    let (partition, offset) = read().map_err(|_| {
        wrong_type(
            "QueueConsumer.ack, ack_many, nack and keepalive take the messages it handed out \
             (with partition() and offset())",
            message,
        )
    })?;
    Ok((partition.unwrap_or(0), offset.unwrap_or(0)))
}

/// How many times a queue message with these headers was redelivered (0 when its count header
/// is missing or unreadable), read as the tracker reads it: for both backends' messages.
#[pyfunction]
pub fn redelivery_count_in(headers: Option<&Bound<'_, PyAny>>) -> PyResult<u32> {
    Ok(redelivery_count(&convert::headers(headers)?))
}

/// The headers of a queue message's dead letter, as the tracker writes them: for the share
/// backend, whose dead letters confluent-kafka's producer writes.
#[pyfunction]
#[pyo3(signature = (headers, *, queue_topic, partition, offset, count))]
pub fn queue_dead_letter_headers<'py>(
    py: Python<'py>,
    headers: Option<&Bound<'py, PyAny>>,
    queue_topic: &str,
    partition: u32,
    offset: u64,
    count: u32,
) -> PyResult<Vec<(String, Option<Bound<'py, PyBytes>>)>> {
    let id = MessageId { partition, offset };
    let headers = dead_letter_headers(queue_topic, id, count, &convert::headers(headers)?);
    Ok(headers
        .into_iter()
        .map(|(name, value)| (name, value.map(|v| PyBytes::new(py, &v))))
        .collect())
}

daemon_class! {
    /// The native redelivery tracker daemon; use `ferrokafka.redelivery.RedeliveryTracker`.
    "_RawRedeliveryTracker" PyRawRedeliveryTracker for "ferrokafka.redelivery.RedeliveryTracker" {
        start: RedeliveryTracker::start,
        /// Per markers partition figures.
        status: TrackerPartitionStatus => PyRedeliveryPartitionStatus, by tracker_partition_status,
    }
}
