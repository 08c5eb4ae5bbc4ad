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

use ferrokafka_core::tracking::HandlerSample;
use ferrokafka_kafka::{
    ConcurrentConsumer, ConsumerEvent, ConsumerOptions, ErrorPolicy, Failure, Fetched, OnError,
    OrderBy, Outcome, StartAt, Subscription, Verdict, WorkerId,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::batch::PyBatch;
use crate::blocking::{EventInbox, ForkGuard, SLICE, seconds_or_off, wait_sliced};
use crate::consumer_events::event_object;
use crate::consumer_stats::{PyConsumerStats, consumer_stats};
use crate::convert::settings_from_dict;
use crate::engine_drops::ReleaseOnDrop;
use crate::errors::{NativeError, NativeResult, invalid_argument, malformed, not_one_of};
use crate::options::Fields;
use crate::report_samples::{PyJobSample, PySourceSample, jobs_of};

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
            malformed("each subscription must be a topic name or (topic, partition, kind, value)")
        })?;
    let start = match kind.as_str() {
        "stored" => StartAt::Stored,
        "beginning" => StartAt::Beginning,
        "end" => StartAt::End,
        "offset" => StartAt::Offset(value),
        "timestamp" => StartAt::Timestamp(value),
        other => {
            let kinds = ["stored", "beginning", "end", "offset", "timestamp"];
            return Err(not_one_of("subscription start", &kinds, other));
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
        other => Err(not_one_of("outcome", &["handled", "abandoned"], other)),
    }
}

/// The engine's id of a fetched batch: its first offset.
fn batch_id(batch: &PyBatch) -> PyResult<i64> {
    batch
        .first_offset()
        .ok_or_else(|| invalid_argument("an empty batch has nothing to acknowledge"))
}

/// The error policies by name.
const ERROR_POLICIES: [(&str, OnError); 3] = [
    ("commit", OnError::Commit),
    ("retry", OnError::Retry),
    ("dead_letter", OnError::DeadLetter),
];

/// What stays in order, by name.
const ORDERINGS: [(&str, OrderBy); 2] = [("partition", OrderBy::Partition), ("key", OrderBy::Key)];

/// What the engine takes from a `ferrokafka.ConsumerOptions` (its callbacks and reporter stay in
/// Python), converted once.
struct ConsumerArgs {
    options: ConsumerOptions,
    drain: Duration,
}

impl ConsumerArgs {
    fn read(options: &Bound<'_, PyAny>, subscriptions: Vec<Subscription>) -> PyResult<Self> {
        let fields = Fields::attributes(options);
        let options = ConsumerOptions {
            subscriptions,
            max_batch_size: fields.optional_count("max_batch_size")?,
            commit_interval: fields.seconds("commit_interval")?,
            max_queue_records: fields.count("max_queue_records")?,
            max_queue_bytes: fields.count("max_queue_bytes")?,
            errors: ErrorPolicy {
                on_error: fields.choice("on_error", &ERROR_POLICIES)?,
                max_retries: fields.count("max_retries")?,
                retry_backoff: fields.seconds_or_off("retry_backoff")?,
                max_retry_backoff: fields.seconds_or_off("max_retry_backoff")?,
                dead_letter_topic: fields.optional_text("dead_letter_topic")?,
            },
            ordering: fields.choice("ordering", &ORDERINGS)?,
            max_concurrency: fields.count("max_concurrency")?,
        };
        let drain = fields.seconds_or_off("drain")?;
        Ok(ConsumerArgs { options, drain })
    }
}

/// Checks a `ferrokafka.ConsumerOptions` when it is created (its `__post_init__`): each field
/// converted as the consumer converts it, then the engine's rules.
#[pyfunction]
pub fn validate_consumer_options(options: &Bound<'_, PyAny>) -> NativeResult<()> {
    ConsumerArgs::read(options, Vec::new())?
        .options
        .validate_settings()?;
    Ok(())
}

