//! Waiting without the GIL, and refusing use after fork.
//!
//! Every call that can block goes through [`run_detached`]: the work runs on its own thread with
//! owned inputs, while the caller waits detached from the interpreter in slices of at most
//! [`SLICE`], re-attaching between slices to run signal handlers. Ctrl-C and Spark task kills
//! therefore interrupt a wait even when librdkafka is stuck on the network.

use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, sync_channel};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use ferrokafka_core::tracking::SourceSample;
use ferrokafka_kafka::Daemon;
use pyo3::prelude::*;

use crate::errors::{
    NativeError, invalid_argument, used_after_fork, worker_thread_died, worker_thread_not_started,
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
struct CreatorProcess(u32);

impl CreatorProcess {
    fn current() -> Self {
        CreatorProcess(process_id())
    }

    /// False in a forked child.
    fn is_current(self) -> bool {
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

/// Converts a timeout in seconds into a [`Duration`], refusing negative, zero and non-finite values.
pub fn timeout_arg(name: &str, seconds: f64) -> PyResult<Duration> {
    if seconds.is_finite() && seconds > 0.0 {
        Duration::try_from_secs_f64(seconds).map_err(|e| invalid_argument(format!("{name}: {e}")))
    } else {
        Err(invalid_argument(format!(
            "{name} must be a positive number of seconds, got {seconds}"
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
    crate::background_closes::close_in_background(cleanup);
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

/// How long a daemon collected while running may take to stop.
const STOP_ON_DROP: Duration = Duration::from_secs(30);

/// A daemon (scheduler, redelivery tracker) as its pyclass holds it: waits are sliced and
/// detached, use after fork is refused, and a handle collected while the daemon runs stops it
/// (final reports, offsets committed) rather than leaving it running with nothing to stop it.
#[derive(Debug)]
pub struct DaemonHandle<S: Clone + Default + Send + Sync + std::fmt::Debug + 'static> {
    daemon: ReleaseOnDrop<Arc<Daemon<S>>>,
    guard: ForkGuard,
}

impl<S: Clone + Default + Send + Sync + std::fmt::Debug + 'static> DaemonHandle<S> {
    /// Holds `daemon`, created now in this process; `what` names its Python class in errors.
    pub fn new(daemon: Daemon<S>, what: &'static str) -> Self {
        DaemonHandle {
            daemon: ReleaseOnDrop::new(Arc::new(daemon)),
            guard: ForkGuard::new(what),
        }
    }

    /// Asks the daemon to stop; returns at once.
    pub fn request_stop(&self) -> PyResult<()> {
        self.guard.check()?;
        self.daemon.request_stop();
        Ok(())
    }

    /// Waits up to `timeout` seconds (forever when None) for the daemon to end; true once it
    /// has. A daemon that ended on its own raises the error that ended it.
    pub fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        self.guard.check()?;
        let daemon = &**self.daemon;
        let ended = wait_sliced(py, timeout, |slice| daemon.wait(slice).then_some(()))?;
        if let Some(failure) = daemon.failure() {
            return Err(NativeError::from(failure).into());
        }
        Ok(ended.is_some())
    }

    /// The status as of the daemon's last loop.
    pub fn status(&self) -> S {
        self.daemon.status()
    }

    /// The daemon's part of a process report, as of its last loop.
    pub fn report_sample(&self) -> SourceSample {
        self.daemon.report_sample()
    }
}

impl<S: Clone + Default + Send + Sync + std::fmt::Debug + 'static> Drop for DaemonHandle<S> {
    fn drop(&mut self) {
        if !self.guard.in_creator() {
            return; // a forked child has no daemon thread to stop
        }
        let daemon = Arc::clone(&*self.daemon);
        release_gil_for(move || {
            daemon.request_stop();
            daemon.wait(STOP_ON_DROP);
        });
    }
}
