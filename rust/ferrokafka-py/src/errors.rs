//! Every Python exception the bindings raise is built here: the mapping from a Rust error to a
//! Python exception ([`NativeError`]), and one named constructor per kind of failure the
//! bindings find themselves (a wrong argument type, a refused value, a closed producer, ...), so
//! which exception class each failure gets, and the wording of its message, has one owner.
//!
//! The exception classes are defined in `ferrokafka/exceptions.py` (so they can combine builtins,
//! e.g. `KafkaTimeoutError(KafkaError, TimeoutError)`, and carry docstrings); they are imported
//! lazily on first use. Binding code returns [`NativeResult`] (or `PyResult` with a constructor
//! from here) and only uses `?`.

use std::fmt::Display;

use ferrokafka_core::CoreError;
use ferrokafka_kafka::error::{TIMED_OUT_CODE, TIMED_OUT_NAME};
use ferrokafka_kafka::{KafkaIoError, redact};
use pyo3::exceptions::{PyIndexError, PyKeyError, PyTypeError, PyValueError};
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

/// A local timeout as librdkafka reports one (its code and name, retriable).
fn timed_out(message: String) -> PyErr {
    KafkaTimeoutError::new_err((message, TIMED_OUT_CODE, TIMED_OUT_NAME, true, false))
}

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
pub fn refused_message(py: Python<'_>, error: KafkaIoError, message: Py<PyAny>) -> PyResult<PyErr> {
    let text = format!("the START marker of this message was refused for good: {error}");
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
    // Raised with `KafkaError`'s arguments; the message handed back is an attribute.
    let refused = MarkerRefusedError::new_err((text, code, name, retriable, fatal));
    refused
        .value(py)
        .setattr(pyo3::intern!(py, "message"), message)?;
    Ok(refused)
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
                    KafkaIoError::Timeout { .. } => timed_out(message),
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

// ---- Arguments of the wrong type or shape (TypeError) ----------------------------------------

/// The name of `value`'s type, for messages ("?" if even that fails).
pub fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// `value` is of a type the call does not take; `expectation` says what it must be ("topic
/// must be a str"), the message adds what it is.
pub fn wrong_type(expectation: impl Display, value: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!("{expectation}, got {}", type_name(value)))
}

/// A callback argument `name` that cannot be called: refused when given, not logged on a
/// background thread each time it would run.
pub fn not_callable(name: &str, value: &Bound<'_, PyAny>) -> PyErr {
    wrong_type(format!("{name} must be callable"), value)
}

/// A value whose shape is wrong (a tuple of the wrong length, a missing value) where its type
/// says nothing useful; `expectation` says what it must be.
pub fn malformed(expectation: impl Into<String>) -> PyErr {
    PyTypeError::new_err(expectation.into())
}

/// The field `name` of the dict `what` could not be converted: `cause` says why.
pub fn wrong_field_type(what: &str, name: &str, cause: PyErr) -> PyErr {
    PyTypeError::new_err(format!("{what}[{name:?}]: {cause}"))
}

/// A value that cannot become JSON, `message` naming where: a type JSON has no counterpart for
/// (`bad_type`), or a value it cannot hold (NaN, a string that is not UTF-8).
pub fn not_json(message: String, bad_type: bool) -> PyErr {
    if bad_type {
        PyTypeError::new_err(message)
    } else {
        PyValueError::new_err(message)
    }
}

// ---- Refused values (ValueError, IndexError, KeyError) ---------------------------------------

/// An argument of the right type whose value is refused; `problem` says what it must be.
pub fn invalid_argument(problem: impl Into<String>) -> PyErr {
    PyValueError::new_err(problem.into())
}

/// The option `name` is none of the `allowed` names.
pub fn not_one_of(name: &str, allowed: &[&str], got: &str) -> PyErr {
    let quoted: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
    let choices = match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    PyValueError::new_err(format!("{name} must be {choices}, got {got:?}"))
}

