//! [`ConcurrentConsumer`]: an ordered-per-partition, concurrent-across-partitions consumer with
//! at-least-once commits, modelled on Elixir's `KafkaClient.Consumer`.
//!
//! Threads and locks:
//! - One poller thread owns the polling of the rdkafka `BaseConsumer`. Each assigned partition
//!   has its own librdkafka queue ([`PartitionSource`], drained in runs) and one [`Slot`] whose
//!   [`PartitionBuffer`] (the pure core) holds the records handed from that queue to the worker.
//!   The poller takes from a partition's queue only as many records as its buffer has room for:
//!   a full partition is simply not polled (librdkafka then stops fetching it once its prefetch
//!   fills), so nothing is paused, resumed or discarded. The poller also serves the main queue
//!   (rebalances, statistics, errors, and records fetched before a partition's queue was split),
//!   commits finished offsets every `commit_interval`, and, on shutdown, drains, commits and
//!   closes the consumer. It sleeps on [`Wake`] when nothing arrived: librdkafka's
//!   non-empty-queue callbacks and workers that free room in a full buffer wake it. librdkafka runs
//!   the rebalance callbacks of [`RebalanceHandler`] on this thread too (inside `poll`); they stay
//!   in Rust and push [`ConsumerEvent`]s into a channel that the bindings drain on a Python thread.
//! - Workers (one per assigned partition, owned by the bindings) call [`ConcurrentConsumer::fetch`]
//!   and [`ConcurrentConsumer::ack`] / [`ConcurrentConsumer::fail`]; records cross from the poller
//!   in runs (one lock per run) and leave as one shared batch.
//! - Lock order: the `slots` map, then one slot's state, then its source queue, then the
//!   consumer handle. No lock is held while waiting on the network.
//!
//! Invariants:
//! - Ordered by partition, a partition has at most one batch in flight and batches leave in
//!   offset order, so its handler sees strictly increasing offsets. Ordered by key, up to
//!   `max_concurrency` batches of a partition run at once, never two holding the same key, and
//!   each key's records are handed out in offset order.
//! - An offset is committed only after the batch that contains it was acknowledged, and never
//!   for a partition whose assignment was lost. A batch still running when its drain time ends
//!   is abandoned: its acknowledgement is ignored and its records are read again by whoever
//!   owns the partition next.
//! - Queued (not yet handed out) records of a revoked partition, or of a stopping consumer, are
//!   dropped and counted; they were never committed, so they are redelivered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};

pub use ferrokafka_core::OrderBy;
use ferrokafka_core::{BufferedRecord, LoadChange, PartitionBuffer, PartitionLimits};

use crate::config::{ClientRole, ClientSettings};
use crate::connection_failure::ConnectionWatch;
use crate::dead_letter::{DeadLetterWriter, Failure};
use crate::error::{KafkaIoError, KafkaResult};
use crate::locks::lock;
use crate::oauth::{self, TokenRefresh, answer_token_refresh};
use crate::partition_source::PartitionSource;
use crate::record::ReceivedRecord;
use crate::statistics::{BrokerOffsets, GroupStatistics, KeptStatistics, partitions};

/// Identifies one assignment of one partition; a re-assigned partition gets a new id, so a late
/// acknowledgement from an abandoned worker can never touch the new owner's offsets.
pub type WorkerId = u64;

/// Longest the poller blocks in librdkafka before checking for shutdown and due commits.
const POLL_WAIT: Duration = Duration::from_millis(50);
/// Most records taken from one librdkafka queue before routing them: one slot lock per run of
/// records, and a turn for every other partition in between.
const ROUTE_CHUNK: usize = 256;
/// How long network lookups at start-up (watermarks, offsets for timestamps) may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where an explicitly assigned partition starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// The group's committed offset, else `auto.offset.reset`.
    Stored,
    /// The first offset still in the log.
    Beginning,
    /// The end of the log: only records produced from now on.
    End,
    /// This offset.
    Offset(i64),
    /// The first record whose timestamp is at or after this many ms since the epoch.
    Timestamp(i64),
}

/// What to consume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subscription {
    /// Every partition of a topic: assigned by the group, or, without `group.id`, all of them
    /// assigned to this consumer (starting at `auto.offset.reset`).
    Topic(String),
    /// One partition, assigned by this consumer alone.
    Partition {
        /// Topic name.
        topic: String,
        /// Partition number.
        partition: i32,
        /// Where to start.
        start: StartAt,
    },
}

/// Settings of a [`ConcurrentConsumer`] beyond librdkafka's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerOptions {
    /// What to consume: topic names, or explicit partitions, not both.
    pub subscriptions: Vec<Subscription>,
    /// Most records per batch handed to a worker [unbounded].
    pub max_batch_size: Option<usize>,
    /// How often finished offsets are committed [5 s].
    pub commit_interval: Duration,
    /// A partition is not polled while this many records are queued, and again at half [1000].
    pub max_queue_records: usize,
    /// A partition is not polled while this many bytes are queued, and again at half [1 MiB].
    pub max_queue_bytes: usize,
    /// What a handler exception does to its batch [commit].
    pub errors: ErrorPolicy,
    /// What stays in order: a partition (one batch at a time) or each key [partition].
    pub ordering: OrderBy,
    /// With ordering by key, most batches of one partition handled at once [8].
    pub max_concurrency: usize,
}

/// What a handler exception does to its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Acknowledge the batch anyway (logged and reported by the bindings).
    Commit,
    /// Hand the batch to the handler again after a backoff, at most `max_retries` times, while
    /// the partition waits; then dead-letter it (with a dead-letter topic) or commit it.
    Retry,
    /// Write the batch to the dead-letter topic, then acknowledge it.
    DeadLetter,
}

/// The error policy of a [`ConcurrentConsumer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorPolicy {
    /// What a handler exception does.
    pub on_error: OnError,
    /// Retries of one batch before it is dead-lettered or committed [3].
    pub max_retries: u32,
    /// Wait before the first retry; doubles with each retry [1 s].
    pub retry_backoff: Duration,
    /// Cap of the doubling wait [30 s].
    pub max_retry_backoff: Duration,
    /// Where failed batches are written (`DeadLetter`, and `Retry` once retries ran out).
    pub dead_letter_topic: Option<String>,
}

impl Default for ErrorPolicy {
    fn default() -> Self {
        ErrorPolicy {
            on_error: OnError::Commit,
            max_retries: 3,
            retry_backoff: Duration::from_secs(1),
            max_retry_backoff: Duration::from_secs(30),
            dead_letter_topic: None,
        }
    }
}

