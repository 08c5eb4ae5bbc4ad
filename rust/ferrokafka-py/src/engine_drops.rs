//! How an engine is dropped from Python: without the GIL, never in a forked child, and never
//! on one of its own threads.
//!
//! Dropping an engine joins librdkafka's threads and ferrokafka's, which may be waiting for the
//! GIL to log through `pyo3-log`: [`ReleaseOnDrop`] drops it with the GIL released
//! ([`release_gil_for`]). An engine whose last reference goes on one of its own threads (a log
//! line or an `oauth_cb` running Python there, marked by [`engine_calling_python`]) cannot be
//! closed on that thread, which the close would join; it is closed on a `ferrokafka-close`
//! thread instead ([`close_in_background`]). Nothing waits for that thread, so a script ending
//! right then would cut the close short: a producer's "N message(s) not delivered" would never
//! be said. Each such close is counted here, and the `atexit` hook (`ferrokafka._exit`) waits
//! for the count to reach zero, within a bound ([`wait_for_background_closes`]).

use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use pyo3::prelude::*;

use crate::blocking::{CreatorProcess, wait_sliced};

thread_local! {
    /// Whether this thread is running Python code for an engine (see [`engine_calling_python`]).
    static ENGINE_CALLING_PYTHON: Cell<bool> = const { Cell::new(false) };
}

/// Runs `call`, in which a thread that an engine or librdkafka owns attaches to the interpreter
/// (to log through `logging`, to ask `oauth_cb` for a token). Python may free any object while
/// it runs there (a reference count reaching zero, a garbage collection), so [`release_gil_for`]
/// must not wait on this thread for a closing engine: the engine may be the one this thread
/// belongs to, which cannot be joined from itself.
pub fn engine_calling_python<R>(call: impl FnOnce() -> R) -> R {
    /// Restores the mark even if `call` panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ENGINE_CALLING_PYTHON.set(self.0);
        }
    }
    let _restore = Restore(ENGINE_CALLING_PYTHON.replace(true));
    call()
}

/// Whether this thread runs inside [`engine_calling_python`].
pub fn calling_python_for_an_engine() -> bool {
    ENGINE_CALLING_PYTHON.get()
}

/// Runs `cleanup` (an engine's close, a drop that joins its threads) with the GIL released, from
/// code that may hold it (such as a `Drop` run by the garbage collector): engine threads log
/// through `pyo3-log` and so may be waiting for the GIL, and joining them while holding it would
/// deadlock. On an engine's own thread calling Python ([`engine_calling_python`]) the cleanup
/// runs on a thread of its own instead, which this one does not wait for (that thread may be one
/// the cleanup joins), and which the interpreter's exit does.
pub fn release_gil_for<F: FnOnce() + Send + 'static>(cleanup: F) {
    if !calling_python_for_an_engine() {
        Python::attach(|py| py.detach(cleanup));
        return;
    }
    close_in_background(cleanup);
}

/// Owns an engine whose drop joins librdkafka or ferrokafka threads; drops it without the GIL
/// (see [`release_gil_for`]), and never in a forked child, where it is leaked instead: the
/// child exits cleanly and the parent's brokers see nothing from it.
pub struct ReleaseOnDrop<T: Send + 'static> {
    engine: ManuallyDrop<T>,
    creator: CreatorProcess,
}

impl<T: Send + 'static> ReleaseOnDrop<T> {
    /// Wraps `engine`, created now in this process.
    pub fn new(engine: T) -> Self {
        ReleaseOnDrop {
            engine: ManuallyDrop::new(engine),
            creator: CreatorProcess::current(),
        }
    }
}

impl<T: Send + 'static> Deref for ReleaseOnDrop<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.engine
    }
}

impl<T: Send + std::fmt::Debug + 'static> std::fmt::Debug for ReleaseOnDrop<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.engine.fmt(f)
    }
}

impl<T: Send + 'static> Drop for ReleaseOnDrop<T> {
    fn drop(&mut self) {
        if !self.creator.is_current() {
            return; // leaked: see the type's documentation
        }
        // SAFETY: the value is taken exactly once, here, and `self.engine` is never used
        // afterwards.
        let engine = unsafe { ManuallyDrop::take(&mut self.engine) };
        release_gil_for(move || drop(engine));
    }
}

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
fn close_in_background<F: FnOnce() + Send + 'static>(cleanup: F) {
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
    calling_python_for_an_engine()
}
