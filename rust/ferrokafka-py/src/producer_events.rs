//! The AsyncProducer's events as typed objects: what `_RawAsyncProducer.poll_events` hands the
//! Python dispatcher, one class per kind, so Python reads attributes instead of unpacking tuples
//! whose shape lives in two languages. Delivery results are settled with their waiters here;
//! an acknowledged record needs nothing more, so it becomes no event object at all.

use ferrokafka_kafka::{AsyncProducer, KafkaIoError, Pending, ProducerEvent, ReceivedRecord};
use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;

use crate::errors::{dropped_by_drop_oldest, exception_of};
use crate::message::PyMessage;
use crate::producer_waiters::{Delivered, Waiters, hand_over_all, settle};

/// A record that finally failed (retries exhausted, refused for good, or purged at shutdown);
/// its message carries the error. Its waiter already got the error.
#[pyclass(name = "ProducerFailed", module = "ferrokafka._native", frozen)]
pub struct PyProducerFailed {
    #[pyo3(get)]
    message: Py<PyMessage>,
    #[pyo3(get)]
    attempts: u32,
}

/// Records the `drop_oldest` policy dropped, oldest first. Their waiters already got a
/// `BufferOverflow`.
#[pyclass(name = "ProducerDropped", module = "ferrokafka._native", frozen)]
pub struct PyProducerDropped {
    #[pyo3(get)]
    messages: Vec<Py<PyMessage>>,
}

/// A delivery round handed `message_count` records to librdkafka (`deliver_messages`).
#[pyclass(name = "ProducerDelivering", module = "ferrokafka._native", frozen)]
pub struct PyProducerDelivering {
    #[pyo3(get)]
    message_count: usize,
    #[pyo3(get)]
    queue_size: usize,
}

/// librdkafka reported a failed send that will be retried (`delivery_error`, not final).
#[pyclass(name = "ProducerRetrying", module = "ferrokafka._native", frozen)]
pub struct PyProducerRetrying {
    #[pyo3(get)]
    topic: String,
    #[pyo3(get)]
    error: Py<PyAny>,
    #[pyo3(get)]
    attempt: u32,
}

#[pymethods]
impl PyProducerRetrying {
    // The error is the caller's to extend: a cycle back to the event must be visible to the GC.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.error)
    }
}

/// The producer's last event: shutdown finished.
#[pyclass(name = "ProducerShutDown", module = "ferrokafka._native", frozen)]
pub struct PyProducerShutDown;

/// A record handed back undelivered, as a `Message` carrying `error` (if any).
pub(crate) fn message_of(
    py: Python<'_>,
    pending: Pending,
    error: Option<KafkaIoError>,
) -> PyResult<Py<PyMessage>> {
    let record = ReceivedRecord::undelivered(pending.record);
    match error {
        Some(error) => PyMessage::failed(record, error),
        None => PyMessage::from(record),
    }
    .into_untracked(py)
}

/// Settles the delivery results `event` brings (taking batch reports' acknowledgements from
/// `engine`) with their waiters, delivered records' futures joining `delivered`; then the typed
/// Python object of the event, or None for an acknowledged record (nothing more to tell Python).
pub(crate) fn event_object(
    py: Python<'_>,
    event: ProducerEvent,
    engine: &AsyncProducer,
    waiters: &Waiters,
    delivered: &mut Delivered,
) -> PyResult<Option<Py<PyAny>>> {
    Ok(Some(match event {
        ProducerEvent::Delivered { ticket, record } => {
            let written = Ok((record.partition, record.offset));
            settle(
                py,
                waiters,
                ticket,
                written,
                || PyMessage::from(record).into_untracked(py),
                delivered,
            )?;
            return Ok(None);
        }
        ProducerEvent::Acknowledged => {
            delivered.hand_over(py)?;
            hand_over_all(py, waiters.acknowledge(engine.take_acknowledged()))?;
            return Ok(None);
        }
        ProducerEvent::Failed { pending, error } => {
            let (ticket, attempts) = (pending.ticket, pending.failures);
            let reason = exception_of(py, error.clone());
            let message = message_of(py, *pending, Some(error))?;
            let for_waiter = message.clone_ref(py);
            settle(
                py,
                waiters,
                ticket,
                Err(reason),
                || Ok(for_waiter),
                delivered,
            )?;
            Py::new(py, PyProducerFailed { message, attempts })?.into_any()
        }
        ProducerEvent::Dropped { pending } => {
            let mut messages = Vec::with_capacity(pending.len());
            for p in pending {
                let ticket = p.ticket;
                let message = message_of(py, *p, None)?;
                let for_waiter = message.clone_ref(py);
                let reason = dropped_by_drop_oldest().into_value(py);
                let reason = Err(reason.into_any());
                settle(py, waiters, ticket, reason, || Ok(for_waiter), delivered)?;
                messages.push(message);
            }
            Py::new(py, PyProducerDropped { messages })?.into_any()
        }
        ProducerEvent::DeliverMessages {
            message_count,
            queue_size,
        } => Py::new(
            py,
            PyProducerDelivering {
                message_count,
                queue_size,
            },
        )?
        .into_any(),
        ProducerEvent::DeliveryError {
            topic,
            error,
            attempt,
        } => Py::new(
            py,
            PyProducerRetrying {
                topic,
                error: exception_of(py, error),
                attempt,
            },
        )?
        .into_any(),
        ProducerEvent::ShutDown => Py::new(py, PyProducerShutDown)?.into_any(),
        ProducerEvent::Wake => return Ok(None),
    }))
}