impl ErrorPolicy {
    /// The wait before retry number `retry + 1` (counting from 0).
    fn backoff(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry);
        self.retry_backoff
            .saturating_mul(factor)
            .min(self.max_retry_backoff)
    }

    fn dead_letters(&self) -> bool {
        match self.on_error {
            OnError::Commit => false,
            OnError::DeadLetter => true,
            OnError::Retry => self.dead_letter_topic.is_some(),
        }
    }
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            subscriptions: Vec::new(),
            max_batch_size: None,
            commit_interval: Duration::from_secs(5),
            max_queue_records: 1000,
            max_queue_bytes: 1024 * 1024,
            errors: ErrorPolicy::default(),
            ordering: OrderBy::Partition,
            max_concurrency: 8,
        }
    }
}

impl ConsumerOptions {
    /// Batches of one partition that may be handed out at once.
    fn concurrency(&self) -> usize {
        match self.ordering {
            OrderBy::Partition => 1,
            OrderBy::Key => self.max_concurrency,
        }
    }

    fn validate(&self, group: bool) -> KafkaResult<()> {
        let invalid = |message: String| Err(KafkaIoError::InvalidArgument(message));
        if self.subscriptions.is_empty() {
            return invalid("subscriptions must name at least one topic or partition".to_owned());
        }
        let by_topic = self
            .subscriptions
            .iter()
            .filter(|s| matches!(s, Subscription::Topic(_)))
            .count();
        // Without a group a topic name stands for all its partitions, which mix freely with
        // explicit ones; a group assigns topics itself and cannot also take explicit partitions.
        if group && by_topic > 0 && by_topic < self.subscriptions.len() {
            return invalid(
                "subscriptions cannot mix topic names (group-assigned) with explicit partitions"
                    .to_owned(),
            );
        }
        for subscription in &self.subscriptions {
            match subscription {
                Subscription::Topic(topic) | Subscription::Partition { topic, .. }
                    if topic.is_empty() =>
                {
                    return invalid("subscription topic names must not be empty".to_owned());
                }
                Subscription::Partition { partition, .. } if *partition < 0 => {
                    return invalid(format!("partition must be >= 0, got {partition}"));
                }
                Subscription::Partition {
                    start: StartAt::Offset(n) | StartAt::Timestamp(n),
                    ..
                } if *n < 0 => {
                    return invalid(format!("start offset or timestamp must be >= 0, got {n}"));
                }
                _ => {}
            }
        }
        if self.max_batch_size == Some(0) {
            return invalid("max_batch_size must be positive (or unbounded)".to_owned());
        }
        if self.commit_interval.is_zero() {
            return invalid("commit_interval must be positive".to_owned());
        }
        if self.errors.on_error == OnError::DeadLetter
            && self
                .errors
                .dead_letter_topic
                .as_deref()
                .is_none_or(str::is_empty)
        {
            return invalid("on_error='dead_letter' needs dead_letter_topic='<topic>'".to_owned());
        }
        if self.max_concurrency == 0 {
            return invalid("max_concurrency must be at least 1".to_owned());
        }
        if self.max_queue_records < 2 || self.max_queue_bytes < 2 {
            return invalid(
                "max_queue_records and max_queue_bytes must be at least 2 (resume happens at half)"
                    .to_owned(),
            );
        }
        Ok(())
    }
}

/// One partition handed to its workers (several with ordering by key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The worker id to fetch and acknowledge with.
    pub worker: WorkerId,
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
}

/// Something the bindings report to Python, in the order it happened.
#[derive(Debug)]
pub enum ConsumerEvent {
    /// Partitions were assigned; start one worker for each.
    Assigned(Vec<Assignment>),
    /// Partitions stopped handing out batches (revoked, or the consumer is stopping): their
    /// queued records were dropped, and their running batches get the drain time.
    Draining {
        /// The partitions.
        partitions: Vec<Assignment>,
        /// Queued records dropped (never committed, so redelivered later).
        dropped: usize,
    },
    /// Partitions were taken away after their workers drained (or were abandoned).
    Unassigned {
        /// The partitions.
        partitions: Vec<Assignment>,
        /// True when the assignment was lost (offsets were not committed).
        lost: bool,
    },
    /// A consumer without a group handled its partition up to the high watermark seen at start.
    CaughtUp {
        /// Topic name.
        topic: String,
        /// Partition number.
        partition: i32,
        /// The offset reached (the high watermark).
        offset: i64,
    },
    /// Load control stopped polling a full partition (`paused == true`), or polls it again.
    LoadControl {
        /// Topic name.
        topic: String,
        /// Partition number.
        partition: i32,
        /// Paused, or resumed.
        paused: bool,
        /// Records queued at that moment.
        queued: usize,
        /// Bytes queued at that moment.
        queued_bytes: usize,
    },
    /// The broker answered a commit.
    Committed {
        /// `(topic, partition, next offset)` of each partition in the commit.
        offsets: Vec<(String, i32, i64)>,
        /// The error, if the commit failed.
        error: Option<KafkaIoError>,
    },
    /// An error reported by librdkafka while consuming; the consumer keeps running.
    Error(KafkaIoError),
}

/// What [`ConcurrentConsumer::fetch`] found.
#[derive(Debug)]
pub enum Fetched {
    /// The next records of the partition, in offset order; acknowledge or fail them by their
    /// first offset.
    Batch(Arc<Vec<ReceivedRecord>>),
    /// Nothing arrived within the wait.
    Empty,
    /// The partition is no longer this worker's (revoked, abandoned or shutting down): exit.
    Gone,
}

/// How a worker finished a batch (a handler exception goes to [`ConcurrentConsumer::fail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The handler returned: the batch's offsets become committable.
    Handled,
    /// The worker gave up on the batch (stopping while retrying): nothing becomes committable,
    /// so its records are redelivered; the partition no longer waits for it.
    Abandoned,
}

/// What the worker does after [`ConcurrentConsumer::fail`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Call the handler again with the same batch after this wait (or abandon the batch if the
    /// consumer stops meanwhile).
    Retry(Duration),
    /// The batch is settled (committed, being dead-lettered, or abandoned): fetch the next.
    Settled,
}

/// Counters of one partition (or totals of the consumer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionCounters {
    /// Records routed from librdkafka into the queue.
    pub received: u64,
    /// Records in batches the handler finished.
    pub handled: u64,
    /// Records in batches the handler raised on and that were acknowledged anyway.
    pub failed: u64,
    /// Records handed to the dead-letter topic.
    pub dead_lettered: u64,
    /// Handler retries (the `retry` error policy).
    pub retries: u64,
    /// Batches handed to the worker.
    pub batches: u64,
    /// Times load control stopped polling the partition (its buffer was full).
    pub pauses: u64,
    /// Times load control polled it again (its buffer went down to half).
    pub resumes: u64,
    /// Queued records dropped on revoke or shutdown (redelivered later: never committed).
    pub dropped: u64,
    /// Batches abandoned because their handler outlasted the drain time.
    pub abandoned: u64,
}

