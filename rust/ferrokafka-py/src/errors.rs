//! Every mapping from a Rust error to a Python exception lives here.
//!
//! The exception classes are defined in `ferrokafka/exceptions.py` (so they can combine builtins,
//! e.g. `KafkaTimeoutError(KafkaError, TimeoutError)`, and carry docstrings); they are imported
//! lazily on first use. Binding code returns [`NativeResult`] and only uses `?`.

use ferrokafka_core::CoreError;
use ferrokafka_kafka::error::{TIMED_OUT_CODE, TIMED_OUT_NAME};
use ferrokafka_kafka::{KafkaIoError, redact};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pyo3::import_exception!(ferrokafka.exceptions, FerrokafkaError);
pyo3::import_exception!(ferrokafka.exceptions, ConfigError);
pyo3::import_exception!(ferrokafka.exceptions, ClosedError);
pyo3::import_exception!(ferrokafka.exceptions, BufferOverflow);
pyo3::import_exception!(ferrokafka.exceptions, KafkaError);
pyo3::import_exception!(ferrokafka.exceptions, KafkaFatalError);
pyo3::import_exception!(ferrokafka.exceptions, KafkaTimeoutError);
pyo3::import_exception!(ferrokafka.exceptions, CodecError);
pyo3::import_exception!(ferrokafka.exceptions, ScheduleError);
pyo3::import_exception!(ferrokafka.exceptions, MarkerRefusedError);

/// Any error a binding can return; converted to a Python exception at the boundary.
#[derive(Debug)]
pub enum NativeError {
    /// An error of the Kafka engines.
    Kafka(KafkaIoError),
    /// An error of the pure core: bad arguments, or corrupt, oversized or foreign encoded data.
    Core(CoreError),
    /// A core error while building a scheduled message: every cause is an invalid schedule.
    Schedule(CoreError),
    /// An exception raised while converting arguments or by user code; passed through unchanged.
    Python(PyErr),
}

/// Result type of binding methods.
pub type NativeResult<T> = Result<T, NativeError>;

/// The exception object for `error`, as event and message attributes carry it (not raised).
pub fn exception_of(py: Python<'_>, error: KafkaIoError) -> Py<PyAny> {
    PyErr::from(NativeError::Kafka(error))
        .into_value(py)
        .into_any()
}

/// The `MarkerRefusedError` handing `message` back: its START marker was refused for good with
/// `error` (its code, name and flags kept).
pub fn refused_message(error: KafkaIoError, message: Py<PyAny>) -> PyErr {
    let text = format!("the markers topic refused the START marker of this message: {error}");
    let (code, name, retriable, fatal) = match error {
        KafkaIoError::Broker {
            code,
            name,
            retriable,
            fatal,
            ..
        } => (code, name, retriable, fatal),
        _ => (-1, "_UNKNOWN".to_owned(), false, false),
    };
    MarkerRefusedError::new_err((text, code, name, retriable, fatal, message))
}

impl From<KafkaIoError> for NativeError {
    fn from(err: KafkaIoError) -> Self {
        NativeError::Kafka(err)
    }
}

impl From<CoreError> for NativeError {
    fn from(err: CoreError) -> Self {
        NativeError::Core(err)
    }
}

impl From<PyErr> for NativeError {
    fn from(err: PyErr) -> Self {
        NativeError::Python(err)
    }
}

impl From<NativeError> for PyErr {
    fn from(err: NativeError) -> PyErr {
        match err {
            NativeError::Python(err) => err,
            NativeError::Schedule(err) => ScheduleError::new_err(err.to_string()),
            NativeError::Core(err) => {
                let message = err.to_string();
                match err {
                    CoreError::InvalidArgument(_) => PyValueError::new_err(message),
                    CoreError::InvalidState { .. } => FerrokafkaError::new_err(message),
                    CoreError::Corrupt { .. }
                    | CoreError::TooLarge { .. }
                    | CoreError::UnsupportedVersion { .. }
                    | CoreError::MissingHeader { .. }
                    | CoreError::InvalidHeader { .. }
                    | CoreError::InvalidField { .. } => CodecError::new_err(message),
                }
            }
            NativeError::Kafka(err) => {
                // librdkafka's text may quote a token endpoint URL with its credentials.
                let message = redact(&err.to_string()).into_owned();
                match err {
                    KafkaIoError::Config(_) => ConfigError::new_err(message),
                    KafkaIoError::InvalidArgument(_) => PyValueError::new_err(message),
                    KafkaIoError::Closed(_) => ClosedError::new_err(message),
                    KafkaIoError::Timeout { .. } => KafkaTimeoutError::new_err((
                        message,
                        TIMED_OUT_CODE,
                        TIMED_OUT_NAME,
                        true,
                        false,
                    )),
                    KafkaIoError::Broker {
                        code,
                        name,
                        retriable,
                        fatal: true,
                        ..
                    } => KafkaFatalError::new_err((message, code, name, retriable, true)),
                    KafkaIoError::Broker {
                        code,
                        name,
                        retriable,
                        fatal: false,
                        ..
                    } => KafkaError::new_err((message, code, name, retriable, false)),
                }
            }
        }
    }
}
