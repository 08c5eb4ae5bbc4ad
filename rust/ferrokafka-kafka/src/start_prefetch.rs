//! [`StartPrefetch`]: the two threads of a queue consumer that read the next batches of the
//! queue topic, write their START markers and commit their offsets while the caller handles the
//! batch before (the markers path's prefetch).
//!
//! A batch moves through three stages in poll order: the prefetch thread polls it and dispatches
//! its START markers (while the STARTs of up to [`START_DEPTH`] batches before travel), waits
//! until they are acknowledged and hands it to the commit thread, which commits its queue
//! offsets and makes it ready. So the START round trips of several batches, the commit of an
//! earlier one and the polling and encoding of the next overlap instead of following each other.
//!
//! Invariants:
//! - A record reaches [`StartPrefetch::take`] only after its START marker was acknowledged by
//!   the markers topic and its queue offset committed (or the commit failed after the START was
//!   durable: a restart then reads it again and its new START supersedes the old one). Batches
//!   are committed one at a time in poll order, each only after its STARTs are acknowledged, so
//!   no commit passes a message whose START is not durable.
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
//! - The markers topic's partition count is read by the prefetch thread before the first batch
//!   (creating a consumer waits for no broker); while it cannot be read, `take` returns nothing,
//!   and after each `marker_timeout` of failures it returns the error once.
//! - A closing consumer waits at most [`STOP_GRACE`] for the STARTs already sent: a batch whose
//!   STARTs are not acknowledged by then is not committed (read again by the next reader). It
//!   waits at most [`JOIN_GRACE`] for its threads: a commit stuck on a vanished broker is left
//!   behind rather than holding the close for up to a minute.
//!
//! Threading: the prefetch thread polls the queue consumer and owns the START producer; the
//! commit thread shares the consumer (librdkafka allows a commit from another thread while one
//! polls) and receives batches over a channel; callers meet them only through the [`Handoff`]
//! mutex and condition variable. Dropping the [`StartPrefetch`] stops and joins both threads
//! (within one poll slice, or one START write; a commit is waited for up to [`JOIN_GRACE`]).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrokafka_core::codec::marker_codec::{StartParts, append_start};
use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::batch_produce::{BatchTopic, Payloads};
use crate::client::Client;
use crate::daemon::enqueue_with;
use crate::error::{KafkaIoError, KafkaResult};
use crate::marker_writer::{MarkerWriter, message_id};
use crate::oauth::{TokenContext, TokenRefresh, answer_token_refresh};
use crate::record::ReceivedRecord;
use crate::redelivery::{dead_letter, redelivery_count};

/// Longest one poll of the queue consumer blocks, so a stop is noticed quickly.
const POLL_SLICE: Duration = Duration::from_millis(100);
/// Most batches polled and not yet taken by a caller: one ready, one being committed,
/// [`START_DEPTH`] whose STARTs travel and one being dispatched keep every stage busy.
const LOOKAHEAD_BATCHES: usize = 6;
/// Batches whose START markers travel while the next one is polled and dispatched: a START
/// round trip takes about two polls and dispatches of a batch, so more than one must travel
/// to keep the prefetch thread busy (benches/RESULTS.md: 3 was the fastest of 1 to 4).
const START_DEPTH: usize = 3;
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

/// Counts the START markers of each batch still unacknowledged (the delivery opaque is the
/// batch number), so the prefetch thread can wait for one batch while the next one's travel.
pub(crate) struct StartAcks {
    batches: Mutex<HashMap<usize, BatchAcks>>,
    settled: Condvar,
    tokens: TokenRefresh,
}

#[derive(Default)]
struct BatchAcks {
    pending: usize,
    failure: Option<KafkaError>,
}

