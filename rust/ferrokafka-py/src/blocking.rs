//! Waiting without the GIL, and refusing use after fork.
//!
//! Every call that can block goes through [`run_detached`]: the work runs on its own thread with
//! owned inputs, while the caller waits detached from the interpreter in slices of at most
//! [`SLICE`], re-attaching between slices to run signal handlers. Ctrl-C and Spark task kills
//! therefore interrupt a wait even when librdkafka is stuck on the network.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, sync_channel};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyBool;

use crate::errors::{
    invalid_argument, used_after_fork, worker_thread_died, worker_thread_not_started, wrong_type,
};

/// Longest time a wait goes without checking for signals.
pub const SLICE: Duration = Duration::from_millis(100);

/// Runs `work` on a worker thread and waits for it without holding the GIL.
pub fn run_detached<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (done, mut result) = sync_channel(1);
    std::thread::Builder::new()
        .name("ferrokafka-call".to_owned())
        .spawn(move || {
            // The waiter may have been interrupted and gone; the result is then dropped.
            let _ = done.send(work());
        })
        .map_err(worker_thread_not_started)?;
    loop {
        // The receiver is moved in and back out: it is Send but not Sync.
        let (received, receiver) = py.detach(move || (result.recv_timeout(SLICE), result));
        result = receiver;
        match received {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(worker_thread_died());
            }
        }
    }
}

/// Repeats `step(slice)` detached until it returns `Some`, checking signals between slices;
/// `None` once `timeout` seconds (forever when `None`) passed.
pub fn wait_sliced<T: Send>(
    py: Python<'_>,
    timeout: Option<f64>,
    step: impl Fn(Duration) -> Option<T> + Sync,
) -> PyResult<Option<T>> {
    let deadline = timeout
        .map(|t| timeout_arg("timeout", t))
        .transpose()?
        .map(|t| Instant::now() + t);
    loop {
        let slice = deadline.map_or(SLICE, |d| {
            d.saturating_duration_since(Instant::now()).min(SLICE)
        });
        if let Some(done) = py.detach(|| step(slice)) {
            return Ok(Some(done));
        }
        py.check_signals()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
    }
}

/// The process something was created in. librdkafka's threads (and ferrokafka's) do not survive
/// `fork()`: in a forked child an engine can neither be used nor dropped, since dropping joins
/// threads that do not exist there and tears down handles the parent still uses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CreatorProcess(u32);

impl CreatorProcess {
    pub(crate) fn current() -> Self {
        CreatorProcess(process_id())
    }

    /// False in a forked child.
    pub(crate) fn is_current(self) -> bool {
        process_id() == self.0
    }
}

/// This process's id, or 0 when forks cannot be watched. Every call of every binding checks it,
/// and glibc no longer caches `getpid`: a system call per `produce` was 5 % of a producer's
/// thread. So it is read once and refreshed in each forked child by a `pthread_atfork` handler.
static PROCESS_ID: AtomicU32 = AtomicU32::new(0);
static WATCH_FORKS: Once = Once::new();

/// The `pthread_atfork` child handler: runs in the child right after `fork()` (`getpid` is
/// async-signal-safe).
unsafe extern "C" fn refresh_process_id() {
    PROCESS_ID.store(std::process::id(), Ordering::Relaxed);
}

fn process_id() -> u32 {
    WATCH_FORKS.call_once(|| {
        // SAFETY: the handler only stores an integer; registering it has no other effect.
        let watched = unsafe { libc::pthread_atfork(None, None, Some(refresh_process_id)) } == 0;
        if watched {
            PROCESS_ID.store(std::process::id(), Ordering::Relaxed);
        }
    });
    match PROCESS_ID.load(Ordering::Relaxed) {
        0 => std::process::id(),
        id => id,
    }
}

/// Remembers the process that created an engine, to refuse its use after `fork()`.
#[derive(Debug)]
pub struct ForkGuard {
    creator: CreatorProcess,
    what: &'static str,
}

impl ForkGuard {
    /// A guard for an engine created now, in this process.
    pub fn new(what: &'static str) -> Self {
        ForkGuard {
            creator: CreatorProcess::current(),
            what,
        }
    }

