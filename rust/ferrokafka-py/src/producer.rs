//! `_RawAsyncProducer`: the native half of `ferrokafka.AsyncProducer`.
//!
//! GIL: `produce` of one record is O(1) and stays attached, except when the `block` policy has
//! to wait for room, which waits detached in slices with signal checks. `produce_many` converts
//! the whole batch while attached, then queues it in one pass. Event draining, `flush` and
//! `shutdown` wait detached. Delivery results are settled here (see `producer_waiters`): the
//! Python wrapper's dispatcher thread calls `poll_events`, which calls the `on_delivery`
//! callbacks and completes the futures of the drained records, attached, on that thread.

use std::collections::VecDeque;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokafka_core::batch::{OverflowLimit, OverflowPolicy};
use ferrokafka_kafka::{
    AsyncProducer, AsyncProducerOptions, OutgoingRecord, Pending, ProducerEvent, Refusal,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::blocking::{
    EventInbox, ForkGuard, SLICE, TimeoutArg, seconds_or_off, timeout_arg, wait_sliced,
};
use crate::convert::{self, PartitionArg, TimestampArg, optional_bytes, outgoing_record};
use crate::engine_drops::{ReleaseOnDrop, release_gil_for};
use crate::errors::{
    NativeResult, buffer_overflow, invalid_argument, malformed, not_callable, producer_closed,
    wrong_type,
};
use crate::flat_record::flat_record;
use crate::message::PyMessage;
use crate::options::{Config, Fields, FromKeywords, Keywords, build_engine};
use crate::producer_events::{event_object, message_of};
use crate::producer_waiters::{Delivered, Waiter, Waiters, hand_over_all, settle};

/// The native background producer; use `ferrokafka.AsyncProducer`.
#[pyclass(name = "_RawAsyncProducer", module = "ferrokafka._native", frozen)]
#[derive(Debug)]
pub struct PyRawAsyncProducer {
    engine: ReleaseOnDrop<Arc<AsyncProducer>>,
    events: EventInbox<ProducerEvent>,
    waiters: Waiters,
    guard: ForkGuard,
}

/// The overflow policies by name.
const OVERFLOW_POLICIES: [(&str, OverflowPolicy); 3] = [
    ("raise", OverflowPolicy::Raise),
    ("block", OverflowPolicy::Block),
    ("drop_oldest", OverflowPolicy::DropOldest),
];

/// The keyword arguments of `AsyncProducer` the engine takes.
impl FromKeywords for AsyncProducerOptions {
    fn read(fields: &Fields<'_, '_>) -> PyResult<Self> {
        Ok(AsyncProducerOptions {
            max_queue_size: fields.count("max_queue_size")?,
            max_queue_bytes: fields.count("max_queue_bytes")?,
            overflow: fields.choice("overflow", &OVERFLOW_POLICIES)?,
            block_timeout: fields.seconds("block_timeout")?,
            delivery_threshold: fields.count("delivery_threshold")?,
            delivery_interval: fields.seconds_or_off("delivery_interval")?,
            max_retries: fields.int("max_retries")?,
            retry_backoff: fields.seconds_or_off("retry_backoff")?,
            partition_key_hashing: fields.partition_key_hashing()?,
        })
    }
}

impl PyRawAsyncProducer {
    /// Queues `items` in order under the overflow policy; returns how many were queued, and the
    /// queue size right after the last one went in or the refusal. For a `batch`
    /// (`produce_many`) the calling thread, detached, moves what is due to librdkafka itself
    /// instead of waking the worker, and a `BufferOverflow` says how many of the batch were
    /// queued before it (message and `accepted`), so the caller knows which to send again.
    fn enqueue(
        &self,
        py: Python<'_>,
        items: VecDeque<Box<Pending>>,
        batch: bool,
    ) -> (usize, NativeResult<usize>) {
        let mut accepted = 0;
        let result = self.enqueue_counting(py, items, batch, &mut accepted);
        (accepted, result)
    }

    fn enqueue_counting(
        &self,
        py: Python<'_>,
        mut items: VecDeque<Box<Pending>>,
        batch: bool,
        accepted: &mut usize,
    ) -> NativeResult<usize> {
        let options = self.engine.options();
        // Read the clock only once the queue is full: most calls never block.
        let mut deadline = None;
        let hand_off = |py: Python<'_>| {
            if batch {
                let engine = Arc::clone(&*self.engine);
                py.detach(move || engine.hand_off_due());
            }
        };
        loop {
            let (queued, queue_size, refusal) = self.engine.try_produce(&mut items, batch);
            *accepted += queued;
            hand_off(py);
            let overflow = match refusal {
                None => return Ok(queue_size),
                Some(Refusal::Closed(_)) => {
                    return Err(producer_closed().into());
                }
                Some(Refusal::Fatal(_, error)) => return Err(error.into()),
                Some(Refusal::Overflow(overflow)) => overflow,
            };
            let blocking = options.overflow == OverflowPolicy::Block
                && !matches!(overflow.limit, OverflowLimit::ItemTooLarge { .. });
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + options.block_timeout);
            if blocking && now < deadline {
                items.push_front(overflow.item);
                let engine = Arc::clone(&*self.engine);
                let wait = deadline
                    .saturating_duration_since(Instant::now())
                    .min(SLICE);
                py.detach(move || engine.wait_for_room(wait));
                py.check_signals()?;
                continue;
            }
            self.engine.count_overflow();
            let topic = overflow.item.record.topic.clone();
            let waited = if blocking {
                format!(
                    " after blocking {:.1} s",
                    options.block_timeout.as_secs_f64()
                )
            } else {
                String::new()
            };
            let mut message = format!("cannot produce to {topic:?}: {}{waited}", overflow.limit);
            let accepted = batch.then_some(*accepted);
            if let Some(accepted) = accepted {
                let refused = 1 + items.len();
                message.push_str(&format!(
                    "; the batch's first {accepted} record(s) were queued, the {refused} from \
                     index {accepted} on were not"
                ));
            }
            let limit = overflow.limit.to_string();
            return Err(buffer_overflow(message, topic, limit, accepted).into());
        }
    }
}

