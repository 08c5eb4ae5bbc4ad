//! Every mapping from a Rust error to a Python exception lives here.
//!
//! The exception classes are defined in `ferrokafka/exceptions.py` (so they can combine builtins,
//! e.g. `KafkaTimeoutError(KafkaError, TimeoutError)`, and carry docstrings); they are imported
//! lazily on first use. Binding code returns [`NativeResult`] and only uses `?`.

use ferrokafka_kafka::KafkaIoError;
use pyo3::PyErr;
use pyo3::exceptions::PyValueError;

pyo3::import_exception!(ferrokafka.exceptions, FerrokafkaError);
pyo3::import_exception!(ferrokafka.exceptions, ConfigError);
pyo3::import_exception!(ferrokafka.exceptions, ClosedError);
pyo3::import_exception!(ferrokafka.exceptions, BufferOverflow);
pyo3::import_exception!(ferrokafka.exceptions, KafkaError);
pyo3::import_exception!(ferrokafka.exceptions, KafkaTimeoutError);

/// librdkafka's code for a local timeout, reported with every [`KafkaIoError::Timeout`].
const TIMED_OUT: i32 = -185;

/// Any error a binding can return; converted to a Python exception at the boundary.
#[derive(Debug)]
pub enum NativeError {
    /// An error of the Kafka engines.
    Kafka(KafkaIoError),
    /// An exception raised while converting arguments or by user code; passed through unchanged.
    Python(PyErr),
}

/// Result type of binding methods.
pub type NativeResult<T> = Result<T, NativeError>;

impl From<KafkaIoError> for NativeError {
    fn from(err: KafkaIoError) -> Self {
        NativeError::Kafka(err)
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
            NativeError::Kafka(err) => {
                let message = err.to_string();
                match err {
                    KafkaIoError::Config(_) => ConfigError::new_err(message),
                    KafkaIoError::InvalidArgument(_) => PyValueError::new_err(message),
                    KafkaIoError::Closed(_) => ClosedError::new_err(message),
                    KafkaIoError::Timeout { .. } => {
                        KafkaTimeoutError::new_err((message, TIMED_OUT, "_TIMED_OUT", true, false))
                    }
                    KafkaIoError::Broker {
                        code,
                        name,
                        retriable,
                        fatal,
                        ..
                    } => KafkaError::new_err((message, code, name, retriable, fatal)),
                }
            }
        }
    }
}