impl PartitionCounters {
    fn add(&mut self, other: &PartitionCounters) {
        self.received += other.received;
        self.handled += other.handled;
        self.failed += other.failed;
        self.dead_lettered += other.dead_lettered;
        self.retries += other.retries;
        self.batches += other.batches;
        self.pauses += other.pauses;
        self.resumes += other.resumes;
        self.dropped += other.dropped;
        self.abandoned += other.abandoned;
    }
}

/// A snapshot of one assigned partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionStats {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
    /// Its worker id.
    pub worker: WorkerId,
    /// Records queued now.
    pub queued: usize,
    /// Bytes queued now.
    pub queued_bytes: usize,
    /// Whether load control holds the partition (its buffer is full: not polled).
    pub paused: bool,
    /// Records in the batch being handled now.
    pub in_flight: usize,
    /// Next offset to commit: one past the last record of the last finished batch.
    pub position: Option<i64>,
    /// The last offset the broker confirmed committed.
    pub committed: Option<i64>,
    /// Counters since the partition was assigned.
    pub counters: PartitionCounters,
    /// The partition's offsets from librdkafka's latest statistics (`statistics.interval.ms`),
    /// `None` until the first statistics arrived after the assignment.
    pub broker: Option<BrokerOffsets>,
    /// Offset of the first record received since the assignment.
    pub first_received: Option<i64>,
}

/// A snapshot of the whole consumer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Counters over the consumer's lifetime, including partitions no longer assigned.
    pub totals: PartitionCounters,
    /// Commit requests answered successfully.
    pub commits: u64,
    /// Commit requests that failed.
    pub commit_errors: u64,
    /// Assigned partitions, ordered by topic and partition.
    pub partitions: Vec<PartitionStats>,
    /// The group's state from the latest statistics; `None` without a group or statistics.
    pub group: Option<GroupStatistics>,
    /// Time since the poller last returned from librdkafka's poll; `None` before the first.
    pub poll_age: Option<Duration>,
    /// Bytes per second received from and sent to the brokers between the latest two
    /// statistics; `None` before the second.
    pub transfer_rates: Option<(u64, u64)>,
}

/// The batch a worker is handling.
#[derive(Clone, Debug)]
struct InFlight {
    first_offset: i64,
    records: Arc<Vec<ReceivedRecord>>,
    /// Retries so far (the `retry` error policy).
    retries: u32,
}

#[derive(Debug)]
struct SlotState {
    /// Queued records, bounds, and the batches handed out with the offset to commit.
    buffer: PartitionBuffer<ReceivedRecord>,
    /// Batches being handled, by first offset (at most one with ordering by partition).
    in_flight: HashMap<i64, InFlight>,
    /// Batches waiting for their dead-letter write to be acknowledged.
    dead_letters_pending: usize,
    /// The offset of the latest commit request, confirmed or not.
    commit_requested: Option<i64>,
    /// The latest offset the broker confirmed.
    committed: Option<i64>,
    /// No more batches: revoked, abandoned or shutting down.
    closed: bool,
    /// For a consumer without a group: the high watermark whose reaching is reported once.
    catch_up_to: Option<i64>,
    counters: PartitionCounters,
    broker: Option<BrokerOffsets>,
    /// Offset of the first record routed since the assignment: where this consumer's work on
    /// the partition began, the base of its lag until an offset is committed.
    first_received: Option<i64>,
}

impl BufferedRecord for ReceivedRecord {
    fn offset(&self) -> i64 {
        self.offset
    }

    fn size(&self) -> usize {
        self.size()
    }

    fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }
}

/// One assigned partition: its queue and its worker's progress.
#[derive(Debug)]
struct Slot {
    worker: WorkerId,
    topic: String,
    partition: i32,
    state: Mutex<SlotState>,
    /// Workers wait here for records; drainers wait here for the batch in flight to finish.
    changed: Condvar,
    /// The partition's split queue, polled by the poller only; `None` until split, and after
    /// the slot was released (its records then arrive on the main queue, if any).
    source: Mutex<Option<PartitionSource<RebalanceHandler>>>,
}

/// Wakes the sleeping poller: set by librdkafka's non-empty-queue callbacks and by workers.
#[derive(Debug, Default)]
struct Wake {
    pending: Mutex<bool>,
    changed: Condvar,
}

impl Wake {
    fn notify(&self) {
        *lock(&self.pending) = true;
        self.changed.notify_one();
    }

    /// Waits up to `wait` unless woken since the last call.
    fn wait(&self, wait: Duration) {
        let pending = lock(&self.pending);
        let mut pending = self
            .changed
            .wait_timeout_while(pending, wait, |p| !*p)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        *pending = false;
    }
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        // A panic while holding the lock would be a bug in this file; keep serving regardless.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn assignment(&self) -> Assignment {
        Assignment {
            worker: self.worker,
            topic: self.topic.clone(),
            partition: self.partition,
        }
    }
}

#[derive(Debug, Default)]
struct Slots {
    by_worker: HashMap<WorkerId, Arc<Slot>>,
    by_partition: HashMap<(String, i32), Arc<Slot>>,
}

#[derive(Debug, Default)]
struct Totals {
    counters: PartitionCounters,
    commits: u64,
    commit_errors: u64,
}

/// How the poller should end.
#[derive(Debug, Default)]
struct Shutdown {
    requested: bool,
    drain: Duration,
    finished: bool,
}

type Handle = BaseConsumer<RebalanceHandler>;

struct Shared {
    options: ConsumerOptions,
    group: bool,
    slots: Mutex<Slots>,
    totals: Mutex<Totals>,
    next_worker: AtomicU64,
    events: Sender<ConsumerEvent>,
    closing: AtomicBool,
    shutdown: Mutex<Shutdown>,
    /// The caller of `stop` waits here for the poller to finish.
    stopped: Condvar,
    /// The consumer, for splitting partition queues; the poller takes it out when it closes
    /// the consumer, so the last reference is dropped on the poller thread.
    consumer: Mutex<Option<Arc<Handle>>>,
    /// Wakes the poller.
    wake: Arc<Wake>,
    /// The group's state and the transfer rates from the latest statistics (the partitions'
    /// figures are kept in their slots).
    statistics: KeptStatistics,
    /// When the poller last returned from librdkafka's poll.
    polled_at: Mutex<Option<Instant>>,
    /// Why librdkafka cannot connect, for the error events that say so only by their code.
    watch: ConnectionWatch,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("options", &self.options)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn emit(&self, event: ConsumerEvent) {
        // After the bindings dropped the receiver nobody listens any more; that is fine.
        let _ = self.events.send(event);
    }