impl Drop for PyRawAsyncProducer {
    /// A producer collected without `shutdown()` still stops its worker (which holds the engine
    /// alive) and says how many messages that cost; it never hangs the collector.
    fn drop(&mut self) {
        if !self.guard.in_creator() {
            return; // a forked child: the parent's engine is not ours to stop (it is leaked)
        }
        let engine = Arc::clone(&*self.engine);
        release_gil_for(move || {
            let undelivered = engine.finish_shutdown();
            if !undelivered.is_empty() {
                log::error!(
                    "AsyncProducer collected without shutdown(): {} message(s) not delivered",
                    undelivered.len()
                );
            }
        });
    }
}

/// Converts one `produce_many` item: bytes/str (a value for `topic`), a `(value, key)` tuple, or
/// a dict with `value`, `key`, `topic`, `partition`, `partition_key`, `headers`, `timestamp`.
/// `topic` was checked once for the batch.
fn pending_of(item: &Bound<'_, PyAny>, topic: Option<&str>) -> PyResult<Box<Pending>> {
    let batch_topic = || {
        topic
            .map(str::to_owned)
            .ok_or_else(|| invalid_argument("records without a 'topic' need topic=..."))
    };
    let (record, partition_key) =
        if item.is_instance_of::<PyBytes>() || item.is_instance_of::<PyString>() {
            let record = OutgoingRecord {
                topic: batch_topic()?,
                value: optional_bytes("value", Some(item))?,
                ..OutgoingRecord::default()
            };
            (record, None)
        } else if let Ok(pair) = item.cast::<PyTuple>() {
            if pair.len() != 2 {
                return Err(malformed("a tuple record must be (value, key)"));
            }
            let record = OutgoingRecord {
                topic: batch_topic()?,
                value: optional_bytes("value", Some(&pair.get_item(0)?))?,
                key: optional_bytes("key", Some(&pair.get_item(1)?))?,
                ..OutgoingRecord::default()
            };
            (record, None)
        } else if let Ok(fields) = item.cast::<PyDict>() {
            let get = |name: &str| fields.get_item(name);
            let record_topic = match get("topic")? {
                Some(own) => own,
                None => PyString::new(item.py(), &batch_topic()?).into_any(),
            };
            let record = outgoing_record(
                &record_topic,
                get("value")?.as_ref(),
                get("key")?.as_ref(),
                get("partition")?
                    .map(|p| p.extract::<PartitionArg>())
                    .transpose()?,
                get("headers")?.as_ref(),
                get("timestamp")?
                    .map(|t| t.extract::<TimestampArg>())
                    .transpose()?,
            )?;
            let partition_key = convert::partition_key(get("partition_key")?.as_ref())?;
            refuse_unknown_fields(fields)?;
            (record, partition_key)
        } else {
            return Err(wrong_type(
                "each record must be bytes, str, a (value, key) tuple or a dict",
                item,
            ));
        };
    // Boxed once here: the engine moves the pointer until the record is handed to librdkafka.
    Ok(Box::new(Pending {
        record,
        partition_key,
        ticket: 0,
        failures: 0,
    }))
}

