//! Who waits for which tracked record of the AsyncProducer: an `on_delivery` callback or a
//! `concurrent.futures.Future`, by ticket. Kept in the binding so that queueing a tracked record
//! and settling its result cost a hash-map operation under a Rust mutex rather than a Python dict
//! behind a Python lock, and so that delivered records are settled while the events are drained,
//! without a Python event object per record.

use std::sync::Mutex;

use ferrokafka_kafka::Ticket;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rustc_hash::FxHashMap;

use crate::message::PyMessage;

/// What waits for one record's delivery result.
#[derive(Debug)]
pub(crate) enum Waiter {
    /// `on_delivery(error, message)`.
    Callback(Py<PyAny>),
    /// A running `concurrent.futures.Future`: gets the message or the error.
    Future(Py<PyAny>),
}

/// The waiter table: registered before the record can be delivered, taken once when settled.
/// Tickets are the engine's own counter, so a fast non-keyed hash is enough.
#[derive(Debug, Default)]
pub(crate) struct DeliveryWaiters(Mutex<FxHashMap<Ticket, Waiter>>);

impl DeliveryWaiters {
    fn table(&self) -> std::sync::MutexGuard<'_, FxHashMap<Ticket, Waiter>> {
        // A panic while the lock was held cannot leave the map half-updated (one insert or remove).
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
            let logger = py
                .import("logging")?
                .call_method1("getLogger", ("ferrokafka.producer",))?;
            let kwargs = PyDict::new(py);
            kwargs.set_item("exc_info", failure.into_value(py))?;
            logger.call_method(
                "error",
                (format!("{what} for a message to %s"), topic),
                Some(&kwargs),
            )?;
        }
        Ok(())
    }
}