    fn slot(&self, worker: WorkerId) -> Option<Arc<Slot>> {
        lock(&self.slots).by_worker.get(&worker).cloned()
    }

    /// Creates slots for newly assigned partitions, each with its own split queue; `catch_up`
    /// gives, per partition, the high watermark a consumer without a group reports reaching (or
    /// `None`). A partition that already has a slot keeps it and its queue.
    fn add_slots(&self, partitions: Vec<(String, i32, Option<i64>)>) -> Vec<Assignment> {
        let consumer = lock(&self.consumer).clone();
        let consumer = consumer.as_ref();
        let options = &self.options;
        let limits = PartitionLimits {
            max_records: options.max_queue_records,
            max_bytes: options.max_queue_bytes,
            max_batch: options.max_batch_size,
            ordering: options.ordering,
        };
        let mut slots = lock(&self.slots);
        let mut assigned = Vec::with_capacity(partitions.len());
        for (topic, partition, catch_up_to) in partitions {
            let key = (topic.clone(), partition);
            if slots.by_partition.contains_key(&key) {
                continue;
            }
            let source = consumer.and_then(|c| {
                let wake = Arc::clone(&self.wake);
                PartitionSource::split(c, &topic, partition, move || wake.notify())
            });
            let slot = Arc::new(Slot {
                worker: self.next_worker.fetch_add(1, Ordering::Relaxed),
                topic,
                partition,
                state: Mutex::new(SlotState {
                    buffer: PartitionBuffer::new(limits),
                    in_flight: HashMap::new(),
                    dead_letters_pending: 0,
                    commit_requested: None,
                    committed: None,
                    closed: false,
                    catch_up_to,
                    counters: PartitionCounters::default(),
                    broker: None,
                    first_received: None,
                }),
                changed: Condvar::new(),
                source: Mutex::new(source),
            });
            assigned.push(slot.assignment());
            slots.by_worker.insert(slot.worker, Arc::clone(&slot));
            slots.by_partition.insert(key, slot);
        }
        assigned
    }

    /// Marks the batch starting at `first` finished, and reports a consumer without a group
    /// caught up once its committable offset reached the high watermark seen at start.
    fn finish(&self, slot: &Slot, state: &mut SlotState, first: i64) {
        state.buffer.progress_mut().finish(first);
        let committable = state.buffer.committable();
        if let (Some(high), Some(next)) = (state.catch_up_to, committable)
            && next >= high
        {
            state.catch_up_to = None;
            self.emit(ConsumerEvent::CaughtUp {
                topic: slot.topic.clone(),
                partition: slot.partition,
                offset: high,
            });
        }
    }

    /// Routes a chunk taken from the main queue: runs of records of the same partition go to
    /// their slot.
    fn route_chunk(&self, chunk: &mut Vec<ReceivedRecord>) {
        let mut records = chunk.drain(..).peekable();
        while let Some(first) = records.next() {
            let (topic, partition) = (first.topic.clone(), first.partition);
            let mut run = vec![first];
            while let Some(next) = records.next_if(|r| r.partition == partition && r.topic == topic)
            {
                run.push(next);
            }
            let slot = lock(&self.slots)
                .by_partition
                .get(&(topic, partition))
                .cloned();
            match slot {
                Some(slot) => self.route(&slot, run),
                // A record fetched just before its partition was revoked: never handed out,
                // never committed, so the partition's next owner reads it again.
                None => lock(&self.totals).counters.dropped += run.len() as u64,
            }
        }
    }

    /// Takes from `slot`'s own queue as many records as its buffer has room for (at most
    /// `ROUTE_CHUNK`) and routes them; returns how many.
    fn poll_partition(&self, slot: &Slot) -> usize {
        let room = {
            let state = slot.lock();
            if state.closed {
                return 0;
            }
            state.buffer.room().min(ROUTE_CHUNK)
        };
        if room == 0 {
            return 0;
        }
        let mut run = Vec::new();
        {
            let source = lock(&slot.source);
            let Some(queue) = source.as_ref() else {
                return 0;
            };
            run.reserve(room);
            queue.drain(room, |result| {
                // Errors were taken off the queue with the records: all are handled.
                self.take(&mut run, result);
            });
        }
        let count = run.len();
        if count > 0 {
            self.route(slot, run);
        }
        count
    }

    /// Copies the records `poll` has ready (it never waits) into `out`, up to `max` in all; an
    /// error is reported and ends the turn.
    fn take_ready<M: Message>(
        &self,
        out: &mut Vec<ReceivedRecord>,
        max: usize,
        poll: impl Fn(Duration) -> Option<Result<M, KafkaError>>,
    ) {
        while out.len() < max {
            match poll(Duration::ZERO) {
                None => break,
                Some(result) => {
                    if !self.take(out, result.as_ref().map_err(Clone::clone)) {
                        break;
                    }
                }
            }
        }
    }

    /// Copies one polled message into `out`, or reports its error; false after an error.
    fn take<M: Message>(
        &self,
        out: &mut Vec<ReceivedRecord>,
        result: Result<&M, KafkaError>,
    ) -> bool {
        match result {
            Ok(message) => out.push(ReceivedRecord::from_message(message)),
            Err(KafkaError::PartitionEOF(_)) => {}
            Err(err) => {
                let err = self.watch.explain("consume", err);
                log::warn!("consumer error: {err}");
                self.emit(ConsumerEvent::Error(err));
                return false;
            }
        }
        true
    }

    /// Queues one run of records of `slot`'s partition; a buffer that becomes full is no longer
    /// polled.
    fn route(&self, slot: &Slot, run: Vec<ReceivedRecord>) {
        let mut state = slot.lock();
        if state.closed {
            state.counters.dropped += run.len() as u64;
            return;
        }
        state.counters.received += run.len() as u64;
        if state.first_received.is_none() {
            state.first_received = run.first().map(|record| record.offset);
        }
        if state.buffer.push(run) == Some(LoadChange::Full) {
            state.counters.pauses += 1;
            self.emit(load_event(slot, &state, true));
        }
        drop(state);
        slot.changed.notify_all();
    }