impl StartAcks {
    pub(crate) fn new(tokens: TokenRefresh) -> Self {
        StartAcks {
            batches: Mutex::new(HashMap::new()),
            settled: Condvar::new(),
            tokens,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<usize, BatchAcks>> {
        self.batches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `count` STARTs of `batch` are about to be handed to librdkafka.
    fn expect(&self, batch: usize, count: usize) {
        self.lock().insert(
            batch,
            BatchAcks {
                pending: count,
                failure: None,
            },
        );
    }

    /// `batch` failed before librdkafka took all of it: settled at once with `failure` (the
    /// reports of what it took are ignored).
    fn fail_now(&self, batch: usize, failure: KafkaError) {
        self.lock().insert(
            batch,
            BatchAcks {
                pending: 0,
                failure: Some(failure),
            },
        );
    }

    /// Stops counting `batch` (its late reports are ignored).
    fn forget(&self, batch: usize) {
        self.lock().remove(&batch);
    }

    /// Waits up to `timeout` until every START of `batch` is reported: `None` while some are
    /// not (still counted), else the first failure (no longer counted).
    fn settled(&self, batch: usize, timeout: Duration) -> Option<Result<(), KafkaError>> {
        let (mut batches, _) = self
            .settled
            .wait_timeout_while(self.lock(), timeout, |b| {
                b.get(&batch).is_some_and(|acks| acks.pending > 0)
            })
            .unwrap_or_else(|p| p.into_inner());
        if batches.get(&batch).is_some_and(|acks| acks.pending > 0) {
            return None;
        }
        let acks = batches.remove(&batch).unwrap_or_default();
        Some(acks.failure.map_or(Ok(()), Err))
    }
}

impl ClientContext for StartAcks {
    answer_token_refresh!(tokens);

    // rdkafka's default logs every error at ERROR, the broker failures librdkafka logs itself too.
    fn error(&self, error: KafkaError, reason: &str) {
        crate::client::log_unless_end(error, reason);
    }
}

impl ProducerContext for StartAcks {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, batch: usize) {
        let mut batches = self.lock();
        let Some(acks) = batches.get_mut(&batch) else {
            return;
        };
        acks.pending = acks.pending.saturating_sub(1);
        if let Err((err, _)) = result {
            acks.failure.get_or_insert_with(|| err.clone());
        }
        // Waking the waiter for every report of a large batch would only make it contend.
        if acks.pending == 0 {
            self.settled.notify_all();
        }
    }
}

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
pub(crate) struct PrefetchSetup {
    pub(crate) consumer: BaseConsumer<TokenContext>,
    pub(crate) starts: ThreadedProducer<StartAcks>,
    pub(crate) writer: Arc<MarkerWriter>,
    /// Reads the markers topic's partition count; dropped once it is known.
    pub(crate) metadata: Client,
    pub(crate) queue_topic: String,
    /// Where a message whose START is refused for good goes; `None`: back to the caller.
    pub(crate) dead_letter_topic: Option<String>,
    pub(crate) max_batch_size: usize,
    pub(crate) marker_timeout: Duration,
}

/// The running prefetch and commit threads; see the module docs.
pub(crate) struct StartPrefetch {
    handoff: Arc<Handoff>,
    received: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    /// Joined in this order: the prefetch thread ends first and closes the commit channel.
    threads: Vec<JoinHandle<()>>,
}

impl StartPrefetch {
    pub(crate) fn spawn(setup: PrefetchSetup) -> KafkaResult<Self> {
        let handoff = Arc::new(Handoff::default());
        let received = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let consumer = Arc::new(setup.consumer);
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
            threads: vec![prefetch_thread, commit_thread],
        })
    }

