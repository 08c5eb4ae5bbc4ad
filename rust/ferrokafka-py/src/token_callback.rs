//! A Python `oauth_cb` (confluent-kafka's OAUTHBEARER token callback) as an engine token source.
//!
//! librdkafka asks for a token on the thread that polls a client (see
//! `ferrokafka_kafka::oauth`): the source attaches that thread to the interpreter for the call
//! only. The callback gets the `sasl.oauthbearer.config` string (or None) and returns
//! `(token, expiry)` or `(token, expiry, principal, extensions)`, expiry in seconds since the
//! epoch, as for confluent-kafka. Whatever it raises, or a result of another shape, is logged on
//! the `ferrokafka.oauth` logger with its traceback and becomes the token failure librdkafka
//! reports as the client's authentication error. The token itself is never logged.

use std::sync::Arc;

use ferrokafka_kafka::{BearerToken, TokenSource};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::engine_drops::engine_calling_python;
use crate::engine_log::interpreter_exiting;
use crate::errors::{invalid_argument, wrong_type};

/// The principal of a token whose callback names none (librdkafka refuses an empty one;
/// confluent-kafka's own default for a 2-tuple is the same).
const DEFAULT_PRINCIPAL: &str = "ferrokafka";

/// The engines' token source calling `callback`.
pub fn token_source(callback: Py<PyAny>) -> TokenSource {
    Arc::new(move |config: Option<&str>| {
        if interpreter_exiting() {
            return Err("Python is exiting: oauth_cb is not called any more".to_owned());
        }
        engine_calling_python(|| {
            Python::attach(|py| {
                let made = callback
                    .call1(py, (config,))
                    .and_then(|returned| bearer_token(returned.bind(py)));
                made.map_err(|error| {
                    let reason = format!(
                        "{}: {}",
                        error
                            .get_type(py)
                            .name()
                            .map_or_else(|_| "?".to_owned(), |n| n.to_string(),),
                        error.value(py)
                    );
                    log_failure(py, &reason, &error);
                    reason
                })
            })
        })
    })
}

/// `(token, expiry)` or `(token, expiry, principal, extensions)`.
fn bearer_token(returned: &Bound<'_, PyAny>) -> PyResult<BearerToken> {
    let shape_error = || {
        wrong_type(
            "oauth_cb must return (token, expiry_epoch_seconds) or (token, expiry, principal, \
             extensions)",
            returned,
        )
    };
    let tuple = returned.cast::<PyTuple>().map_err(|_| shape_error())?;
    if tuple.len() != 2 && tuple.len() != 4 {
        return Err(shape_error());
    }
    let token: String = tuple.get_item(0)?.extract()?;
    let expiry: f64 = tuple.get_item(1)?.extract()?;
    let principal = if tuple.len() == 4 {
        let extensions = tuple.get_item(3)?;
        let has_extensions =
            !extensions.is_none() && extensions.cast::<PyDict>().map_or(true, |d| !d.is_empty());
        if has_extensions {
            return Err(invalid_argument(
                "oauth_cb returned SASL extensions, which ferrokafka cannot send (rdkafka sets \
                 tokens without them): return an empty dict or None",
            ));
        }
        tuple.get_item(2)?.extract::<Option<String>>()?
    } else {
        None
    };
    if !expiry.is_finite() {
        return Err(invalid_argument(format!(
            "oauth_cb returned the expiry {expiry}, not seconds since the epoch"
        )));
    }
    Ok(BearerToken {
        token,
        expires_at_ms: (expiry * 1000.0) as i64,
        principal: principal
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| DEFAULT_PRINCIPAL.to_owned()),
    })
}

/// Logs the callback's failure with its traceback on `ferrokafka.oauth`.
fn log_failure(py: Python<'_>, reason: &str, error: &PyErr) {
    let logged = py
        .import("logging")
        .and_then(|logging| logging.call_method1("getLogger", ("ferrokafka.oauth",)))
        .and_then(|logger| {
            // The value alone does not carry the traceback PyO3 fetched with it.
            let exception = error.value(py);
            exception.setattr("__traceback__", error.traceback(py))?;
            let kwargs = PyDict::new(py);
            kwargs.set_item("exc_info", exception)?;
            logger.call_method(
                "error",
                (
                    "oauth_cb failed, the client cannot authenticate: %s",
                    reason,
                ),
                Some(&kwargs),
            )
        });
    if let Err(e) = logged {
        e.write_unraisable(py, None);
    }
}