    /// Stops handing out batches of `slots`, drops their queued records, and waits until their
    /// batches in flight are acknowledged or `deadline` passes; a batch still running then is
    /// abandoned.
    fn drain(&self, slots: &[Arc<Slot>], deadline: Instant) {
        let mut dropped = 0;
        for slot in slots {
            let mut state = slot.lock();
            state.closed = true;
            let cleared = state.buffer.clear();
            dropped += cleared;
            state.counters.dropped += cleared as u64;
            drop(state);
            slot.changed.notify_all();
        }
        self.emit(ConsumerEvent::Draining {
            partitions: slots.iter().map(|s| s.assignment()).collect(),
            dropped,
        });
        for slot in slots {
            let mut state = slot.lock();
            while !state.in_flight.is_empty() || state.dead_letters_pending > 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let running: Vec<i64> =
                        state.in_flight.drain().map(|(first, _)| first).collect();
                    for first in running {
                        state.buffer.release(first);
                    }
                    state.buffer.progress_mut().abandon_all();
                    state.counters.abandoned += 1;
                    log::warn!(
                        "handler for {}[{}] did not finish within the drain time; its batch is \
                         abandoned and will be redelivered",
                        slot.topic,
                        slot.partition
                    );
                    break;
                }
                state = slot
                    .changed
                    .wait_timeout(state, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
    }

    /// Forgets `slots` (their workers' later calls see `Gone`) and folds their counters into the
    /// totals.
    fn remove_slots(&self, slots: &[Arc<Slot>]) {
        let mut map = lock(&self.slots);
        let mut totals = lock(&self.totals);
        for slot in slots {
            map.by_worker.remove(&slot.worker);
            map.by_partition
                .remove(&(slot.topic.clone(), slot.partition));
            totals.counters.add(&slot.lock().counters);
            // The queue keeps the consumer alive; a revoked partition's queue is not needed.
            lock(&slot.source).take();
        }
    }

    /// Commits the finished offsets of `slots` not committed yet, waiting for the broker.
    /// Synchronous on purpose: librdkafka reports asynchronous commit results only through
    /// events this consumer does not receive when partitions are assigned explicitly, and one
    /// round trip per `commit_interval` costs the poller little.
    fn commit(&self, consumer: &Handle, slots: &[Arc<Slot>]) {
        if !self.group {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        let mut offsets = Vec::new();
        for slot in slots {
            let mut state = slot.lock();
            if let Some(finished) = state.buffer.committable()
                && state.commit_requested.is_none_or(|c| c < finished)
            {
                // Cannot fail: the offset is a plain non-negative offset.
                let _ =
                    tpl.add_partition_offset(&slot.topic, slot.partition, Offset::Offset(finished));
                state.commit_requested = Some(finished);
                offsets.push((slot.topic.clone(), slot.partition, finished));
            }
        }
        if offsets.is_empty() {
            return;
        }
        let result = consumer.commit(&tpl, CommitMode::Sync);
        self.settle_commit(offsets, result.err());
    }

    /// Records a commit answer: confirmed offsets, or a failure that makes the next round retry.
    fn settle_commit(&self, offsets: Vec<(String, i32, i64)>, error: Option<KafkaError>) {
        let error = error.map(|e| KafkaIoError::from_rdkafka("commit", e, Duration::ZERO, None));
        {
            let slots = lock(&self.slots);
            for (topic, partition, offset) in &offsets {
                let Some(slot) = slots.by_partition.get(&(topic.clone(), *partition)) else {
                    continue;
                };
                let mut state = slot.lock();
                if error.is_none() {
                    state.committed = state.committed.max(Some(*offset));
                } else if state.commit_requested == Some(*offset) {
                    state.commit_requested = state.committed;
                }
            }
        }
        let mut totals = lock(&self.totals);
        match &error {
            None => totals.commits += 1,
            Some(e) => {
                totals.commit_errors += 1;
                log::warn!("commit of {offsets:?} failed: {e}");
            }
        }
        drop(totals);
        self.emit(ConsumerEvent::Committed { offsets, error });
    }

    /// Drains, commits (unless `lost`) and forgets `slots`, then reports them unassigned.
    fn release(&self, consumer: &Handle, slots: Vec<Arc<Slot>>, drain: Duration, lost: bool) {
        if slots.is_empty() {
            return;
        }
        self.drain(&slots, Instant::now() + drain);
        if !lost {
            self.commit(consumer, &slots);
        }
        self.remove_slots(&slots);
        let partitions = slots.iter().map(|s| s.assignment()).collect();
        self.emit(ConsumerEvent::Unassigned { partitions, lost });
    }

    /// Keeps each assigned partition's offsets from librdkafka's statistics for `stats`, with
    /// the changes since the previous statistics of its assignment, and the group's state.
    fn record_statistics(&self, statistics: &Statistics) {
        self.statistics.record_client(statistics);
        let slots = lock(&self.slots);
        for figures in partitions(statistics) {
            let key = (figures.topic.to_owned(), figures.partition);
            let Some(slot) = slots.by_partition.get(&key) else {
                continue;
            };
            let mut state = slot.lock();
            state.broker = Some(figures.after(state.broker.as_ref()));
        }
    }

    fn all_slots(&self) -> Vec<Arc<Slot>> {
        let mut slots: Vec<Arc<Slot>> = lock(&self.slots).by_worker.values().cloned().collect();
        slots.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        slots
    }
}

fn load_event(slot: &Slot, state: &SlotState, paused: bool) -> ConsumerEvent {
    ConsumerEvent::LoadControl {
        topic: slot.topic.clone(),
        partition: slot.partition,
        paused,
        queued: state.buffer.queued(),
        queued_bytes: state.buffer.queued_bytes(),
    }
}

/// librdkafka's consumer context: rebalances and commit results, handled in Rust on the poller
/// thread (inside `poll`).
#[derive(Debug)]
pub struct RebalanceHandler {
    shared: Arc<Shared>,
    /// How long a revoked partition's running batch may take before it is abandoned.
    drain: Duration,
    tokens: TokenRefresh,
}

impl ClientContext for RebalanceHandler {
    answer_token_refresh!(tokens);

    fn stats(&self, statistics: Statistics) {
        self.shared.record_statistics(&statistics);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.shared.watch.observe(&error, reason);
        crate::client::log_unless_end(error, &self.shared.watch.redact(reason));
    }
}

impl ConsumerContext for RebalanceHandler {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let shared = &self.shared;
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let revoked: Vec<Arc<Slot>> = {
                    let slots = lock(&shared.slots);
                    tpl.elements()
                        .iter()
                        .filter_map(|e| {
                            slots
                                .by_partition
                                .get(&(e.topic().to_owned(), e.partition()))
                                .cloned()
                        })
                        .collect()
                };
                // Waiting here keeps the partition ours until its running batch finished, so the
                // next owner starts after the last committed batch instead of duplicating it.
                let lost = consumer.assignment_lost();
                shared.release(consumer, revoked, self.drain, lost);
            }
            Rebalance::Assign(_) => {}
            Rebalance::Error(err) => {
                log::error!("rebalance failed: {err}");
                shared.emit(ConsumerEvent::Error(KafkaIoError::from_rdkafka(
                    "rebalance",
                    err.clone(),
                    Duration::ZERO,
                    None,
                )));
            }
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            // Under the eager protocol the whole assignment arrives again; cooperative adds only
            // the new partitions. Known partitions keep their slot either way.
            let partitions = tpl
                .elements()
                .iter()
                .map(|e| (e.topic().to_owned(), e.partition(), None))
                .collect();
            let assigned = self.shared.add_slots(partitions);
            if !assigned.is_empty() {
                self.shared.emit(ConsumerEvent::Assigned(assigned));
            }
        }
    }
}

