//! [`StartPrefetch`]: the two threads of a queue consumer that read the next batches of the
//! queue topic, write their START markers and commit their offsets while the caller handles the
//! batch before (the markers path's prefetch).
//!
//! A batch moves through three stages in poll order: the prefetch thread polls it and dispatches
//! its START markers (while the STARTs of up to [`START_DEPTH`] batches before travel); once
//! they are all acknowledged it hands the batch to the commit thread, which commits its queue
//! offsets and makes it ready. After each dispatch the prefetch thread hands on every batch at
//! the front whose STARTs are reported, without waiting; it waits for the oldest only when
//! more than [`START_DEPTH`] travel, when no more may be polled, or when nothing came. So the
//! START round trips of several batches, the commit of an earlier one and the polling and
//! encoding of the next overlap instead of following each other, and a batch waits for its
//! own round trip, not for the polls of the batches behind it.
//!
//! Invariants:
//! - A record reaches [`StartPrefetch::take`] only after its START marker was acknowledged by
//!   the markers topic and its queue offset committed (or the commit failed after the START was
//!   durable: a restart then reads it again and its new START supersedes the old one). Batches
//!   are committed in poll order, each only after its STARTs are acknowledged (those confirmed
//!   while a commit travelled together, in the next one), so no commit passes a message whose
//!   START is not durable. A kill between a batch's STARTs and its commit brings that batch back
//!   twice (read again, and redelivered once its deadline passes): at-least-once.
//! - At most [`LOOKAHEAD_BATCHES`] batches are polled ahead of the caller, and only once the
//!   caller asked for records: prefetched messages are in flight (their deadline runs; automatic
//!   keepalive holds them) before anyone handles them.
//! - A batch whose START markers failed is not handed out, nor are the batches polled after it
//!   (committing them would pass the failed one): the consumer is rewound to their first
//!   offsets and the error is returned by the next `take`. STARTs of the later batches that did
//!   arrive are superseded by the ones written when they are read again (the tracker keeps one
//!   entry per id).
//! - Except a START refused for good (too large for the markers topic): the markers topic would
//!   refuse it on every read, so one bad message would block those behind it forever. Its
//!   neighbours in the same produce request are refused with it, so each START of that batch is
//!   written again alone; a message whose START is refused alone goes to the dead-letter topic
//!   (when there is one; until that write is acknowledged it counts as failed like any other)
//!   or back to the caller with its error from the next `take`, and the batch is committed past
//!   it. Either way it is logged and counted (`refused`), never handed out.
//! - When a poll brings nothing and every batch polled is on its way to the commit thread, a
//!   partition whose position is past its last record polled (a transaction's marker, aborted
//!   records) has that position committed behind those batches, so the lag reaches zero.
//! - The markers topic's partition count is read by the prefetch thread before the first batch
//!   (creating a consumer waits for no broker); while it cannot be read, `take` returns nothing,
//!   and after each `marker_timeout` of failures it returns the error once.
//! - A closing consumer waits at most [`STOP_GRACE`] for the STARTs already sent: a batch whose
//!   STARTs are not acknowledged by then is not committed (read again by the next reader). It
//!   waits at most [`JOIN_GRACE`] for its threads: a commit stuck on a vanished broker is left
//!   behind rather than holding the close for up to a minute. The records ready and never
//!   taken are handed to the closing consumer, which puts them back on the queue (see
//!   `release.rs`); a batch its left-behind commit makes ready later stays open, and the
//!   tracker redelivers it.
//!
//! Threading: the prefetch thread polls the queue consumer (its queue and the partitions' split
//! from it, sleeping on a [`Wake`] their non-empty callbacks set) and owns the START producer; the
//! commit thread shares the consumer (librdkafka allows a commit from another thread while one
//! polls) and receives batches over a channel; callers meet them only through the [`Handoff`]
//! mutex and condition variable. [`StartPrefetch::stop`] (or the drop) stops and joins both
//! threads (within one poll slice, or one START write; a commit is waited for up to
//! [`JOIN_GRACE`]).
//!
//! Rooms: this file holds the handoff to the callers, the threads' start and stop and the
//! tunables; `acks.rs` the START producer's context; `sources.rs` where the prefetch thread
//! takes records from (each assigned partition's own librdkafka queue, drained in runs) and the
//! consumer's context; `prefetcher.rs` the prefetch thread's polling and dispatch;
//! `confirm.rs` what becomes of a dispatched batch (acknowledged, refused for size, failed);
//! `committer.rs` the commit thread.