/// The fields a dict record of `produce_many` may have.
const RECORD_FIELDS: [&str; 7] = [
    "topic",
    "value",
    "key",
    "partition",
    "partition_key",
    "headers",
    "timestamp",
];

/// Refuses a dict record with a field that is not one of [`RECORD_FIELDS`]: a misspelled
/// `"vaule"` would otherwise send a record without its value (a tombstone, which deletes the key
/// on a compacted topic), a misspelled `"header"` drop the headers.
fn refuse_unknown_fields(fields: &Bound<'_, PyDict>) -> PyResult<()> {
    let unknown = convert::unknown_keys(fields, &RECORD_FIELDS);
    if unknown.is_empty() {
        return Ok(());
    }
    let unknown: Vec<String> = unknown
        .iter()
        .map(|key| {
            key.repr()
                .map_or_else(|_| "?".to_owned(), |r| r.to_string())
        })
        .collect();
    Err(malformed(format!(
        "a dict record has unknown field(s) {}; its fields are {}",
        unknown.join(", "),
        RECORD_FIELDS.join(", ")
    )))
}

#[pymethods]
impl PyRawAsyncProducer {
    #[new]
    #[pyo3(signature = (config, **options))]
    fn new(py: Python<'_>, config: Config, options: Option<Keywords>) -> NativeResult<Self> {
        let engine = build_engine(py, config, options, AsyncProducer::new)?;
        let events = engine.take_events();
        Ok(PyRawAsyncProducer {
            engine: ReleaseOnDrop::new(engine),
            events: EventInbox::new(events),
            waiters: Waiters::default(),
            guard: ForkGuard::new("ferrokafka.AsyncProducer"),
        })
    }

    /// `AsyncProducer.produce` itself, in its argument order: queues one record and returns at
    /// once; `on_delivery(error, message)` gets its delivery result. The wrapper binds it to the
    /// producer while no instrumentation subscriber needs the queue size, so a call costs no
    /// Python frame.
    #[pyo3(signature = (value, topic, key=None, partition=None, partition_key=None, headers=None, timestamp=None, on_delivery=None))]
    #[allow(clippy::too_many_arguments)]
    fn produce(
        &self,
        py: Python<'_>,
        value: Option<&Bound<'_, PyAny>>,
        topic: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        partition: Option<PartitionArg>,
        partition_key: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<TimestampArg>,
        on_delivery: Option<Py<PyAny>>,
    ) -> NativeResult<()> {
        self.queue(
            py,
            topic,
            value,
            key,
            partition,
            partition_key,
            headers,
            timestamp,
            on_delivery,
            None,
        )
        .map(drop)
    }

    /// Queues one record; `on_delivery` or `future` (a running `concurrent.futures.Future`)
    /// gets its delivery result. Returns the queue size right after it went in.
    #[pyo3(signature = (topic, value=None, key=None, partition=None, partition_key=None, headers=None, timestamp=None, on_delivery=None, future=None))]
    #[allow(clippy::too_many_arguments)]
    fn queue(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
        key: Option<&Bound<'_, PyAny>>,
        partition: Option<PartitionArg>,
        partition_key: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<TimestampArg>,
        on_delivery: Option<Py<PyAny>>,
        future: Option<Py<PyAny>>,
    ) -> NativeResult<usize> {
        self.guard.check()?;
        let record = outgoing_record(topic, value, key, partition, headers, timestamp)?;
        let partition_key = convert::partition_key(partition_key)?;
        let waiter = match (on_delivery, future) {
            (Some(callback), None) => {
                if !callback.bind(py).is_callable() {
                    return Err(not_callable("on_delivery", callback.bind(py)).into());
                }
                Some(Waiter::Callback(callback))
            }
            (None, Some(future)) => Some(Waiter::Future(future)),
            (None, None) => None,
            (Some(_), Some(_)) => {
                return Err(invalid_argument("pass on_delivery or future, not both").into());
            }
        };
        let ticket = match waiter {
            Some(waiter) => {
                // Registered before the worker can deliver the record.
                let ticket = self.engine.ticket();
                self.waiters.register(ticket, waiter);
                ticket
            }
            None => 0,
        };
        let pending = Box::new(Pending {
            record,
            partition_key,
            ticket,
            failures: 0,
        });
        let (_, queued) = self.enqueue(py, VecDeque::from([pending]), false);
        if queued.is_err() {
            self.waiters.forget(ticket);
        }
        queued
    }

