//! Engines closed on a thread of their own, and the interpreter's exit waiting for them.
//!
//! An engine whose last reference goes on one of its own threads (a log line or an `oauth_cb`
//! running Python there) cannot be closed on that thread, which the close would join; it is
//! closed on a `ferrokafka-close` thread instead (see `blocking::release_gil_for`). Nothing
//! waits for that thread, so a script ending right then would cut the close short: a producer's
//! "N message(s) not delivered" would never be said. Each such close is counted here, and the
//! `atexit` hook (`ferrokafka._exit`) waits for the count to reach zero, within a bound.

use pyo3::prelude::*;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::blocking::wait_sliced;

/// How many closes run on their own threads now, and a signal each time one ends.
static RUNNING: Mutex<usize> = Mutex::new(0);
static ENDED: Condvar = Condvar::new();

fn running() -> MutexGuard<'static, usize> {
    RUNNING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Counts one close from before its thread starts until it ended, even by a panic.
struct Counted;

impl Counted {
    fn new() -> Self {
        *running() += 1;
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        *running() -= 1;
        ENDED.notify_all();
    }
}

/// Runs `cleanup` on a `ferrokafka-close` thread and returns at once. When no thread can start,
/// the engine is leaked (and that logged) rather than closed on the calling thread, which may be
/// one the close joins.
pub fn close_in_background<F: FnOnce() + Send + 'static>(cleanup: F) {
    let counted = Counted::new();
    // Kept here too, so that a thread that cannot start leaves the engine with this caller.
    let slot = Arc::new(Mutex::new(Some(cleanup)));
    let taken = Arc::clone(&slot);
    let started = std::thread::Builder::new()
        .name("ferrokafka-close".to_owned())
        .spawn(move || {
            let _counted = counted;
            if let Some(cleanup) = taken.lock().ok().and_then(|mut slot| slot.take()) {
                cleanup();
            }
        });
    if let Err(e) = started {
        log::error!(
            "an engine collected on its own thread is left open: no thread to close it: {e}"
        );
        std::mem::forget(slot.lock().ok().and_then(|mut slot| slot.take()));
    }
}

/// Waits up to `timeout` seconds for the engines being closed on threads of their own (clients
/// whose last reference went on one of their own threads) and returns how many still are;
/// `timeout` must be positive.
#[pyfunction]
pub fn wait_for_background_closes(py: Python<'_>, timeout: f64) -> PyResult<usize> {
    let left = wait_sliced(py, Some(timeout), |slice| {
        let count = running();
        let (count, _) = ENDED
            .wait_timeout_while(count, slice, |count| *count > 0)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (*count == 0).then_some(0)
    })?;
    Ok(left.unwrap_or_else(|| *running()))
}

/// Whether this thread is one an engine or librdkafka owns, running Python for it (a log line on
/// its way to `logging`, an `oauth_cb`): a close started here must not wait for the engine's
/// threads, which may include this one.
#[pyfunction]
pub fn on_engine_thread() -> bool {
    crate::blocking::calling_python_for_an_engine()
}