mod acks;
mod committer;
mod confirm;
mod prefetcher;
mod sources;

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::BaseConsumer;

use super::marker_writer::MarkerWriter;
use crate::batch_produce::BatchTopic;
use crate::client::Client;
use crate::error::{KafkaIoError, KafkaResult};
use crate::locks::wait_timeout;
use crate::polled_producer::PolledProducer;
use crate::record::ReceivedRecord;
use crate::wake::Wake;
pub(super) use acks::StartAcks;
use committer::Committer;
pub(crate) use sources::QueueContext;

/// Longest one poll of the queue consumer blocks, so a stop is noticed quickly.
const POLL_SLICE: Duration = Duration::from_millis(100);
/// Most batches polled and not yet taken by a caller: one ready, one being committed,
/// [`START_DEPTH`] whose STARTs travel and one being dispatched keep every stage busy; the
/// rest absorb the spread of the START round trips and commits. A batch takes a START round
/// trip (4-5 ms at these rates on a shared 2-core host) plus a commit (~1 ms) from dispatch to
/// ready, so the rate is at most this many batches per that time (benches/RESULTS.md, 300,000
/// messages in batches of 500: 24 was 1.08x as fast as 12, and 32 no faster than 24).
const LOOKAHEAD_BATCHES: usize = 24;
/// Batches whose START markers travel while the next one is polled and dispatched: a START
/// round trip (the producer's 1 ms linger, then the broker's acknowledgement) takes several
/// polls and dispatches of a batch, so the throughput is about this many batches per round
/// trip. Nearly all of [`LOOKAHEAD_BATCHES`]: waiting for the oldest batch's STARTs while
/// fewer than that many batches are out only left the prefetch thread idle
/// (benches/RESULTS.md).
const START_DEPTH: usize = 20;
/// How long a closing consumer still waits for the START markers it already sent.
const STOP_GRACE: Duration = Duration::from_secs(1);
/// Longest a closing consumer waits for its threads to end. One still in a synchronous commit
/// that a vanished broker does not answer (librdkafka waits up to `socket.timeout.ms`, 60 s) is
/// left to end on its own: the batch it commits was never handed out and its STARTs are
/// durable, so the tracker redelivers it whether or not the commit lands.
const JOIN_GRACE: Duration = Duration::from_secs(2);
/// Longest one attempt to read the markers topic's metadata, so a close is noticed.
const METADATA_ATTEMPT: Duration = Duration::from_secs(1);
/// The delivery opaque of a START written alone, or of a dead letter: one at a time.
const ALONE: usize = usize::MAX;
/// How often the prefetch thread looks whether the STARTs in flight are settled.
const SETTLE_POLL: Duration = Duration::from_millis(1);

/// A queue message whose START marker the markers topic refused for good and that no
/// dead-letter topic took: handed back to the caller with the error, never handed out.
#[derive(Debug)]
pub struct Refused {
    /// The message (its offset is committed).
    pub record: ReceivedRecord,
    /// Why the markers topic refused its START.
    pub error: KafkaIoError,
}

/// What a `take` got.
#[derive(Debug)]
pub enum Taken {
    /// Messages to hand out (none when nothing came in time).
    Records(Vec<ReceivedRecord>),
    /// A message handed back instead (see [`Refused`]).
    Refused(Box<Refused>),
}