    /// Queues a batch; returns how many records were queued and the queue size after them.
    /// `on_delivery(report)` gets one `DeliveryReport` once every queued record is settled.
    #[pyo3(signature = (records, topic=None, on_delivery=None))]
    fn produce_many(
        &self,
        py: Python<'_>,
        records: &Bound<'_, PyAny>,
        topic: Option<&Bound<'_, PyAny>>,
        on_delivery: Option<Py<PyAny>>,
    ) -> NativeResult<(usize, usize)> {
        self.guard.check()?;
        if let Some(callback) = &on_delivery
            && !callback.bind(py).is_callable()
        {
            return Err(not_callable("on_delivery", callback.bind(py)).into());
        }
        let topic: Option<String> = topic
            .map(|t| outgoing_record(t, None, None, None, None, None).map(|checked| checked.topic))
            .transpose()?;
        let topic = topic.as_deref();
        let mut batch: VecDeque<Box<Pending>> = if let Ok(list) = records.cast::<PyList>() {
            list.iter()
                .map(|item| pending_of(&item, topic))
                .collect::<PyResult<_>>()?
        } else {
            records
                .try_iter()?
                .map(|item| pending_of(&item?, topic))
                .collect::<PyResult<_>>()?
        };
        let Some(callback) = on_delivery else {
            let (accepted, queued) = self.enqueue(py, batch, true);
            return Ok((accepted, queued?));
        };
        // Registered before the worker can deliver a record; the report covers what is queued.
        let first = self.engine.batch_tickets(batch.len());
        self.waiters.register_batch(first, batch.len(), callback);
        for (pending, ticket) in batch.iter_mut().zip(first..) {
            pending.ticket = ticket;
        }
        let (accepted, queued) = self.enqueue(py, batch, true);
        let report = self.waiters.expect_batch(first, accepted, queued.is_err());
        hand_over_all(py, report)?;
        Ok((accepted, queued?))
    }

    fn deliver_messages(&self) -> PyResult<()> {
        self.guard.check()?;
        self.engine.deliver_messages();
        Ok(())
    }

    fn flush(&self, py: Python<'_>, timeout: TimeoutArg) -> NativeResult<()> {
        let TimeoutArg(timeout) = timeout;
        self.guard.check()?;
        let engine = &**self.engine;
        let flushed = wait_sliced(py, Some(timeout), |slice| {
            if engine.flush_step(slice) {
                Some(engine.fatal_error().map_or(Ok(()), Err))
            } else {
                engine.connection_failure("flush").map(Err)
            }
        })?;
        match flushed {
            Some(outcome) => Ok(outcome?),
            None => Err(engine
                .flush_timed_out(timeout_arg("timeout", timeout)?)
                .into()),
        }
    }

    /// Ends the wait of a `poll_events` running on another thread at once (see
    /// `AsyncProducer::wake_listener`).
    fn wake_listener(&self) -> NativeResult<()> {
        self.guard.check()?;
        self.engine.wake_listener();
        Ok(())
    }

    /// Waits up to `timeout` seconds for events, takes them `max_events` at a time, settles the
    /// delivery results among them (callbacks and futures, in the order the results came), and
    /// returns the events Python still handles (failures, drops, instrumentation). It returns as
    /// soon as there are such events, or once it found the inbox empty: so `[]` means every
    /// event so far was settled, which `flush` relies on (deliveries alone return no objects, and
    /// stopping after one full chunk of them left the rest unsettled).
    #[pyo3(signature = (timeout, max_events=10_000))]
    fn poll_events(
        &self,
        py: Python<'_>,
        timeout: f64,
        max_events: usize,
    ) -> NativeResult<Vec<Py<PyAny>>> {
        self.guard.check()?;
        let mut wait = seconds_or_off("timeout", timeout)?.min(SLICE);
        let max_events = max_events.max(1);
        let mut for_python = Vec::new();
        let mut delivered = Delivered::default();
        loop {
            let events = self.events.drain(py, wait, max_events);
            let inbox_emptied = events.len() < max_events;
            for event in events {
                let object = event_object(py, event, &self.engine, &self.waiters, &mut delivered)?;
                for_python.extend(object);
            }
            delivered.hand_over(py)?;
            if inbox_emptied || !for_python.is_empty() {
                return Ok(for_python);
            }
            wait = Duration::ZERO;
        }
    }