    /// Waits up to `wait` for prepared records and takes at most `max` of them (none when
    /// nothing came), or a message handed back; the error of a failed batch is returned once.
    pub(crate) fn take(&self, max: usize, wait: Duration) -> KafkaResult<Taken> {
        let deadline = Instant::now() + wait;
        let mut state = self.handoff.lock();
        if !state.wanted {
            state.wanted = true;
            self.handoff.changed.notify_all();
        }
        loop {
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
            state = self
                .handoff
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Messages handed to the prefetch buffer so far (START written, offsets committed).
    pub(crate) fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Messages whose START the markers topic refused for good (dead-lettered or handed back).
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl Drop for StartPrefetch {
    fn drop(&mut self) {
        self.handoff.lock().stop = true;
        self.handoff.changed.notify_all();
        let deadline = Instant::now() + JOIN_GRACE;
        for thread in self.threads.drain(..) {
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if thread.is_finished() {
                let _ = thread.join();
            } else {
                // Dropping the handle detaches the thread; it holds what it uses.
                log::warn!(
                    "queue consumer closing: a commit the broker does not answer is left to end \
                     on its own (its batch was not handed out; its STARTs are durable)"
                );
            }
        }
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
}

/// What the prefetch thread may do next.
enum Room {
    /// Poll another batch.
    Poll,
    /// Nothing more may be polled now: finish the batch whose STARTs travel.
    Full,
    Stop,
}

/// The prefetch thread: polls batches and writes their START markers.
struct Prefetcher {
    consumer: Arc<BaseConsumer<TokenContext>>,
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

impl Prefetcher {
    fn run(self, metadata: Client) {
        let known = self.learn_markers_partitions(&metadata);
        drop(metadata);
        if !known {
            return;
        }
        // Batches whose START markers travel while the next one is polled and dispatched.
        let mut travelling: VecDeque<Dispatched> = VecDeque::new();
        let mut numbers = 0_usize..;
        loop {
            let first_wait = match self.room(!travelling.is_empty()) {
                Room::Stop => break,
                Room::Full => {
                    self.confirm_first(&mut travelling);
                    continue;
                }
                Room::Poll if travelling.is_empty() => POLL_SLICE,
                Room::Poll => Duration::ZERO,
            };
            let number = numbers.next().unwrap_or_default();
            let fresh = self.poll_and_dispatch(number, first_wait);
            let idle = fresh.is_none();
            travelling.extend(fresh);
            // Nothing more came: the travelling batches need not wait for another.
            if idle || travelling.len() > START_DEPTH {
                self.confirm_first(&mut travelling);
            }
        }
        // Stopping: commit the batches whose STARTs are out, so that only the tracker brings
        // their messages back (once, after their deadline), not also the next reader of the queue.
        while !travelling.is_empty() {
            self.confirm_first(&mut travelling);
        }
    }

    /// Reads the markers topic's partition count, trying again until it is known (true) or
    /// the consumer closes (false). A failure that lasted the marker timeout, or that is not a
    /// timeout (no such topic), is handed to the next `take`.
    fn learn_markers_partitions(&self, metadata: &Client) -> bool {
        let topic = self.writer.markers_topic().to_owned();
        let mut failing_since = Instant::now();
        while self.stop_seen().is_none() {
            let error = match metadata
                .list_topics(Some(&topic), METADATA_ATTEMPT.min(self.marker_timeout))
            {
                Ok(cluster) => {
                    let count = cluster
                        .topics
                        .iter()
                        .find(|t| t.name == topic)
                        .map_or(0, |t| t.partitions.len());
                    match i32::try_from(count) {
                        Ok(count) if count > 0 => {
                            self.writer.set_markers_partitions(count);
                            return true;
                        }
                        _ => KafkaIoError::InvalidArgument(format!(
                            "markers topic {topic:?} does not exist"
                        )),
                    }
                }
                Err(KafkaIoError::Timeout { bootstrap, .. })
                    if failing_since.elapsed() >= self.marker_timeout =>
                {
                    KafkaIoError::Timeout {
                        operation: format!("reading the markers topic {topic:?}"),
                        timeout: self.marker_timeout,
                        bootstrap,
                    }
                }
                Err(KafkaIoError::Timeout { .. }) => continue,
                Err(other) => other,
            };
            failing_since = Instant::now();
            let mut state = self.handoff.lock();
            state.error.get_or_insert(error);
            self.handoff.changed.notify_all();
            // The error is reported, or a close comes: try again after a pause either way.
            drop(
                self.handoff
                    .changed
                    .wait_timeout_while(state, METADATA_ATTEMPT, |s| !s.stop && s.error.is_some()),
            );
        }
        false
    }

    /// When this thread first saw that the consumer is closing; `None` while it is not.
    fn stop_seen(&self) -> Option<Instant> {
        if self.stopping_since.get().is_none() && self.handoff.lock().stop {
            self.stopping_since.set(Some(Instant::now()));
        }
        self.stopping_since.get()
    }

    /// Waits for the STARTs counted as `number` (a batch, or [`ALONE`]): up to the marker
    /// timeout, and once the consumer is closing up to [`STOP_GRACE`] after that. Given up,
    /// they are no longer counted.
    fn wait_for_starts(&self, number: usize, operation: &str) -> KafkaResult<()> {
        let timeout = self.marker_timeout;
        let deadline = Instant::now() + timeout;
        loop {
            let end = self
                .stop_seen()
                .map_or(deadline, |since| deadline.min(since + STOP_GRACE));
            let slice = end
                .saturating_duration_since(Instant::now())
                .min(POLL_SLICE);
            match self.acks().settled(number, slice) {
                Some(Ok(())) => return Ok(()),
                Some(Err(e)) => {
                    return Err(KafkaIoError::from_rdkafka(operation, e, timeout, None));
                }
                None if Instant::now() >= end => {
                    self.acks().forget(number);
                    return Err(KafkaIoError::Timeout {
                        operation: operation.to_owned(),
                        timeout,
                        bootstrap: None,
                    });
                }
                None => {}
            }
        }
    }

    /// Whether a batch may be polled: a caller wants records, fewer than
    /// [`LOOKAHEAD_BATCHES`] are ahead of it and no error waits for it. Blocks until then unless
    /// a batch travels (`Full` then).
    fn room(&self, travelling: bool) -> Room {
        let limit = (LOOKAHEAD_BATCHES - 1) * self.max_batch_size;
        let mut state = self.handoff.lock();
        loop {
            if state.stop {
                return Room::Stop;
            }
            if state.wanted && state.error.is_none() && state.ahead <= limit {
                return Room::Poll;
            }
            if travelling {
                return Room::Full;
            }
            state = self
                .handoff
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits for the START markers of the first travelling batch and hands it to the commit
    /// thread. On failure every batch polled after it is given up too, and all are read again.
    fn confirm_first(&self, travelling: &mut VecDeque<Dispatched>) {
        let Some(batch) = travelling.pop_front() else {
            return;
        };
        match self.wait_for_starts(batch.number, "write START markers") {
            // The commit thread ends only after this thread: the send cannot fail.
            Ok(()) => drop(self.to_commit.send(batch)),
            Err(e) if refused_for_good(&e) => self.write_alone(batch, travelling),
            Err(e) => self.fail_from(batch.records, travelling, e),
        }
    }

    /// Gives up `records` and every batch travelling behind them (see [`Self::fail`]).
    fn fail_from(
        &self,
        mut records: Vec<ReceivedRecord>,
        travelling: &mut VecDeque<Dispatched>,
        error: KafkaIoError,
    ) {
        for later in travelling.drain(..) {
            self.acks().forget(later.number);
            records.extend(later.records);
        }
        self.fail(&records, error);
    }

    /// A batch the markers topic refused for size: once the STARTs in flight are settled (so
    /// that each START below travels alone in its produce request), writes each START of the
    /// batch alone. A message whose START is refused alone is refused for good (see
    /// [`Self::refuse`]); the batch goes on to the commit without it. Any other failure gives up
    /// the rest of the batch and the batches behind it, as in [`Self::confirm_first`].
    fn write_alone(&self, batch: Dispatched, travelling: &mut VecDeque<Dispatched>) {
        if let Err(e) = self.settle_starts() {
            return self.fail_from(batch.records, travelling, e);
        }
        let mut passed = Dispatched {
            number: batch.number,
            records: Vec::with_capacity(batch.records.len()),
            set_at: Instant::now(),
            passed: Vec::new(),
            handed_back: Vec::new(),
        };
        let mut rest = batch.records.into_iter();
        while let Some(record) = rest.next() {
            let written = self
                .dispatch(ALONE, std::slice::from_ref(&record))
                .map_err(|e| {
                    self.acks().forget(ALONE);
                    self.start_error(e)
                })
                .and_then(|()| self.wait_for_starts(ALONE, "write START markers"));
            let failure = match written {
                Ok(()) => {
                    passed.records.push(record);
                    continue;
                }
                Err(e) if refused_for_good(&e) => {
                    let position = (record.partition, record.offset);
                    match self.refuse(record, e) {
                        Ok(handed_back) => {
                            passed.passed.push(position);
                            passed.handed_back.extend(handed_back);
                            continue;
                        }
                        Err(failure) => failure,
                    }
                }
                Err(e) => (record, e),
            };
            let (record, error) = failure;
            drop(self.to_commit.send(passed));
            let failed: Vec<ReceivedRecord> = std::iter::once(record).chain(rest).collect();
            return self.fail_from(failed, travelling, error);
        }
        drop(self.to_commit.send(passed));
    }

    /// Waits until librdkafka holds none of the STARTs sent (up to the marker timeout, less
    /// once the consumer is closing); their reports are counted as they come.
    fn settle_starts(&self) -> KafkaResult<()> {
        let deadline = Instant::now() + self.marker_timeout;
        while self.starts.producer().in_flight_count() > 0 {
            let closing = self
                .stop_seen()
                .is_some_and(|since| since.elapsed() >= STOP_GRACE);
            if closing || Instant::now() >= deadline {
                return Err(KafkaIoError::Timeout {
                    operation: "write START markers".to_owned(),
                    timeout: self.marker_timeout,
                    bootstrap: None,
                });
            }
            std::thread::sleep(SETTLE_POLL);
        }
        Ok(())
    }

    /// A message whose START the markers topic refused alone: copied to the dead-letter topic
    /// (when that write fails, the message and that error come back as a failure) or, without
    /// one, handed back (returned); logged and counted either way. Its position is committed
    /// with its batch.
    // The record travels back on failure; a rare path, not worth a box.
    #[allow(clippy::result_large_err)]
    fn refuse(
        &self,
        record: ReceivedRecord,
        error: KafkaIoError,
    ) -> Result<Option<Refused>, (ReceivedRecord, KafkaIoError)> {
        let place = format!(
            "{}-{}@{}",
            self.queue_topic, record.partition, record.offset
        );
        let Some(topic) = &self.dead_letter_topic else {
            log::error!(
                "{place}: the markers topic refused its START marker ({error}): handed back to \
                 the caller, not handed out, never redelivered"
            );
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(Refused { record, error }));
        };
        let letter = dead_letter(
            topic,
            &self.queue_topic,
            message_id(record.partition, record.offset),
            redelivery_count(&record.headers),
            record.key.clone(),
            record.value.clone(),
            &record.headers,
        );
        self.acks().expect(ALONE, 1);
        let written = enqueue_with(self.starts.producer(), &letter, ALONE)
            .map_err(|e| {
                self.acks().forget(ALONE);
                KafkaIoError::from_rdkafka("write dead letter", e, self.marker_timeout, None)
            })
            .and_then(|()| self.wait_for_starts(ALONE, "write dead letter"));
        match written {
            Ok(()) => {
                log::error!(
                    "{place}: the markers topic refused its START marker ({error}): \
                     dead-lettered to {topic}"
                );
                self.refused.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
            Err(e) => Err((record, e)),
        }
    }

    /// Rewinds the consumer to failed records and hands the error to the next `take` (a
    /// closing consumer rewinds nothing: the next reader starts from the committed offsets).
    fn fail(&self, records: &[ReceivedRecord], error: KafkaIoError) {
        if self.stop_seen().is_none() {
            self.rewind(records);
        }
        let mut state = self.handoff.lock();
        state.ahead = state.ahead.saturating_sub(records.len());
        state.error = Some(error);
        self.handoff.changed.notify_all();
    }

    /// Up to `max_batch_size` records: waits up to `first_wait` for the first, then takes what
    /// has arrived.
    fn poll_batch(&self, first_wait: Duration) -> Vec<ReceivedRecord> {
        let mut records = Vec::new();
        while records.len() < self.max_batch_size {
            let wait = if records.is_empty() {
                first_wait
            } else {
                Duration::ZERO
            };
            match self.consumer.poll(wait) {
                None => break,
                Some(Ok(message)) => records.push(ReceivedRecord::from_message(&message)),
                Some(Err(e)) => log::warn!("queue consumer: {e}"),
            }
        }
        records
    }

    /// Polls a batch (waiting up to `first_wait` for its first record) and dispatches its
    /// START markers without waiting for them; `None` when nothing came or the dispatch failed.
    fn poll_and_dispatch(&self, number: usize, first_wait: Duration) -> Option<Dispatched> {
        let records = self.poll_batch(first_wait);
        if records.is_empty() {
            return None;
        }
        self.handoff.lock().ahead += records.len();
        let set_at = Instant::now();
        match self.dispatch(number, &records) {
            Ok(()) => Some(Dispatched {
                number,
                records,
                set_at,
                passed: Vec::new(),
                handed_back: Vec::new(),
            }),
            // A START too large even for this client goes the way of one the topic refused.
            Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge) => {
                self.acks().fail_now(number, e);
                Some(Dispatched {
                    number,
                    records,
                    set_at,
                    passed: Vec::new(),
                    handed_back: Vec::new(),
                })
            }
            Err(e) => {
                self.acks().forget(number);
                self.fail(&records, self.start_error(e));
                None
            }
        }
    }

    /// Counts the START markers of each batch.
    fn acks(&self) -> &StartAcks {
        self.starts.producer().context()
    }

    /// Hands the START markers of `records` to librdkafka in one call, encoded straight from
    /// the records into one buffer (librdkafka copies each).
    fn dispatch(&self, number: usize, records: &[ReceivedRecord]) -> Result<(), KafkaError> {
        let deadline = self.writer.next_deadline();
        let mut markers =
            Payloads::with_capacity(records.len(), records.iter().map(encoded_size).sum());
        for record in records {
            let start = StartParts {
                message_id: message_id(record.partition, record.offset),
                deadline,
                key: record.key.as_deref(),
                value: record.value.as_deref(),
                headers: &record.headers,
            };
            let partition = self.writer.markers_partition_of(record.partition);
            markers.push(partition, |out| append_start(out, &start));
        }
        // Counted before the call: a delivery report may arrive before it returns.
        self.acks().expect(number, records.len());
        self.starts.produce(&markers, number).map_err(|(e, _)| e)
    }

    fn start_error(&self, error: KafkaError) -> KafkaIoError {
        KafkaIoError::from_rdkafka("write START markers", error, self.marker_timeout, None)
    }

    /// Seeks back to the first record of each partition of a batch whose markers failed.
    fn rewind(&self, records: &[ReceivedRecord]) {
        let mut first: BTreeMap<i32, i64> = BTreeMap::new();
        for record in records {
            let slot = first.entry(record.partition).or_insert(record.offset);
            *slot = (*slot).min(record.offset);
        }
        for (partition, offset) in first {
            if let Err(e) = self.consumer.seek(
                &self.queue_topic,
                partition,
                Offset::Offset(offset),
                self.marker_timeout,
            ) {
                log::error!(
                    "cannot rewind {}-{partition} to {offset}: {e}",
                    self.queue_topic
                );
            }
        }
    }
}

/// The commit thread: commits the offsets of batches whose STARTs are acknowledged, in order,
/// and makes them ready.
struct Committer {
    consumer: Arc<BaseConsumer<TokenContext>>,
    writer: Arc<MarkerWriter>,
    queue_topic: String,
    handoff: Arc<Handoff>,
    received: Arc<AtomicU64>,
}

impl Committer {
    /// Runs until the prefetch thread drops its sender.
    fn run(self, batches: &mpsc::Receiver<Dispatched>) {
        for batch in batches {
            let positions = batch.records.iter().map(|r| (r.partition, r.offset));
            self.commit(positions.chain(batch.passed.iter().copied()));
            self.writer.begin(
                batch
                    .records
                    .iter()
                    .map(|r| message_id(r.partition, r.offset)),
                batch.set_at,
            );
            self.received
                .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
            let mut state = self.handoff.lock();
            state.ahead = state.ahead.saturating_sub(batch.passed.len());
            state.ready.extend(batch.records);
            state.refused.extend(batch.handed_back);
            drop(state);
            self.handoff.changed.notify_all();
        }
    }

    /// Commits the queue offsets after a batch whose START markers are confirmed (and past the
    /// messages of it refused for good).
    fn commit(&self, positions: impl Iterator<Item = (i32, i64)>) {
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for (partition, offset) in positions {
            let slot = next.entry(partition).or_insert(0);
            *slot = (*slot).max(offset + 1);
        }
        let mut commit = TopicPartitionList::new();
        for (partition, offset) in next {
            let _ =
                commit.add_partition_offset(&self.queue_topic, partition, Offset::Offset(offset));
        }
        // The START markers are durable: should the commit fail, a restart reads these messages
        // again and their new START supersedes the old one (at-least-once, nothing lost).
        if let Err(e) = self.consumer.commit(&commit, CommitMode::Sync) {
            log::warn!("queue offsets not committed: {e}");
        }
    }
}

/// Whether the markers topic refused a START for good: it is too large, for the topic or for
/// this client, and would be refused again on every read.
fn refused_for_good(error: &KafkaIoError) -> bool {
    matches!(error, KafkaIoError::Broker { code, .. }
        if *code == RDKafkaErrorCode::MessageSizeTooLarge as i32)
}

/// About how many bytes the START marker of `record` takes (a buffer size hint).
fn encoded_size(record: &ReceivedRecord) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|(name, value)| name.len() + value.as_ref().map_or(0, Vec::len) + 4)
        .sum();
    32 + record.key.as_ref().map_or(0, Vec::len)
        + record.value.as_ref().map_or(0, Vec::len)
        + headers
}