/// The concurrent consumer engine; see the module docs.
#[derive(Debug)]
pub struct ConcurrentConsumer {
    shared: Arc<Shared>,
    /// Writes failed batches when the error policy dead-letters; also used by the poller
    /// (resends). Kept out of `Shared`: the writer's delivery callbacks hold `Shared` weakly.
    dead_letters: Option<Arc<DeadLetterWriter>>,
    events: Mutex<Option<Receiver<ConsumerEvent>>>,
    poller: Mutex<Option<JoinHandle<()>>>,
}

impl ConcurrentConsumer {
    /// Creates the consumer, subscribes or assigns (resolving timestamps and, without a group,
    /// high watermarks, which waits for the broker), and starts the poller thread. `drain` is
    /// how long a revoked partition's running batch may take.
    pub fn new(
        settings: ClientSettings,
        options: ConsumerOptions,
        drain: Duration,
    ) -> KafkaResult<Arc<Self>> {
        let mut settings = settings;
        settings.bootstrap()?;
        // Elixir's KafkaClient reads a new group's backlog: earliest unless configured.
        settings.set_default("auto.offset.reset", "earliest");
        let group = settings
            .get("group.id")
            .is_some_and(|g| !g.trim().is_empty());
        options.validate(group)?;
        if let Some(value) = settings.get("enable.auto.commit")
            && !matches!(value, "false" | "0")
        {
            return Err(KafkaIoError::Config(format!(
                "enable.auto.commit={value:?}: the consumer commits offsets itself, only after \
                 the handler finished a batch (see commit_interval); leave the key out"
            )));
        }
        let bootstrap = settings.bootstrap().ok().map(str::to_owned);
        let reset_to_beginning = matches!(
            settings.get("auto.offset.reset"),
            Some("earliest" | "smallest" | "beginning")
        );
        let mut config = settings.for_role(ClientRole::Consumer).to_client_config();
        if !group {
            // librdkafka refuses `assign` without a group id; this one never joins a group
            // (nothing is subscribed) and never commits.
            config.set("group.id", "ferrokafka-without-group");
        }
        config.set("enable.auto.commit", "false");
        config.set("enable.auto.offset.store", "false");
        let dead_letters = match &options.errors.dead_letter_topic {
            Some(topic) if options.errors.dead_letters() => {
                Some(Arc::new(DeadLetterWriter::new(&settings, topic.clone())?))
            }
            _ => None,
        };
        let (events, receiver) = channel();
        let shared = Arc::new(Shared {
            options,
            group,
            slots: Mutex::new(Slots::default()),
            totals: Mutex::new(Totals::default()),
            next_worker: AtomicU64::new(1),
            events,
            closing: AtomicBool::new(false),
            shutdown: Mutex::new(Shutdown::default()),
            stopped: Condvar::new(),
            consumer: Mutex::new(None),
            wake: Arc::new(Wake::default()),
            statistics: KeptStatistics::default(),
            polled_at: Mutex::new(None),
            watch: ConnectionWatch::new(&settings),
        });
        let handler = RebalanceHandler {
            shared: Arc::clone(&shared),
            drain,
            tokens: settings.token_refresh(),
        };
        let mut consumer: Handle = oauth::create(&config, handler)
            .map_err(|e| KafkaIoError::from_rdkafka("create consumer", e, Duration::ZERO, None))?;
        let wake = Arc::clone(&shared.wake);
        consumer.set_nonempty_callback(move || wake.notify());
        let consumer = Arc::new(consumer);
        *lock(&shared.consumer) = Some(Arc::clone(&consumer));
        let started = start_consuming(&shared, &consumer, reset_to_beginning, bootstrap.as_deref());
        if let Err(error) = started {
            // Split queues and the stored handle refer back to the consumer: let it go.
            shared.remove_slots(&shared.all_slots());
            *lock(&shared.consumer) = None;
            return Err(error);
        }
        let poller_shared = Arc::clone(&shared);
        let poller_dead_letters = dead_letters.clone();
        let poller = std::thread::Builder::new()
            .name("ferrokafka-consumer".to_owned())
            .spawn(move || run_poller(&poller_shared, consumer, poller_dead_letters.as_deref()))
            .map_err(|e| KafkaIoError::InvalidArgument(format!("cannot start poller: {e}")))?;
        Ok(Arc::new(ConcurrentConsumer {
            shared,
            dead_letters,
            events: Mutex::new(Some(receiver)),
            poller: Mutex::new(Some(poller)),
        }))
    }

    /// Takes the event receiver; the bindings drain it on a Python thread. Only the first call
    /// gets it.
    pub fn take_events(&self) -> Option<Receiver<ConsumerEvent>> {
        lock(&self.events).take()
    }