#[pymethods]
impl PyRawConsumer {
    #[new]
    #[pyo3(signature = (config, *, subscriptions, options))]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyDict>,
        subscriptions: &Bound<'_, PyAny>,
        options: &Bound<'_, PyAny>,
    ) -> NativeResult<Self> {
        let settings = settings_from_dict(config)?;
        let subscriptions = subscriptions
            .try_iter()?
            .map(|item| subscription(&item?))
            .collect::<PyResult<Vec<_>>>()?;
        let ConsumerArgs { options, drain } = ConsumerArgs::read(options, subscriptions)?;
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

    /// Registers `worker`, whose `fetch` found nothing, for `fetch_ready`; signals `ready_fd`.
    fn wait_for_records(&self, worker: WorkerId) -> NativeResult<()> {
        self.guard.check()?;
        self.engine.wait_for_records(worker);
        Ok(())
    }

    /// The file descriptor an event loop watches (`add_reader`): readable when a registered
    /// worker may find a batch or an event was queued (`poll_events(0.0)` takes it). Owned by the engine (made on the first call); closed by
    /// `release_ready_fd` or when the consumer is dropped.
    fn ready_fd(&self) -> NativeResult<i32> {
        self.guard.check()?;
        Ok(self.engine.ready_fd()?)
    }

    /// Closes `ready_fd`, which the loop no longer watches.
    fn release_ready_fd(&self) {
        self.engine.release_ready_fd();
    }

    /// Without waiting (so attached): `(worker, batch or None)` for every registered worker
    /// whose partition has a batch or is gone, which leave the register; empty when none has.
    /// Reads `ready_fd`.
    fn fetch_ready(&self) -> NativeResult<Vec<(WorkerId, Option<PyBatch>)>> {
        self.guard.check()?;
        Ok(self
            .engine
            .fetch_ready()?
            .into_iter()
            .map(|(worker, fetched)| match fetched {
                Fetched::Batch(records) => (worker, Some(PyBatch::new(records))),
                Fetched::Empty | Fetched::Gone => (worker, None),
            })
            .collect())
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

    /// Sleeps `worker`'s retry backoff of `seconds`; true when cut short because its partition
    /// is no longer its own (revoked, or the consumer is stopping): the batch is then abandoned.
    fn backoff(&self, py: Python<'_>, worker: WorkerId, seconds: f64) -> NativeResult<bool> {
        self.guard.check()?;
        if seconds_or_off("seconds", seconds)?.is_zero() {
            // No backoff: only whether the partition is still the worker's, at once.
            return Ok(self.engine.wait_gone(worker, Duration::ZERO));
        }
        let engine = &**self.engine;
        let gone = wait_sliced(py, Some(seconds), |slice| {
            engine.wait_gone(worker, slice).then_some(())
        })?;
        Ok(gone.is_some())
    }

    /// From now on, `poll_events` also returns a `ConsumerLoadControl` for each pause and resume
    /// of a partition's queue (someone subscribed to them); until then they are only counted.
    fn report_load_changes(&self) {
        self.engine.report_load_changes();
    }

    /// Waits up to `timeout` seconds for events and returns at most `max_events` of them; with
    /// a timeout of 0 the GIL is kept.
    #[pyo3(signature = (timeout, max_events=10_000))]
    fn poll_events(
        &self,
        py: Python<'_>,
        timeout: f64,
        max_events: usize,
    ) -> NativeResult<Vec<Py<PyAny>>> {
        let wait = seconds_or_off("timeout", timeout)?.min(SLICE);
        let events = self.events.drain(py, wait, max_events);
        events
            .into_iter()
            .map(|event| event_object(py, event))
            .collect::<PyResult<_>>()
            .map_err(NativeError::from)
    }

    /// Stops: drops queued records, gives running batches `drain` seconds, commits what
    /// finished, and closes the consumer. Waits for all of it; calling again is a no-op.
    fn stop(&self, py: Python<'_>, drain: f64) -> NativeResult<()> {
        self.guard.check()?;
        self.engine.begin_stop(seconds_or_off("drain", drain)?);
        let engine = &**self.engine;
        wait_sliced(py, None, |slice| engine.wait_stopped(slice).then_some(()))?;
        Ok(())
    }

    fn stats(&self, py: Python<'_>) -> PyResult<PyConsumerStats> {
        // A forked child's copy would show the parent's counters as they were at the fork.
        self.guard.check()?;
        consumer_stats(py, self.engine.stats())
    }

    /// This consumer's part of a process report: the engine's figures with the handlers' own
    /// (the batches running now, jobs started, handler errors, seconds in handlers).
    fn report_sample(
        &self,
        jobs: Vec<PyRef<'_, PyJobSample>>,
        jobs_started: u64,
        errors: u64,
        busy_seconds: f64,
    ) -> PySourceSample {
        PySourceSample(self.engine.report_sample(HandlerSample {
            jobs: jobs_of(&jobs),
            jobs_started,
            errors,
            busy_seconds,
        }))
    }
}
