//! Where the engines' `log` records go: Python's `logging` (through pyo3-log, logger names
//! following the Rust modules, e.g. `ferrokafka_kafka.scheduler`), except once the interpreter
//! is exiting.
//!
//! An engine still alive when Python exits (a module global, or an object in a reference cycle
//! collected during finalization) is dropped then, and dropping it joins librdkafka's threads.
//! If one of those threads is logging at that moment ("connection refused" from a broker that is
//! already gone), pyo3-log must attach it to the interpreter, which PyO3 refuses during
//! finalization by parking the thread forever: the join never returns and the process hangs on
//! exit. So an `atexit` hook, which runs before finalization, switches the records to stderr.

use std::sync::atomic::{AtomicBool, Ordering};

use log::{Log, Metadata, Record};
use pyo3::prelude::*;
use pyo3_log::{Caching, Logger};

/// Set by the `atexit` hook: Python is exiting, records go to stderr.
static EXITING: AtomicBool = AtomicBool::new(false);

struct EngineLogger(Logger);

impl Log for EngineLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.0.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if EXITING.load(Ordering::Acquire) {
            if record.level() <= log::Level::Warn {
                eprintln!("{} {}: {}", record.level(), record.target(), record.args());
            }
        } else {
            self.0.log(record);
        }
    }

    fn flush(&self) {}
}

/// The `atexit` hook: from now on no engine thread attaches to the interpreter to log.
#[pyfunction]
fn _interpreter_exiting() {
    EXITING.store(true, Ordering::Release);
}

/// Installs the logger (once per process; a second import keeps the first) and its hook.
pub fn install(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let logger = Logger::new(py, Caching::LoggersAndLevels)?;
    log::set_max_level(log::LevelFilter::Debug);
    let _ = log::set_boxed_logger(Box::new(EngineLogger(logger)));
    let hook = wrap_pyfunction!(_interpreter_exiting, module)?;
    py.import("atexit")?.call_method1("register", (hook,))?;
    Ok(())
}
