//! The AsyncProducer's events as typed objects: what `_RawAsyncProducer.poll_events` hands the
//! Python dispatcher, one class per kind, so Python reads attributes instead of unpacking tuples
//! whose shape lives in two languages.

use ferrokafka_kafka::{KafkaIoError, Pending, ProducerEvent, ReceivedRecord};
use pyo3::prelude::*;

use crate::errors::NativeError;
use crate::message::PyMessage;

/// A tracked record the broker acknowledged.
#[pyclass(name = "ProducerDelivered", module = "ferrokafka._native", frozen)]
pub struct PyProducerDelivered {
    #[pyo3(get)]
    ticket: u64,
    #[pyo3(get)]
    message: Py<PyMessage>,
}

/// A record that finally failed (retries exhausted, refused for good, or purged at shutdown);
/// its message carries the error. `ticket` is 0 when nobody waits for it.
#[pyclass(name = "ProducerFailed", module = "ferrokafka._native", frozen)]
pub struct PyProducerFailed {
    #[pyo3(get)]
    ticket: u64,
    #[pyo3(get)]
    message: Py<PyMessage>,
    #[pyo3(get)]
    attempts: u32,
}

/// Records the `drop_oldest` policy dropped, oldest first, with their tickets.
#[pyclass(name = "ProducerDropped", module = "ferrokafka._native", frozen)]
pub struct PyProducerDropped {
    #[pyo3(get)]
    tickets: Vec<u64>,
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

/// The producer's last event: shutdown finished.
#[pyclass(name = "ProducerShutDown", module = "ferrokafka._native", frozen)]
pub struct PyProducerShutDown;

/// A record handed back undelivered, as a `Message` carrying `error` (if any).
pub(crate) fn message_of(pending: Pending, error: Option<KafkaIoError>) -> PyMessage {
    let record = ReceivedRecord::undelivered(pending.record);
    match error {
        Some(error) => PyMessage::failed(record, error),
        None => PyMessage::from(record),
    }
}

/// The typed Python object of `event`.
pub(crate) fn event_object(py: Python<'_>, event: ProducerEvent) -> PyResult<Py<PyAny>> {
    Ok(match event {
        ProducerEvent::Delivered { ticket, record } => Py::new(
            py,
            PyProducerDelivered {
                ticket,
                message: Py::new(py, PyMessage::from(record))?,
            },
        )?
        .into_any(),
        ProducerEvent::Failed { pending, error } => {
            let (ticket, attempts) = (pending.ticket, pending.failures);
            Py::new(
                py,
                PyProducerFailed {
                    ticket,
                    message: Py::new(py, message_of(*pending, Some(error)))?,
                    attempts,
                },
            )?
            .into_any()
        }
        ProducerEvent::Dropped { pending } => {
            let tickets = pending.iter().map(|p| p.ticket).collect();
            let messages = pending
                .into_iter()
                .map(|p| Py::new(py, message_of(*p, None)))
                .collect::<PyResult<_>>()?;
            Py::new(py, PyProducerDropped { tickets, messages })?.into_any()
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
                error: PyErr::from(NativeError::Kafka(error))
                    .into_value(py)
                    .into_any(),
                attempt,
            },
        )?
        .into_any(),
        ProducerEvent::ShutDown => Py::new(py, PyProducerShutDown)?.into_any(),
    })
}