/// The number `name` is NaN, which orders against nothing.
pub fn not_a_number(name: &str) -> PyErr {
    PyValueError::new_err(format!("{name} must not be NaN"))
}

/// An index past either end of `what`.
pub fn index_out_of_range(what: &str) -> PyErr {
    PyIndexError::new_err(format!("{what} index out of range"))
}

/// No entry has the id `key` (raised with the id itself, as a dict does).
pub fn no_such_key(key: Py<PyAny>) -> PyErr {
    PyKeyError::new_err(key)
}

// ---- Configuration and scheduling --------------------------------------------------------------

/// A config dict entry of a type librdkafka settings cannot have; `expectation` says what it
/// must be.
pub fn bad_config(expectation: impl Display, value: &Bound<'_, PyAny>) -> PyErr {
    ConfigError::new_err(format!("{expectation}, got {}", type_name(value)))
}

/// The str argument `name` has no UTF-8 form: it holds a lone surrogate, as `os.fsdecode` makes of
/// bytes that are not UTF-8. Its value is not shown (it may be a secret).
pub fn not_utf8(name: impl Display) -> PyErr {
    PyValueError::new_err(not_utf8_text(name))
}

/// [`not_utf8`] of a config key or value: a refused configuration.
pub fn config_not_utf8(name: impl Display) -> PyErr {
    ConfigError::new_err(not_utf8_text(name))
}

fn not_utf8_text(name: impl Display) -> String {
    format!(
        "{name} is not valid UTF-8 text: it holds a lone surrogate (as os.fsdecode makes of \
         bytes that are not UTF-8)"
    )
}

/// The scheduled-message dict `what` has a field outside `allowed` (a typo, most likely).
pub fn unknown_field(what: &str, field: &Bound<'_, PyAny>, allowed: &[&str]) -> PyErr {
    ScheduleError::new_err(format!(
        "unknown {what} field {field:?} (expected one of: {})",
        allowed.join(", ")
    ))
}

/// The scheduled-message dict `what` lacks its required field `name`.
pub fn missing_field(what: &str, name: &str) -> PyErr {
    ScheduleError::new_err(format!("{what} needs a {name:?} field"))
}

/// A schedule's epoch with a fraction of a second: more likely a mistake than meant.
pub fn fractional_epoch(seconds: f64) -> PyErr {
    ScheduleError::new_err(format!("epoch must be whole Unix seconds, got {seconds}"))
}

// ---- The producer ------------------------------------------------------------------------------

/// A record offered to a producer that is shut down (or shutting down).
pub fn producer_closed() -> PyErr {
    ClosedError::new_err("the producer is shut down")
}

/// A record refused because the queue is full: `message` says why and, for a batch, how many
/// of it were `accepted` before it.
pub fn buffer_overflow(
    message: String,
    topic: String,
    limit: String,
    accepted: Option<usize>,
) -> PyErr {
    BufferOverflow::new_err((message, topic, limit, accepted))
}

/// The error a record dropped by the `drop_oldest` policy is settled with.
pub fn dropped_by_drop_oldest() -> PyErr {
    BufferOverflow::new_err("dropped by drop_oldest")
}

// ---- Threads and processes ---------------------------------------------------------------------

/// The thread a blocking call runs on could not be started.
pub fn worker_thread_not_started(cause: std::io::Error) -> PyErr {
    FerrokafkaError::new_err(format!("cannot start a worker thread: {cause}"))
}

/// The thread a blocking call ran on ended without an answer (it panicked).
pub fn worker_thread_died() -> PyErr {
    FerrokafkaError::new_err("a ferrokafka worker thread died")
}

/// `what`, created in process `creator`, used in a forked child.
pub fn used_after_fork(what: &str, creator: u32) -> PyErr {
    FerrokafkaError::new_err(format!(
        "{what} was created in process {creator} and cannot be used after fork (this is process \
         {}); create a new one in the child",
        std::process::id()
    ))
}
