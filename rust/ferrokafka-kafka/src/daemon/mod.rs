//! The daemons' common room: what the scheduler and the redelivery tracker (each a daemon thread
//! owning a group consumer and producing synchronously) share.
//!
//! Rooms: this file holds the daemon thread's handle ([`Daemon`]) and the status it publishes
//! ([`DaemonStatus`]); `group.rs` the group consumer (its settings, the context that records
//! rebalances, refused connections and statistics, the end-of-partition check); `sending.rs`
//! the synchronous producing (`send_all` and its context); `closing.rs` the stop (how a wait
//! for the broker ends once it is asked for, the shutdown budget, the final flush, the final
//! offset commit and the group leave).
//!
//! Threading: [`GroupContext::rebalance`] and [`FlushTracker::delivery`] run on librdkafka
//! threads; they only record events under a mutex (and signal a condvar) for the daemon thread
//! ([`GroupContext::take_events`], [`send_all`]). No Python ever runs here. librdkafka's
//! statistics reach [`GroupContext`] inside the consumer's poll, on the daemon thread, which
//! publishes them with its partitions' rows ([`DaemonStatus`]).

mod closing;
mod group;
mod sending;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferrokafka_core::tracking::SourceSample;

use crate::error::{KafkaIoError, KafkaResult};
use crate::statistics::GroupStatistics;

pub(crate) use closing::{
    SHUTDOWN_BUDGET, StopBound, commit_and_close, flush_before, resume_in_slices,
};
pub(crate) use group::{
    GroupContext, RebalanceEvent, at_partition_end, group_consumer_settings, require_group_id,
};
pub(crate) use sending::{
    FlushTracker, RoomWait, enqueue_with, send_all, send_waiting_for_room, synchronous_producer,
};

/// Wall-clock milliseconds since the epoch (0 if the clock is before 1970).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A running daemon (the scheduler, the redelivery tracker): its thread, its stop flag and the
/// status `S` it publishes after each loop. Stop it with [`Daemon::request_stop`] and
/// [`Daemon::wait`]; dropping it only asks it to stop (its thread shuts down on its own), so a
/// daemon nobody holds any more, such as one whose constructor's caller was interrupted while
/// it started, does not run on.
pub struct Daemon<S> {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    status: Arc<Mutex<S>>,
    /// Why the daemon ended on its own, if it did (see [`Daemon::failure`]).
    failure: Arc<Mutex<Option<KafkaIoError>>>,
    /// Its part of a process report, made from a status.
    sampler: Box<dyn Fn(S) -> SourceSample + Send + Sync>,
}

impl<S> Drop for Daemon<S> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl<S: Clone + Default + Send + 'static> Daemon<S> {
    /// Starts `run(status)` on a thread called `name`; `run` returns once `stop` is set, or
    /// with the error that ended the daemon before. `stop` is the flag
    /// [`Daemon::request_stop`] sets, made by the caller and held by what `run` owns (its loop
    /// and its clients: a wait for room in a full queue ends on it too). `sampler` makes the
    /// daemon's part of a process report from a status.
    pub(crate) fn spawn(
        name: &str,
        stop: Arc<AtomicBool>,
        sampler: impl Fn(S) -> SourceSample + Send + Sync + 'static,
        run: impl FnOnce(&Mutex<S>) -> KafkaResult<()> + Send + 'static,
    ) -> KafkaResult<Self> {
        let status = Arc::new(Mutex::new(S::default()));
        let failure = Arc::new(Mutex::new(None));
        let thread_status = Arc::clone(&status);
        let thread_failure = Arc::clone(&failure);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                if let Err(e) = run(&thread_status) {
                    *thread_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
            })
            .map_err(|e| KafkaIoError::InvalidArgument(format!("cannot start daemon: {e}")))?;
        Ok(Daemon {
            stop,
            thread: Mutex::new(Some(thread)),
            status,
            failure,
            sampler: Box::new(sampler),
        })
    }

    /// The error that ended the daemon without a stop request (its settings cannot work, see
    /// [`GroupContext::poll_error`]); None while it runs or after it was stopped.
    pub fn failure(&self) -> Option<KafkaIoError> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets the stop flag; the daemon finishes its loop and shuts down (final reports,
    /// offsets committed, group left). Returns at once.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Waits up to `wait` for the thread to end; true once it has.
    pub fn wait(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut slot = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match slot.as_ref() {
                None => return true,
                Some(handle) if handle.is_finished() => {
                    if let Some(handle) = slot.take() {
                        let _ = handle.join();
                    }
                    return true;
                }
                Some(_) if Instant::now() >= deadline => return false,
                Some(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// The status as of the daemon's last loop.
    pub fn status(&self) -> S {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The daemon's part of a process report, as of its last loop.
    pub fn report_sample(&self) -> SourceSample {
        (self.sampler)(self.status())
    }
}

impl<S: Clone + Default + Send + std::fmt::Debug + 'static> std::fmt::Debug for Daemon<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

/// What a daemon publishes after each loop (see [`Daemon::status`]): a row `P` per assigned
/// partition and its group consumer's state from librdkafka's latest statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonStatus<P> {
    /// One row per assigned partition.
    pub partitions: Vec<P>,
    /// The consumer group's state; `None` before the first statistics.
    pub group: Option<GroupStatistics>,
    /// Bytes per second received from and sent to the brokers by the group consumer between
    /// the latest two statistics; `None` before the second.
    pub transfer_rates: Option<(u64, u64)>,
}

impl<P> Default for DaemonStatus<P> {
    fn default() -> Self {
        DaemonStatus {
            partitions: Vec::new(),
            group: None,
            transfer_rates: None,
        }
    }
}

/// Publishes `status` for [`Daemon::status`].
pub(crate) fn publish<S>(slot: &Mutex<S>, status: S) {
    *slot.lock().unwrap_or_else(|p| p.into_inner()) = status;
}
