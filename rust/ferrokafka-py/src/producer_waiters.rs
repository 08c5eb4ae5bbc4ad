//! Who waits for which tracked record of the AsyncProducer: an `on_delivery` callback or a
//! `concurrent.futures.Future`, by ticket, or the batch report of a whole `produce_many` call,
//! by its range of tickets. Kept in the binding so that queueing a tracked record and settling
//! its result cost a map operation under a Rust mutex rather than a Python dict behind a Python
//! lock, and so that delivered records are settled while the events are drained, without a
//! Python event object per record (a batch report costs one Python call per batch).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use ferrokafka_kafka::{Acknowledgement, POSITION_ONLY, Ticket};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rustc_hash::FxHashMap;

use crate::delivery_report::PyDeliveryReport;
use crate::message::PyMessage;

/// What waits for one record's delivery result.
#[derive(Debug)]
pub(crate) enum Waiter {
    /// `on_delivery(error, message)`.
    Callback(Py<PyAny>),
    /// A running `concurrent.futures.Future`: gets the message or the error.
    Future(Py<PyAny>),
}

/// The report of one `produce_many` call being filled, keyed by its first ticket.
#[derive(Debug)]
struct BatchReport {
    callback: Py<PyAny>,
    partitions: Vec<i32>,
    offsets: Vec<i64>,
    errors: Vec<(usize, Py<PyAny>)>,
    settled: usize,
    /// How many records the call queued; None until it returned.
    expected: Option<usize>,
}

impl BatchReport {
    fn complete(&self) -> bool {
        self.expected == Some(self.settled)
    }
}

/// The waiter tables: registered before a record can be delivered, taken once when settled.
/// Tickets are the engine's own counter, so a fast non-keyed hash is enough.
#[derive(Debug, Default)]
pub(crate) struct DeliveryWaiters {
    records: Mutex<FxHashMap<Ticket, Waiter>>,
    batches: Mutex<BTreeMap<Ticket, BatchReport>>,
}

