//! [`ConcurrentConsumer::fetch_ready`]: workers waiting for records without a thread. An event
//! loop registers the workers whose partitions ran dry
//! ([`ConcurrentConsumer::wait_for_records`]) and watches [`ConcurrentConsumer::ready_fd`] (with
//! asyncio's `add_reader`). The engine writes one byte to it when a registered worker's slot
//! changes (records routed, a batch settled, the slot closed), once until the loop reads it, and
//! the loop then takes every batch that is ready without waiting: records reach the loop with no
//! thread hop, and no thread waits for dry partitions at all. Every event the engine queues for
//! the bindings signals it too, so the loop also takes events without a thread waiting for them
//! (a thread hop per event cost the loop about a tenth of its time when pauses and resumes,
//! about one of each a batch, were events).

use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Duration;

use super::ConcurrentConsumer;
use super::events::{Fetched, WorkerId};
use crate::error::{KafkaIoError, KafkaResult};
use crate::locks::lock;

/// The registered workers and the signal the event loop watches: a non-blocking socket pair,
/// the engine writing one end and the loop reading the other. It is made when the loop first
/// asks for [`ConcurrentConsumer::ready_fd`] (a consumer driven by threads never holds one) and
/// closed when the loop is done with it ([`ConcurrentConsumer::release_ready_fd`]) or the engine
/// is dropped: a stopped consumer its owner keeps holds no descriptor.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    state: Mutex<WaitingState>,
}

#[derive(Debug, Default)]
struct WaitingState {
    workers: BTreeSet<WorkerId>,
    /// A byte is written and not yet read: another write would only wake the loop twice.
    signalled: bool,
    signal: Option<Signal>,
}

#[derive(Debug)]
struct Signal {
    write: UnixStream,
    read: UnixStream,
}

impl Signal {
    fn new() -> io::Result<Self> {
        let (write, read) = UnixStream::pair()?;
        write.set_nonblocking(true)?;
        read.set_nonblocking(true)?;
        Ok(Signal { write, read })
    }

    /// Reads every byte written so far (the loop's reader callback would fire again otherwise).
    fn drain(&self) {
        let mut bytes = [0u8; 64];
        while let Ok(read) = (&self.read).read(&mut bytes) {
            if read < bytes.len() {
                break;
            }
        }
    }
}

impl Waiting {
    /// `worker`'s slot changed: if it is registered, it may find a batch now.
    pub(super) fn notify(&self, worker: WorkerId) {
        let mut state = lock(&self.state);
        if state.workers.contains(&worker) {
            state.signal();
        }
    }

    /// An event was queued for the bindings: a loop that watches the signal takes it when it
    /// reads the signal, so no thread waits for events either.
    pub(super) fn notify_event(&self) {
        lock(&self.state).signal();
    }
}

impl WaitingState {
    fn signal(&mut self) {
        // Without a signal nobody watches.
        if !self.signalled
            && let Some(signal) = &self.signal
        {
            self.signalled = true;
            // A full socket buffer means a wake-up is pending already: nothing is lost.
            let _ = (&signal.write).write(&[1]);
        }
    }
}

impl ConcurrentConsumer {
    /// Registers `worker` (whose `fetch` found nothing) for [`Self::fetch_ready`]. Records
    /// routed (or the partition closed) between that `fetch` and the registration found the
    /// worker unregistered and signalled nothing, so its slot is looked at once registered, and
    /// [`Self::ready_fd`] signalled if a fetch may find something now; a change after that look
    /// finds the worker registered and signals itself. (Signalling on every registration cost
    /// the loop a wake-up per batch that found nothing.)
    pub fn wait_for_records(&self, worker: WorkerId) {
        lock(&self.shared.waiting.state).workers.insert(worker);
        let ready = self.shared.slot(worker).is_none_or(|slot| {
            let slot = slot.lock();
            slot.closed || slot.may_hand_out(self.shared.options.concurrency())
        });
        if ready {
            lock(&self.shared.waiting.state).signal();
        }
    }

    /// The file descriptor that becomes readable when a registered worker may find a batch or
    /// an event was queued; [`Self::fetch_ready`] reads it. Made on the first call; valid until
    /// [`Self::release_ready_fd`].
    pub fn ready_fd(&self) -> KafkaResult<RawFd> {
        let mut state = lock(&self.shared.waiting.state);
        let signal = match state.signal.take() {
            Some(signal) => signal,
            None => Signal::new().map_err(|e| {
                KafkaIoError::Config(format!("cannot create the consumer's ready signal: {e}"))
            })?,
        };
        let fd = signal.read.as_raw_fd();
        state.signal = Some(signal);
        Ok(fd)
    }

    /// Closes [`Self::ready_fd`]: the loop no longer watches it (its reader is removed).
    pub fn release_ready_fd(&self) {
        let mut state = lock(&self.shared.waiting.state);
        state.signal = None;
        state.signalled = false;
    }

    /// Without waiting: what every registered worker whose `fetch` finds a batch, or that its
    /// partition is gone, found (those leave the register); empty when none did. Reads
    /// [`Self::ready_fd`] first, so a change while it looks signals it again.
    pub fn fetch_ready(&self) -> KafkaResult<Vec<(WorkerId, Fetched)>> {
        let waiting = &self.shared.waiting;
        let workers: Vec<WorkerId> = {
            let mut state = lock(&waiting.state);
            if let Some(signal) = &state.signal {
                signal.drain();
            }
            state.signalled = false;
            state.workers.iter().copied().collect()
        };
        let mut found = Vec::new();
        for worker in workers {
            match self.fetch(worker, Duration::ZERO)? {
                Fetched::Empty => {}
                fetched => found.push((worker, fetched)),
            }
        }
        let mut state = lock(&waiting.state);
        for (worker, _) in &found {
            state.workers.remove(worker);
        }
        Ok(found)
    }
}