/// What the prefetch threads and the callers share.
#[derive(Default)]
struct HandoffState {
    /// Records whose START is acknowledged and offsets committed, in poll order.
    ready: VecDeque<ReceivedRecord>,
    /// Records handed back instead, each returned once by `take`.
    refused: VecDeque<Refused>,
    /// Records polled and not yet taken by a caller (or given up after a failure).
    ahead: usize,
    /// The failure of the last batch, returned once by `take`.
    error: Option<KafkaIoError>,
    /// A caller asked for records: prefetching may begin.
    wanted: bool,
    stop: bool,
}

#[derive(Default)]
struct Handoff {
    state: Mutex<HandoffState>,
    changed: Condvar,
}

impl Handoff {
    fn lock(&self) -> MutexGuard<'_, HandoffState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The queue topic, where its markers go, and how the prefetch threads write them.
pub(super) struct PrefetchSetup {
    pub(super) consumer: BaseConsumer<QueueContext>,
    pub(super) starts: PolledProducer<StartAcks>,
    pub(super) writer: Arc<MarkerWriter>,
    /// Reads the markers topic's partition count; dropped once it is known.
    pub(super) metadata: Client,
    pub(super) queue_topic: String,
    /// Where a message whose START is refused for good goes; `None`: back to the caller.
    pub(super) dead_letter_topic: Option<String>,
    pub(super) max_batch_size: usize,
    pub(super) marker_timeout: Duration,
}

/// The running prefetch and commit threads; see the module docs.
pub(super) struct StartPrefetch {
    handoff: Arc<Handoff>,
    received: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    /// Joined in this order: the prefetch thread ends first and closes the commit channel.
    /// Emptied by the first [`StartPrefetch::stop`].
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl StartPrefetch {
    pub(super) fn spawn(setup: PrefetchSetup) -> KafkaResult<Self> {
        let handoff = Arc::new(Handoff::default());
        let received = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let mut consumer = setup.consumer;
        let wake = sources::wake_on_arrival(&mut consumer);
        let consumer = Arc::new(consumer);
        let (to_commit, batches) = mpsc::channel();
        let committer = Committer {
            consumer: Arc::clone(&consumer),
            writer: Arc::clone(&setup.writer),
            queue_topic: setup.queue_topic.clone(),
            handoff: Arc::clone(&handoff),
            received: Arc::clone(&received),
        };
        let starts = BatchTopic::new(setup.starts, setup.writer.markers_topic()).map_err(|e| {
            KafkaIoError::from_rdkafka("create markers producer", e, setup.marker_timeout, None)
        })?;
        let prefetcher = Prefetcher {
            consumer,
            wake,
            starts,
            writer: setup.writer,
            queue_topic: setup.queue_topic,
            dead_letter_topic: setup.dead_letter_topic,
            max_batch_size: setup.max_batch_size.max(1),
            marker_timeout: setup.marker_timeout,
            handoff: Arc::clone(&handoff),
            to_commit,
            refused: Arc::clone(&refused),
            stopping_since: Cell::new(None),
        };
        let metadata = setup.metadata;
        let start = |name: &str, body: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(body)
                .map_err(|e| KafkaIoError::InvalidArgument(format!("cannot start {name}: {e}")))
        };
        // Should the prefetch thread fail to start, its dropped sender ends the commit thread.
        let commit_thread = start(
            "ferrokafka-queue-commit",
            Box::new(move || committer.run(&batches)),
        )?;
        let prefetch_thread = start(
            "ferrokafka-queue-prefetch",
            Box::new(move || prefetcher.run(metadata)),
        )?;
        Ok(StartPrefetch {
            handoff,
            received,
            refused,
            threads: Mutex::new(vec![prefetch_thread, commit_thread]),
        })
    }