/// A panic while a lock was held cannot leave a map half-updated (one insert or remove).
fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl DeliveryWaiters {
    fn table(&self) -> MutexGuard<'_, FxHashMap<Ticket, Waiter>> {
        locked(&self.records)
    }

    /// Registers the report of a call whose `size` records get tickets `first`, `first + 1`...
    pub(crate) fn register_batch(&self, first: Ticket, size: usize, callback: Py<PyAny>) {
        let report = BatchReport {
            callback,
            partitions: vec![-1; size],
            offsets: vec![-1; size],
            errors: Vec::new(),
            settled: 0,
            expected: None,
        };
        locked(&self.batches).insert(first, report);
    }

    /// The call that registered the batch at `first` queued `accepted` of its records: the
    /// report covers those (the others were refused with an exception); it goes to its callback
    /// here if they are all settled already (or there were none), else when the last one is. A
    /// call that queued nothing and raised gets no report.
    pub(crate) fn expect_batch(
        &self,
        py: Python<'_>,
        first: Ticket,
        accepted: usize,
        raised: bool,
    ) -> PyResult<()> {
        let mut batches = locked(&self.batches);
        let Some(report) = batches.get_mut(&first) else {
            return Ok(());
        };
        report.expected = Some(accepted);
        report.partitions.truncate(accepted);
        report.offsets.truncate(accepted);
        let report = if report.complete() {
            batches.remove(&first)
        } else {
            None
        };
        drop(batches);
        match report {
            Some(report) if !(accepted == 0 && raised) => hand_over(py, report),
            _ => Ok(()),
        }
    }

    /// Records where batch reports' records landed, or why one failed; hands the reports
    /// completed by them to their callbacks (after the lock is released: a callback may
    /// produce again).
    fn settle_in_batches(
        &self,
        py: Python<'_>,
        outcomes: impl IntoIterator<Item = (Ticket, Result<(i32, i64), Py<PyAny>>)>,
    ) -> PyResult<()> {
        let mut completed = Vec::new();
        let mut batches = locked(&self.batches);
        for (ticket, outcome) in outcomes {
            let Some((&first, report)) = batches.range_mut(..=ticket).next_back() else {
                continue;
            };
            let index = usize::try_from(ticket - first).unwrap_or(usize::MAX);
            if index >= report.offsets.len() {
                continue;
            }
            match outcome {
                Ok((partition, offset)) => {
                    report.partitions[index] = partition;
                    report.offsets[index] = offset;
                }
                Err(error) => report.errors.push((index, error)),
            }
            report.settled += 1;
            if report.complete() {
                completed.extend(batches.remove(&first));
            }
        }
        drop(batches);
        completed
            .into_iter()
            .try_for_each(|report| hand_over(py, report))
    }

    /// Batch reports' records were written where `acknowledged` says.
    pub(crate) fn acknowledge(
        &self,
        py: Python<'_>,
        acknowledged: Vec<Acknowledgement>,
    ) -> PyResult<()> {
        let outcomes = acknowledged
            .into_iter()
            .map(|a| (a.ticket, Ok((a.partition, a.offset))));
        self.settle_in_batches(py, outcomes)
    }

    pub(crate) fn register(&self, ticket: Ticket, waiter: Waiter) {
        self.table().insert(ticket, waiter);
    }

    /// Forgets the waiter of a record that was refused before being queued.
    pub(crate) fn forget(&self, ticket: Ticket) -> Option<Waiter> {
        self.table().remove(&ticket)
    }

    /// Hands `message` (delivered when `error` is None) to its waiter, if any. A callback that
    /// raises, or a future that refuses the result, is logged and does not stop the others.
    pub(crate) fn settle(
        &self,
        py: Python<'_>,
        ticket: Ticket,
        error: Option<Bound<'_, PyAny>>,
        message: impl FnOnce() -> PyResult<Py<PyMessage>>,
    ) -> PyResult<()> {
        if ticket == 0 {
            return Ok(());
        }
        if ticket & POSITION_ONLY != 0 {
            let message = message()?;
            let outcome = match error {
                Some(error) => Err(error.unbind()),
                None => {
                    let message = message.borrow(py);
                    Ok((message.partition(), message.offset()))
                }
            };
            return self.settle_in_batches(py, [(ticket, outcome)]);
        }
        let Some(waiter) = self.forget(ticket) else {
            return Ok(());
        };
        let message = message()?;
        let outcome = match (&waiter, error) {
            (Waiter::Callback(callback), error) => callback.call1(py, (error, &message)).map(drop),
            (Waiter::Future(future), None) => future
                .call_method1(py, pyo3::intern!(py, "set_result"), (&message,))
                .map(drop),
            (Waiter::Future(future), Some(error)) => future
                .call_method1(py, pyo3::intern!(py, "set_exception"), (error,))
                .map(drop),
        };
        if let Err(failure) = outcome {
            let what = match waiter {
                Waiter::Callback(_) => "on_delivery callback failed",
                Waiter::Future(_) => "could not settle the future",
            };
            let topic = message.borrow(py).topic().to_owned();
            log_failure(py, &format!("{what} for a message to {topic}"), failure)?;
        }
        Ok(())
    }
}

/// Hands a finished batch report to its callback; a callback that raises is logged.
fn hand_over(py: Python<'_>, report: BatchReport) -> PyResult<()> {
    let BatchReport {
        callback,
        partitions,
        offsets,
        errors,
        ..
    } = report;
    let report = Py::new(py, PyDeliveryReport::new(partitions, offsets, errors))?;
    if let Err(failure) = callback.call1(py, (report,)) {
        log_failure(py, "produce_many on_delivery callback failed", failure)?;
    }
    Ok(())
}

/// Logs `failure` with its traceback on the producer's logger.
fn log_failure(py: Python<'_>, what: &str, failure: PyErr) -> PyResult<()> {
    let logger = py
        .import("logging")?
        .call_method1("getLogger", ("ferrokafka.producer",))?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("exc_info", failure.into_value(py))?;
    logger.call_method("error", ("%s", what), Some(&kwargs))?;
    Ok(())
}
