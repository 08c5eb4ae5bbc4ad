//! Where the engines' `log` records go: Python's `logging` (through pyo3-log, logger names
//! following the Rust modules, e.g. `ferrokafka_kafka.scheduling.dispatcher`), except once the
//! interpreter is exiting.
//!
//! An engine still alive when Python exits (a module global, or an object in a reference cycle
//! collected during finalization) is dropped then, and dropping it joins librdkafka's threads.
//! If one of those threads is logging at that moment ("connection refused" from a broker that is
//! already gone), pyo3-log must attach it to the interpreter, which PyO3 refuses during
//! finalization by parking the thread forever: the join never returns and the process hangs on
//! exit. So an `atexit` hook, which runs before finalization, switches the records to stderr.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use ferrokafka_kafka::redact;
use log::{Log, Metadata, Record};
use pyo3::prelude::*;
use pyo3_log::{Caching, Logger, ResetHandle};

use crate::engine_drops::engine_calling_python;

/// Set by the `atexit` hook: Python is exiting, records go to stderr.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Forgets the loggers' levels that pyo3-log cached (see [`reread_log_levels`]).
static CACHED_LEVELS: OnceLock<ResetHandle> = OnceLock::new();

struct EngineLogger(Logger);

// pyo3-log attaches the calling thread to the interpreter (to find a logger's level on a cache
// miss, to log): on an engine's thread, that is Python code run for the engine.
impl Log for EngineLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        engine_calling_python(|| self.0.enabled(metadata))
    }

    fn log(&self, record: &Record<'_>) {
        let exiting = EXITING.load(Ordering::Acquire);
        let shown = if exiting {
            record.level() <= log::Level::Warn
        } else {
            self.enabled(record.metadata())
        };
        if !shown {
            return; // not formatted, let alone searched for secrets
        }
        let text = record.args().to_string();
        let text = redact(&text);
        if exiting {
            eprintln!("{} {}: {text}", record.level(), record.target());
        } else {
            engine_calling_python(|| {
                self.0.log(
                    &Record::builder()
                        .metadata(record.metadata().clone())
                        .args(format_args!("{text}"))
                        .module_path(record.module_path())
                        .file(record.file())
                        .line(record.line())
                        .build(),
                );
            });
        }
    }

    fn flush(&self) {}
}

/// Whether the `atexit` hook ran: no engine thread may attach to the interpreter any more.
pub fn interpreter_exiting() -> bool {
    EXITING.load(Ordering::Acquire)
}

/// The `atexit` hook: from now on no engine thread attaches to the interpreter to log.
#[pyfunction]
fn _interpreter_exiting() {
    EXITING.store(true, Ordering::Release);
}

/// `text` without URL credentials, secret parameters or secret configuration values, as every
/// engine log line and exception is shown; for the log lines and errors of confluent-kafka's
/// clients (the share backend), which do not pass through the engines.
#[pyfunction]
pub fn redact_secrets(text: &str) -> String {
    redact(text).into_owned()
}

/// Makes the next records read their loggers' levels from Python's `logging` again.
///
/// pyo3-log caches each logger's level, so that an engine thread asks Python only once whether
/// a record is wanted (no GIL for a record nobody shows). `ferrokafka._log_levels` calls this
/// whenever Python's `logging` drops its own level cache (any `setLevel`, `basicConfig`,
/// `dictConfig`, `logging.disable`), so a level set at any time applies to the running engines.
#[pyfunction]
fn reread_log_levels() {
    if let Some(levels) = CACHED_LEVELS.get() {
        levels.reset();
    }
}

/// Installs the logger (once per process; a second import keeps the first) and its hook.
pub fn install(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let logger = Logger::new(py, Caching::LoggersAndLevels)?;
    log::set_max_level(log::LevelFilter::Debug);
    let levels = logger.reset_handle();
    if log::set_boxed_logger(Box::new(EngineLogger(logger))).is_ok() {
        let _ = CACHED_LEVELS.set(levels);
    }
    let hook = wrap_pyfunction!(_interpreter_exiting, module)?;
    py.import("atexit")?.call_method1("register", (hook,))?;
    module.add_function(wrap_pyfunction!(redact_secrets, module)?)?;
    module.add_function(wrap_pyfunction!(reread_log_levels, module)?)?;
    Ok(())
}
