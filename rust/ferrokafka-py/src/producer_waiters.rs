//! The Python side of the AsyncProducer's delivery waiters: what waits for one record (an
//! `on_delivery` callback or a `concurrent.futures.Future`) and for a `produce_many` batch (its
//! `on_delivery(report)` callback), and how each gets its result. Who waits for which ticket,
//! and when a batch report is complete, is the engine's bookkeeping
//! ([`ferrokafka_kafka::DeliveryWaiters`]): a map operation under a Rust mutex rather than a
//! Python dict behind a Python lock, so delivered records are settled while the events are
//! drained, without a Python event object per record (a batch report costs one Python call per
//! batch). Futures of delivered records get their messages in one Python call per drained
//! chunk ([`Delivered`]), not one `set_result` call from Rust each.

use ferrokafka_core::delivery_report::{DeliveryReport, Outcome};
use ferrokafka_kafka::{DeliveryWaiters, Settled, Ticket};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyList;

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

/// The producer's waiters: records' [`Waiter`]s, and batch reports going to a callback, with
/// exception objects for failed records.
pub(crate) type Waiters = DeliveryWaiters<Waiter, Py<PyAny>, Py<PyAny>>;

/// `ferrokafka._delivery_future.set_results`, looked up once.
static SET_RESULTS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Futures of delivered records and their messages, gathered while events are drained and
/// handed over together: a call from Rust into Python costs more than the `set_result` it makes
/// (a C-level call into the interpreter each), and a loop in Python makes them as cheap calls.
#[derive(Debug, Default)]
pub(crate) struct Delivered {
    futures: Vec<Py<PyAny>>,
    messages: Vec<Py<PyMessage>>,
}

impl Delivered {
    /// Sets the gathered futures' results, in the order their records were delivered.
    pub(crate) fn hand_over(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.futures.is_empty() {
            return Ok(());
        }
        let futures = PyList::new(py, self.futures.drain(..))?;
        let messages = PyList::new(py, self.messages.drain(..))?;
        let set_results = SET_RESULTS.get_or_try_init(py, || {
            py.import("ferrokafka._delivery_future")?
                .getattr("set_results")
                .map(Bound::unbind)
        })?;
        if let Err(failure) = set_results.call1(py, (futures, messages)) {
            log_failure(
                py,
                "could not settle the futures of delivered messages",
                failure,
            )?;
        }
        Ok(())
    }
}

/// Hands the result of the record with `ticket` (where it landed, or the exception it failed
/// with) to who waits for it; `message` (the record as a `Message`) is built only for a waiter
/// of its own. A delivered record's future joins `delivered`; any other result is handed over
/// at once, after `delivered` (results keep their order). A callback that raises, or a future
/// that refuses the result, is logged and does not stop the others.
pub(crate) fn settle(
    py: Python<'_>,
    waiters: &Waiters,
    ticket: Ticket,
    outcome: Outcome<Py<PyAny>>,
    message: impl FnOnce() -> PyResult<Py<PyMessage>>,
    delivered: &mut Delivered,
) -> PyResult<()> {
    let (waiter, error) = match waiters.settle(ticket, outcome) {
        Settled::Nobody | Settled::Batch(None) => return Ok(()),
        Settled::Batch(Some(report)) => {
            delivered.hand_over(py)?;
            return hand_over(py, report);
        }
        Settled::Waiter(waiter, outcome) => (waiter, outcome.err()),
    };
    let message = message()?;
    let outcome = match (waiter, error) {
        (Waiter::Future(future), None) => {
            delivered.futures.push(future);
            delivered.messages.push(message);
            return Ok(());
        }
        (Waiter::Callback(callback), error) => {
            delivered.hand_over(py)?;
            callback
                .call1(py, (error, &message))
                .map_err(|failure| ("on_delivery callback failed", failure))
        }
        (Waiter::Future(future), Some(error)) => {
            delivered.hand_over(py)?;
            future
                .call_method1(py, pyo3::intern!(py, "set_exception"), (error,))
                .map_err(|failure| ("could not settle the future", failure))
        }
    };
    if let Err((what, failure)) = outcome {
        let topic = message.borrow(py).topic().to_owned();
        log_failure(py, &format!("{what} for a message to {topic}"), failure)?;
    }
    Ok(())
}

/// Hands complete batch reports to their callbacks, in order; a callback that raises is logged.
pub(crate) fn hand_over_all(
    py: Python<'_>,
    reports: impl IntoIterator<Item = DeliveryReport<Py<PyAny>, Py<PyAny>>>,
) -> PyResult<()> {
    reports
        .into_iter()
        .try_for_each(|report| hand_over(py, report))
}

/// Hands a complete batch report to its callback; a callback that raises is logged.
fn hand_over(py: Python<'_>, report: DeliveryReport<Py<PyAny>, Py<PyAny>>) -> PyResult<()> {
    let DeliveryReport {
        recipient,
        partitions,
        offsets,
        errors,
    } = report;
    let report = Py::new(py, PyDeliveryReport::new(partitions, offsets, errors))?;
    if let Err(failure) = recipient.call1(py, (report,)) {
        log_failure(py, "produce_many on_delivery callback failed", failure)?;
    }
    Ok(())
}

/// Logs `failure` with its traceback on the producer's logger, by the package's one rule for a
/// user callback that keeps failing (`ferrokafka._failure_log`: not once per delivery).
fn log_failure(py: Python<'_>, what: &str, failure: PyErr) -> PyResult<()> {
    let logger = py
        .import("logging")?
        .call_method1("getLogger", ("ferrokafka.producer",))?;
    py.import("ferrokafka._failure_log")?
        .call_method1("log_failure", (logger, what, failure.into_value(py)))?;
    Ok(())
}