    /// Waits up to `wait` for prepared records and takes at most `max` of them (none when
    /// nothing came), or a message handed back; the error of a failed batch is returned once.
    pub(super) fn take(&self, max: usize, wait: Duration) -> KafkaResult<Taken> {
        let deadline = Instant::now() + wait;
        let mut state = self.handoff.lock();
        if !state.wanted {
            state.wanted = true;
            self.handoff.changed.notify_all();
        }
        loop {
            // A close began: nothing more is handed out (the close puts back what is ready).
            if state.stop {
                return Ok(Taken::Records(Vec::new()));
            }
            if let Some(e) = state.error.take() {
                // The prefetch thread waits until the error is reported, then reads again.
                self.handoff.changed.notify_all();
                return Err(e);
            }
            if let Some(refused) = state.refused.pop_front() {
                return Ok(Taken::Refused(Box::new(refused)));
            }
            if !state.ready.is_empty() {
                let count = max.max(1).min(state.ready.len());
                let records: Vec<ReceivedRecord> = state.ready.drain(..count).collect();
                state.ahead = state.ahead.saturating_sub(count);
                // The prefetch thread may poll another batch once these are taken.
                self.handoff.changed.notify_all();
                return Ok(Taken::Records(records));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Taken::Records(Vec::new()));
            }
            state = wait_timeout(&self.handoff.changed, state, left);
        }
    }

    /// Messages handed to the prefetch buffer so far (START written, offsets committed).
    pub(super) fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Messages whose START the markers topic refused for good (dead-lettered or handed back).
    pub(super) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl StartPrefetch {
    /// A close began: `take` hands out nothing from now on (one waiting returns at once), and
    /// both threads begin to stop.
    pub(super) fn stop_handing_out(&self) {
        self.handoff.lock().stop = true;
        self.handoff.changed.notify_all();
    }

    /// Stops and joins both threads (see the module docs) and returns the records that were
    /// ready and never taken: in flight, their STARTs durable and their offsets committed, so
    /// the caller must end them one way or another. Idempotent: a second call returns none.
    pub(super) fn stop(&self) -> Vec<ReceivedRecord> {
        self.stop_handing_out();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        let deadline = Instant::now() + JOIN_GRACE;
        for thread in threads {
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if thread.is_finished() {
                let _ = thread.join();
            } else {
                // Dropping the handle detaches the thread; it holds what it uses.
                log::warn!(
                    "queue consumer closing: a commit still unanswered after {:?} (the broker is \
                     unreachable, or its group is rebalancing: members joining or leaving) is \
                     left to end on its own; its batch was not handed out and its STARTs are \
                     durable, so the tracker redelivers it",
                    JOIN_GRACE
                );
            }
        }
        let mut state = self.handoff.lock();
        state.ahead = 0;
        state.ready.drain(..).collect()
    }
}

impl Drop for StartPrefetch {
    /// Without a close that ends them, the records never taken stay open: the tracker
    /// redelivers them after their deadline.
    fn drop(&mut self) {
        self.stop();
    }
}

/// A polled batch whose START markers are dispatched; `set_at` is when their deadline was set.
struct Dispatched {
    number: usize,
    records: Vec<ReceivedRecord>,
    set_at: Instant,
    /// Positions of messages refused for good, committed with the batch but not handed out.
    passed: Vec<(i32, i64)>,
    /// The refused messages no dead-letter topic took, for the caller.
    handed_back: Vec<Refused>,
    /// Positions (next offsets) the consumer moved to past no message: a transaction's marker
    /// or aborted records that end a partition. Committed, so the group's lag reaches zero.
    passed_to: Vec<(i32, i64)>,
}

/// The prefetch thread: polls batches and writes their START markers.
struct Prefetcher {
    consumer: Arc<BaseConsumer<QueueContext>>,
    /// Woken when the consumer's queue or a partition's becomes non-empty.
    wake: Arc<Wake>,
    starts: BatchTopic<StartAcks>,
    writer: Arc<MarkerWriter>,
    queue_topic: String,
    dead_letter_topic: Option<String>,
    max_batch_size: usize,
    marker_timeout: Duration,
    handoff: Arc<Handoff>,
    to_commit: mpsc::Sender<Dispatched>,
    refused: Arc<AtomicU64>,
    /// When this thread first saw the stop request.
    stopping_since: Cell<Option<Instant>>,
}