    /// Waits up to `wait` for the next batch of `worker`'s partition: one that may run now
    /// (while fewer than the allowed batches of the partition run, and, ordered by key, of keys
    /// no running batch holds).
    pub fn fetch(&self, worker: WorkerId, wait: Duration) -> KafkaResult<Fetched> {
        let Some(slot) = self.shared.slot(worker) else {
            return Ok(Fetched::Gone);
        };
        let deadline = Instant::now() + wait;
        let concurrency = self.shared.options.concurrency();
        let mut state = slot.lock();
        loop {
            if state.closed {
                return Ok(Fetched::Gone);
            }
            if state.in_flight.len() < concurrency && state.buffer.queued() > 0 {
                let batch = self.take_batch(&slot, &mut state);
                if !batch.is_empty() {
                    return Ok(Fetched::Batch(batch));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Fetched::Empty);
            }
            state = slot
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn take_batch(&self, slot: &Slot, state: &mut SlotState) -> Arc<Vec<ReceivedRecord>> {
        let (batch, change) = state.buffer.take_batch();
        let batch = Arc::new(batch);
        if let Some(first) = batch.first() {
            let running = InFlight {
                first_offset: first.offset,
                records: Arc::clone(&batch),
                retries: 0,
            };
            state.in_flight.insert(first.offset, running);
            state.counters.batches += 1;
        }
        if change == Some(LoadChange::Open) {
            state.counters.resumes += 1;
            self.shared.emit(load_event(slot, state, false));
            self.shared.wake.notify();
        }
        batch
    }

    /// Takes the batch starting at `first` off its handler: its keys go free for other batches.
    fn settle(state: &mut SlotState, first: i64) -> Option<InFlight> {
        let done = state.in_flight.remove(&first)?;
        state.buffer.release(first);
        Some(done)
    }

    /// Marks `worker`'s batch starting at offset `first` finished (its offsets are committed
    /// once every batch before them finished) or abandoned. Returns false when the batch no
    /// longer counts (abandoned, or the partition was revoked).
    pub fn ack(&self, worker: WorkerId, first: i64, outcome: Outcome) -> bool {
        let Some(slot) = self.shared.slot(worker) else {
            return false;
        };
        let mut state = slot.lock();
        let Some(done) = Self::settle(&mut state, first) else {
            return false;
        };
        match outcome {
            Outcome::Handled => {
                state.counters.handled += done.records.len() as u64;
                self.shared.finish(&slot, &mut state, done.first_offset);
            }
            Outcome::Abandoned => {
                state.counters.abandoned += 1;
                state.buffer.progress_mut().abandon(done.first_offset);
            }
        }
        drop(state);
        slot.changed.notify_all();
        true
    }

    /// Applies the error policy to `worker`'s batch starting at `first`, whose handler raised
    /// `failure`: another try after a backoff, or the batch is settled: committed, or handed to
    /// the dead-letter writer (its offsets become committable once the broker acknowledged the
    /// write, and the partition moves on meanwhile). A batch of a partition being revoked, or of
    /// a stopping consumer, is abandoned instead of retried.
    pub fn fail(&self, worker: WorkerId, first: i64, failure: Failure) -> Verdict {
        let Some(slot) = self.shared.slot(worker) else {
            return Verdict::Settled;
        };
        let policy = &self.shared.options.errors;
        let mut state = slot.lock();
        let closed = state.closed;
        let Some(in_flight) = state.in_flight.get_mut(&first) else {
            return Verdict::Settled;
        };
        let retry = policy.on_error == OnError::Retry && in_flight.retries < policy.max_retries;
        if retry && !closed {
            let wait = policy.backoff(in_flight.retries);
            in_flight.retries += 1;
            state.counters.retries += 1;
            return Verdict::Retry(wait);
        }
        let Some(done) = Self::settle(&mut state, first) else {
            return Verdict::Settled;
        };
        let records = done.records.len() as u64;
        if retry {
            state.counters.abandoned += 1;
            state.buffer.progress_mut().abandon(done.first_offset);
        } else if let (true, Some(writer)) = (policy.dead_letters(), &self.dead_letters) {
            state.counters.dead_lettered += records;
            state.dead_letters_pending += 1;
            let shared = Arc::downgrade(&self.shared);
            let first = done.first_offset;
            let written = move || {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let Some(slot) = shared.slot(worker) else {
                    return;
                };
                let mut state = slot.lock();
                state.dead_letters_pending = state.dead_letters_pending.saturating_sub(1);
                shared.finish(&slot, &mut state, first);
                drop(state);
                slot.changed.notify_all();
            };
            writer.write(done.records, failure, Box::new(written));
        } else {
            state.counters.failed += records;
            self.shared.finish(&slot, &mut state, done.first_offset);
        }
        drop(state);
        slot.changed.notify_all();
        Verdict::Settled
    }

    /// Starts shutting down: no more records are routed or handed out, queued records are
    /// dropped, and running batches get `drain` to finish before their offsets are committed.
    /// Returns at once; [`ConcurrentConsumer::wait_stopped`] waits for the end.
    pub fn begin_stop(&self, drain: Duration) {
        let mut shutdown = lock(&self.shared.shutdown);
        if !shutdown.requested {
            shutdown.requested = true;
            shutdown.drain = drain;
            self.shared.closing.store(true, Ordering::Release);
        }
    }

    /// Waits up to `wait` for the poller to finish shutting down; true when it has.
    pub fn wait_stopped(&self, wait: Duration) -> bool {
        let shutdown = lock(&self.shared.shutdown);
        let (shutdown, _) = self
            .shared
            .stopped
            .wait_timeout_while(shutdown, wait, |s| !s.finished)
            .unwrap_or_else(|p| p.into_inner());
        let finished = shutdown.finished;
        drop(shutdown);
        if finished && let Some(handle) = lock(&self.poller).take() {
            let _ = handle.join();
        }
        finished
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ConsumerStats {
        let totals = lock(&self.shared.totals);
        let mut stats = ConsumerStats {
            totals: totals.counters,
            commits: totals.commits,
            commit_errors: totals.commit_errors,
            partitions: Vec::new(),
            group: self.shared.statistics.group(),
            poll_age: lock(&self.shared.polled_at).map(|at| at.elapsed()),
            transfer_rates: self.shared.statistics.transfer_rates(),
        };
        drop(totals);
        for slot in self.shared.all_slots() {
            let state = slot.lock();
            stats.totals.add(&state.counters);
            stats.partitions.push(PartitionStats {
                topic: slot.topic.clone(),
                partition: slot.partition,
                worker: slot.worker,
                queued: state.buffer.queued(),
                queued_bytes: state.buffer.queued_bytes(),
                paused: state.buffer.is_full(),
                in_flight: state.in_flight.values().map(|f| f.records.len()).sum(),
                position: state.buffer.committable(),
                committed: state.committed,
                counters: state.counters,
                broker: state.broker.clone(),
                first_received: state.first_received,
            });
        }
        stats
    }
}

impl Drop for ConcurrentConsumer {
    fn drop(&mut self) {
        // Without an explicit stop, end without draining; the poller closes the consumer on its
        // own thread so dropping never waits on the network.
        self.begin_stop(Duration::ZERO);
    }
}

/// Subscribes (a group consumer) or assigns the explicit partitions, each with its own split
/// queue, resolving timestamps and, without a group, whole topics and high watermarks.
fn start_consuming(
    shared: &Shared,
    consumer: &Arc<Handle>,
    reset_to_beginning: bool,
    bootstrap: Option<&str>,
) -> KafkaResult<()> {
    let error = |operation: &str, e: KafkaError| {
        KafkaIoError::from_rdkafka(operation, e, LOOKUP_TIMEOUT, bootstrap)
    };
    let subscriptions = &shared.options.subscriptions;
    if shared.group
        && subscriptions
            .iter()
            .all(|s| matches!(s, Subscription::Topic(_)))
    {
        let topics: Vec<&str> = subscriptions
            .iter()
            .filter_map(|s| match s {
                Subscription::Topic(t) => Some(t.as_str()),
                Subscription::Partition { .. } => None,
            })
            .collect();
        consumer
            .subscribe(&topics)
            .map_err(|e| error("subscribe", e))?;
    } else {
        let subscriptions = whole_topics(consumer, subscriptions, &error)?;
        let partitions =
            resolve_partitions(consumer, &subscriptions, shared.group, reset_to_beginning)
                .map_err(|e| error("assign", e))?;
        let mut tpl = TopicPartitionList::new();
        for (topic, partition, offset, _) in &partitions {
            tpl.add_partition_offset(topic, *partition, *offset)
                .map_err(|e| error("assign", e))?;
        }
        consumer.assign(&tpl).map_err(|e| error("assign", e))?;
        let caught_up: Vec<(String, i32, i64)> = partitions
            .iter()
            .filter_map(|(t, p, _, target)| match target {
                CatchUp::Already(high) => Some((t.clone(), *p, *high)),
                _ => None,
            })
            .collect();
        let assigned = shared.add_slots(
            partitions
                .into_iter()
                .map(|(t, p, _, target)| {
                    let to = match target {
                        CatchUp::At(high) => Some(high),
                        CatchUp::Already(_) | CatchUp::Untracked => None,
                    };
                    (t, p, to)
                })
                .collect(),
        );
        shared.emit(ConsumerEvent::Assigned(assigned));
        for (topic, partition, offset) in caught_up {
            shared.emit(ConsumerEvent::CaughtUp {
                topic,
                partition,
                offset,
            });
        }
    }
    Ok(())
}

/// What a consumer without a group reports as caught up.
enum CatchUp {
    /// Report reaching this high watermark.
    At(i64),
    /// Nothing to read at start: report at once.
    Already(i64),
    /// A group consumer: caught-up is not reported.
    Untracked,
}

/// Replaces each topic name (of a consumer without a group) by all partitions of the topic,
/// starting at the stored offset, which for this never-committing consumer means
/// `auto.offset.reset`.
fn whole_topics(
    consumer: &Handle,
    subscriptions: &[Subscription],
    error: &dyn Fn(&str, KafkaError) -> KafkaIoError,
) -> KafkaResult<Vec<Subscription>> {
    let mut expanded = Vec::with_capacity(subscriptions.len());
    for subscription in subscriptions {
        let Subscription::Topic(topic) = subscription else {
            expanded.push(subscription.clone());
            continue;
        };
        let metadata = consumer
            .fetch_metadata(Some(topic), LOOKUP_TIMEOUT)
            .map_err(|e| error("assign", e))?;
        let found = metadata.topics().iter().find(|t| t.name() == topic);
        let partitions = match found {
            Some(t) if t.error().is_none() && !t.partitions().is_empty() => t.partitions(),
            _ => {
                return Err(KafkaIoError::InvalidArgument(format!(
                    "topic {topic:?} does not exist (a consumer without group.id assigns itself \
                     all partitions of a topic, so the topic must exist)"
                )));
            }
        };
        expanded.extend(partitions.iter().map(|p| Subscription::Partition {
            topic: topic.clone(),
            partition: p.id(),
            start: StartAt::Stored,
        }));
    }
    Ok(expanded)
}

/// Resolves explicit partition subscriptions to start offsets (timestamps via the broker) and,
/// without a group, to the high watermark to report reaching.
fn resolve_partitions(
    consumer: &Handle,
    subscriptions: &[Subscription],
    group: bool,
    reset_to_beginning: bool,
) -> Result<Vec<(String, i32, Offset, CatchUp)>, KafkaError> {
    let mut resolved = Vec::with_capacity(subscriptions.len());
    for subscription in subscriptions {
        let Subscription::Partition {
            topic,
            partition,
            start,
        } = subscription
        else {
            continue;
        };
        let offset = match *start {
            StartAt::Stored => Offset::Stored,
            StartAt::Beginning => Offset::Beginning,
            StartAt::End => Offset::End,
            StartAt::Offset(n) => Offset::Offset(n),
            StartAt::Timestamp(ms) => {
                let mut query = TopicPartitionList::new();
                query.add_partition_offset(topic, *partition, Offset::Offset(ms))?;
                let found = consumer.offsets_for_times(query, LOOKUP_TIMEOUT)?;
                found
                    .find_partition(topic, *partition)
                    .map_or(Offset::End, |e| match e.offset() {
                        Offset::Offset(n) => Offset::Offset(n),
                        _ => Offset::End,
                    })
            }
        };
        let catch_up = if group {
            CatchUp::Untracked
        } else {
            let (low, high) = consumer.fetch_watermarks(topic, *partition, LOOKUP_TIMEOUT)?;
            let first = match offset {
                Offset::Offset(n) => n.max(low),
                Offset::Beginning => low,
                Offset::Stored if reset_to_beginning => low,
                _ => high,
            };
            if first >= high {
                CatchUp::Already(high)
            } else {
                CatchUp::At(high)
            }
        };
        resolved.push((topic.clone(), *partition, offset, catch_up));
    }
    Ok(resolved)
}

/// The poller thread: route records, commit on schedule, and on shutdown drain, commit and close.
fn run_poller(
    shared: &Arc<Shared>,
    consumer: Arc<Handle>,
    dead_letters: Option<&DeadLetterWriter>,
) {
    let interval = shared.options.commit_interval;
    let mut next_commit = Instant::now() + interval;
    let mut chunk: Vec<ReceivedRecord> = Vec::with_capacity(ROUTE_CHUNK);
    while !shared.closing.load(Ordering::Acquire) {
        // The main queue first: rebalances and statistics are served here, and records fetched
        // before their partition's queue was split come before those in that queue.
        shared.take_ready(&mut chunk, ROUTE_CHUNK, |wait| consumer.poll(wait));
        *lock(&shared.polled_at) = Some(Instant::now());
        let mut routed = chunk.len();
        shared.route_chunk(&mut chunk);
        for slot in shared.all_slots() {
            routed += shared.poll_partition(&slot);
        }
        if routed == 0 {
            shared.wake.wait(POLL_WAIT);
        }
        if let Some(writer) = dead_letters {
            writer.resend_due(Instant::now());
        }
        if Instant::now() >= next_commit {
            shared.commit(&consumer, &shared.all_slots());
            next_commit = Instant::now() + interval;
        }
    }
    let drain = lock(&shared.shutdown).drain;
    shared.release(&consumer, shared.all_slots(), drain, false);
    // `release` dropped the split queues; with the stored handle gone too, dropping the last
    // reference here closes the consumer (leaving the group) on this thread, not a Python one.
    *lock(&shared.consumer) = None;
    drop(consumer);
    lock(&shared.shutdown).finished = true;
    shared.stopped.notify_all();
}