    /// Hands a record returned by `shutdown` to its waiter with the message's error.
    fn settle(&self, py: Python<'_>, ticket: u64, message: Py<PyMessage>) -> PyResult<()> {
        self.guard.check()?;
        let error = message.bind(py).call_method0("error")?;
        let outcome = if error.is_none() {
            let written = message.borrow(py);
            Ok((written.partition(), written.offset()))
        } else {
            Err(error.unbind())
        };
        let mut delivered = Delivered::default();
        settle(
            py,
            &self.waiters,
            ticket,
            outcome,
            || Ok(message),
            &mut delivered,
        )?;
        delivered.hand_over(py)
    }

    /// Delivers what is buffered, waits up to `timeout` seconds, then stops; returns the records
    /// that were never handed to Kafka. Records purged in flight arrive as "failed" events.
    fn shutdown(
        &self,
        py: Python<'_>,
        timeout: TimeoutArg,
    ) -> NativeResult<Vec<(u64, Py<PyMessage>)>> {
        let TimeoutArg(timeout) = timeout;
        // Refused before anything stops; a forked child's copy has no threads to stop (its
        // drop leaves the engine alone, see `ReleaseOnDrop`).
        self.guard.check()?;
        timeout_arg("timeout", timeout)?;
        self.engine.begin_shutdown();
        let engine = &**self.engine;
        // A refused connection ends the grace period: waiting longer delivers nothing.
        wait_sliced(py, Some(timeout), |slice| {
            (engine.flush_step(slice) || engine.connection_failure("produce").is_some())
                .then_some(())
        })?;
        let engine = Arc::clone(&*self.engine);
        let undelivered = py.detach(move || engine.finish_shutdown());
        let reason = self.engine.connection_failure("produce").unwrap_or(
            ferrokafka_kafka::KafkaIoError::Closed("the producer (shut down before delivery)"),
        );
        Ok(undelivered
            .into_iter()
            .map(|p| Ok((p.ticket, message_of(py, *p, Some(reason.clone()))?)))
            .collect::<PyResult<_>>()?)
    }

    fn stats(&self) -> PyResult<PyProducerStats> {
        // A forked child's copy would show the parent's counters as they were at the fork.
        self.guard.check()?;
        let s = self.engine.stats();
        Ok(PyProducerStats {
            enqueued: s.enqueued,
            delivered: s.delivered,
            failed: s.failed,
            retried: s.retried,
            dropped: s.dropped,
            overflowed: s.overflowed,
            deliveries: s.deliveries,
            queue_size: s.queue_size,
            queue_bytes: s.queue_bytes,
            in_flight: s.in_flight,
            retry_queue_size: s.retry_queue_size,
        })
    }
}

flat_record! {
    /// An AsyncProducer's counters and queue sizes. Every accepted record is delivered, failed,
    /// dropped, or counted in `queue_size + retry_queue_size + in_flight`.
    "ProducerStats" PyProducerStats {
        /// Records accepted by `produce` / `produce_many`.
        enqueued: u64,
        /// Records the broker acknowledged (after their transaction committed, if any).
        delivered: u64,
        /// Records handed back after their final failure.
        failed: u64,
        /// Re-sends after a failure.
        retried: u64,
        /// Records dropped by `drop_oldest`.
        dropped: u64,
        /// Records refused because the queue was full.
        overflowed: u64,
        /// Delivery rounds run.
        deliveries: u64,
        /// Records buffered now.
        queue_size: u64,
        /// Bytes buffered now.
        queue_bytes: u64,
        /// Records handed to librdkafka and not yet settled.
        in_flight: u64,
        /// Records waiting to be sent again: after a failed send, or given back by librdkafka's
        /// full queue.
        retry_queue_size: u64,
    }
}