    /// False in a forked child: a binding's own `Drop` then must not touch its engine (the
    /// engine itself is leaked by [`ReleaseOnDrop`]).
    pub fn in_creator(&self) -> bool {
        self.creator.is_current()
    }

    /// Fails when called from a process other than the creator (a forked child).
    pub fn check(&self) -> PyResult<()> {
        if self.in_creator() {
            Ok(())
        } else {
            Err(used_after_fork(self.what, self.creator.0))
        }
    }
}

/// The longest wait taken, about 31 years: a deadline this far ahead is still a valid
/// `Instant`, where `1e20` could not even be a `Duration`. Python cuts its own longer waits
/// (an `exit_timeout`) to this (`_validation.NATIVE_MAX_SECONDS`).
const MAX_SECONDS: f64 = 1e9;

/// `timeout=` in seconds as a method takes it: an int or a float (or what converts to one), not
/// a bool: Python counts `True` as 1, but `flush(True)` is a mistake, not a one-second wait.
/// Its range is checked where it is used ([`timeout_arg`]).
#[derive(Debug, Clone, Copy)]
pub struct TimeoutArg(pub f64);

impl<'a, 'py> FromPyObject<'a, 'py> for TimeoutArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.is_instance_of::<PyBool>() {
            return Err(wrong_type("timeout must be a number of seconds", &obj));
        }
        Ok(TimeoutArg(obj.extract()?))
    }
}

impl TimeoutArg {
    /// The wait, checked as [`timeout_arg`] checks it.
    pub fn duration(self) -> PyResult<Duration> {
        timeout_arg("timeout", self.0)
    }
}

/// Converts a timeout in seconds into a [`Duration`], refusing negative, zero, non-finite and
/// values over [`MAX_SECONDS`].
pub fn timeout_arg(name: &str, seconds: f64) -> PyResult<Duration> {
    if seconds.is_finite() && seconds > 0.0 && seconds <= MAX_SECONDS {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(invalid_argument(format!(
            "{name} must be a positive number of seconds up to {MAX_SECONDS:e} (about 31 \
             years), got {seconds}"
        )))
    }
}

/// A duration in seconds where 0 means "off" (an interval, a backoff); otherwise as
/// [`timeout_arg`].
pub fn seconds_or_off(name: &str, seconds: f64) -> PyResult<Duration> {
    if seconds == 0.0 {
        Ok(Duration::ZERO)
    } else {
        timeout_arg(name, seconds)
    }
}

/// The receiving end of an engine's event channel, drained by one Python thread at a time.
#[derive(Debug)]
pub struct EventInbox<E>(Mutex<Option<Receiver<E>>>);

impl<E: Send> EventInbox<E> {
    /// An inbox over `receiver`; `None` makes an inbox that never yields anything.
    pub fn new(receiver: Option<Receiver<E>>) -> Self {
        EventInbox(Mutex::new(receiver))
    }

    /// Waits detached up to `wait` for a first event, then takes what is ready, at most `max`.
    /// Returns nothing while another thread is draining.
    pub fn drain(&self, py: Python<'_>, wait: Duration, max: usize) -> Vec<E> {
        if wait.is_zero() {
            // Nothing to wait for, so the GIL is kept: an event loop looks here each time the
            // engine signals it, and releasing would let other threads take the GIL each time.
            return match self.0.lock() {
                Ok(slot) => slot
                    .as_ref()
                    .map_or_else(Vec::new, |receiver| receiver.try_iter().take(max).collect()),
                Err(_) => Vec::new(),
            };
        }
        let taken = self.0.lock().ok().and_then(|mut slot| slot.take());
        let Some(receiver) = taken else {
            return Vec::new();
        };
        // The receiver moves into the detached closure and back: it is Send but not Sync.
        let (events, receiver) = py.detach(move || {
            let mut events: Vec<E> = receiver.recv_timeout(wait).into_iter().collect();
            events.extend(receiver.try_iter().take(max.saturating_sub(events.len())));
            (events, receiver)
        });
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(receiver);
        }
        events
    }
}
