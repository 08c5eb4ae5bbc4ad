//! What the poller, the workers and librdkafka's callbacks share ([`Shared`]): one [`Slot`] per
//! assigned partition (its buffer, its batches in flight, its commit progress and its split
//! queue), found by worker id or by partition.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ferrokafka_core::{BufferedRecord, PartitionBuffer, PartitionLimits};
use rdkafka::consumer::BaseConsumer;

use super::events::{Assignment, ConsumerEvent, WorkerId};
use super::options::ConsumerOptions;
use super::stats::{PartitionCounters, Totals};
use super::waiting::Waiting;
use crate::connection_failure::ConnectionWatch;
use crate::locks::lock;
use crate::oauth::TokenRefresh;
use crate::partition_source::PartitionSource;
use crate::record::ReceivedRecord;
use crate::statistics::{BrokerOffsets, KeptStatistics};
use crate::wake::Wake;

/// The batch a worker is handling.
#[derive(Clone, Debug)]
pub(super) struct InFlight {
    pub(super) first_offset: i64,
    pub(super) records: Arc<Vec<ReceivedRecord>>,
    /// Retries so far (the `retry` error policy).
    pub(super) retries: u32,
    /// When it was handed to its handler.
    pub(super) started: Instant,
    /// Its handler was said to overrun `max.poll.interval.ms` (see `overdue`).
    pub(super) overdue_said: bool,
}

#[derive(Debug)]
pub(super) struct SlotState {
    /// Queued records, bounds, and the batches handed out with the offset to commit.
    pub(super) buffer: PartitionBuffer<ReceivedRecord>,
    /// Batches being handled, by first offset (at most one with ordering by partition).
    pub(super) in_flight: HashMap<i64, InFlight>,
    /// Batches waiting for their dead-letter write to be acknowledged.
    pub(super) dead_letters_pending: usize,
    /// The offset of the latest commit request, confirmed or not.
    pub(super) commit_requested: Option<i64>,
    /// The latest offset the broker confirmed.
    pub(super) committed: Option<i64>,
    /// No more batches: revoked, abandoned or shutting down.
    pub(super) closed: bool,
    /// For a consumer without a group: the high watermark whose reaching is reported once.
    pub(super) catch_up_to: Option<i64>,
    pub(super) counters: PartitionCounters,
    pub(super) broker: Option<BrokerOffsets>,
    /// Offset of the first record routed since the assignment: where this consumer's work on
    /// the partition began, the base of its lag until an offset is committed.
    pub(super) first_received: Option<i64>,
}

impl SlotState {
    /// Whether a fetch may take a batch now: fewer than `concurrency` batches run and records
    /// are queued (ordered by key, a running batch may still hold every queued key).
    pub(super) fn may_hand_out(&self, concurrency: usize) -> bool {
        self.in_flight.len() < concurrency && self.buffer.queued() > 0
    }
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
pub(super) struct Slot {
    pub(super) worker: WorkerId,
    /// Shared with every record routed here (see `ReceivedRecord::from_message_of`).
    pub(super) topic: Arc<str>,
    pub(super) partition: i32,
    pub(super) state: Mutex<SlotState>,
    /// Workers wait here for records; drainers wait here for the batch in flight to finish.
    pub(super) changed: Condvar,
    /// The partition's split queue, polled by the poller only; `None` until split, and after
    /// the slot was released (its records then arrive on the main queue, if any).
    pub(super) source: Mutex<Option<PartitionSource<RebalanceHandler>>>,
    /// The offset of the undecodable batch last reported (-1: none): librdkafka fetches it
    /// again every `fetch.error.backoff.ms`, and it is said once, not twice a second.
    pub(super) undecodable_at: AtomicI64,
}

impl Slot {
    pub(super) fn lock(&self) -> MutexGuard<'_, SlotState> {
        // A panic while holding the lock would be a bug in this engine; keep serving regardless.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn assignment(&self) -> Assignment {
        Assignment {
            worker: self.worker,
            topic: self.topic.to_string(),
            partition: self.partition,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Slots {
    pub(super) by_worker: HashMap<WorkerId, Arc<Slot>>,
    pub(super) by_partition: HashMap<(String, i32), Arc<Slot>>,
}

/// How the poller should end.
#[derive(Debug, Default)]
pub(super) struct Shutdown {
    pub(super) requested: bool,
    pub(super) drain: Duration,
    /// Set once the consumer is closing: past it, the stop counts as done while librdkafka
    /// still waits for the coordinator.
    pub(super) close_by: Option<Instant>,
    pub(super) finished: bool,
}

pub(super) type Handle = BaseConsumer<RebalanceHandler>;

pub(super) struct Shared {
    pub(super) options: ConsumerOptions,
    pub(super) group: bool,
    pub(super) slots: Mutex<Slots>,
    pub(super) totals: Mutex<Totals>,
    pub(super) next_worker: AtomicU64,
    pub(super) events: Sender<ConsumerEvent>,
    /// Whether `LoadControl` events are sent (someone listens: telemetry subscribers); off,
    /// pauses and resumes are only counted. A handler that keeps up makes about one of each
    /// a batch, and each wakes whoever takes the events (a Python thread that takes the GIL).
    pub(super) load_changes_wanted: AtomicBool,
    pub(super) closing: AtomicBool,
    pub(super) shutdown: Mutex<Shutdown>,
    /// The caller of `stop` waits here for the poller to finish.
    pub(super) stopped: Condvar,
    /// The consumer, for splitting partition queues; the poller takes it out when it closes
    /// the consumer, so the last reference is dropped on the poller thread.
    pub(super) consumer: Mutex<Option<Arc<Handle>>>,
    /// Wakes the poller.
    pub(super) wake: Arc<Wake>,
    /// Workers an event loop waits for without a thread ([`super::ConcurrentConsumer::fetch_ready`]).
    pub(super) waiting: Waiting,
    /// The group's state and the transfer rates from the latest statistics (the partitions'
    /// figures are kept in their slots).
    pub(super) statistics: KeptStatistics,
    /// When the poller last returned from librdkafka's poll.
    pub(super) polled_at: Mutex<Option<Instant>>,
    /// Why librdkafka cannot connect, for the error events that say so only by their code.
    pub(super) watch: ConnectionWatch,
    /// How long a handler may run before it is said to overrun (`max.poll.interval.ms`).
    pub(super) overdue_after: Duration,
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
    pub(super) fn emit(&self, event: ConsumerEvent) {
        // After the bindings dropped the receiver nobody listens any more; that is fine.
        let _ = self.events.send(event);
        self.waiting.notify_event();
    }

    /// Says that `slot`'s buffer became full (`paused`) or open again, as it is now, if the
    /// bindings asked to hear of it ([`super::ConcurrentConsumer::report_load_changes`]).
    pub(super) fn say_load_change(&self, slot: &Slot, state: &SlotState, paused: bool) {
        if self.load_changes_wanted.load(Ordering::Relaxed) {
            self.emit(ConsumerEvent::LoadControl {
                topic: slot.topic.to_string(),
                partition: slot.partition,
                paused,
                queued: state.buffer.queued(),
                queued_bytes: state.buffer.queued_bytes(),
            });
        }
    }

    pub(super) fn slot(&self, worker: WorkerId) -> Option<Arc<Slot>> {
        lock(&self.slots).by_worker.get(&worker).cloned()
    }

    /// Creates slots for newly assigned partitions, each with its own split queue; `catch_up`
    /// gives, per partition, the high watermark a consumer without a group reports reaching (or
    /// `None`). A partition that already has a slot keeps it and its queue.
    pub(super) fn add_slots(&self, partitions: Vec<(String, i32, Option<i64>)>) -> Vec<Assignment> {
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
        // Closing the consumer can deliver an assignment after the poller released every slot:
        // a slot added then would never be released, and its worker would fetch forever.
        // Checked under the slots lock, which the final release takes too.
        if self.closing.load(Ordering::Acquire) {
            return Vec::new();
        }
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
                topic: topic.into(),
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
                undecodable_at: AtomicI64::new(-1),
            });
            assigned.push(slot.assignment());
            slots.by_worker.insert(slot.worker, Arc::clone(&slot));
            slots.by_partition.insert(key, slot);
        }
        assigned
    }

    /// Forgets `slots` (their workers' later calls see `Gone`) and folds their counters into the
    /// totals.
    pub(super) fn remove_slots(&self, slots: &[Arc<Slot>]) {
        let mut map = lock(&self.slots);
        let mut totals = lock(&self.totals);
        for slot in slots {
            map.by_worker.remove(&slot.worker);
            map.by_partition
                .remove(&(slot.topic.to_string(), slot.partition));
            totals.counters.add(&slot.lock().counters);
            // The queue keeps the consumer alive; a revoked partition's queue is not needed.
            lock(&slot.source).take();
        }
    }

    pub(super) fn all_slots(&self) -> Vec<Arc<Slot>> {
        let mut slots: Vec<Arc<Slot>> = lock(&self.slots).by_worker.values().cloned().collect();
        slots.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        slots
    }
}

/// librdkafka's consumer context: rebalances and commit results, handled in Rust on the poller
/// thread (inside `poll`). Its callbacks are in `rebalance`; it is defined here, beside the
/// state it reaches, because that state holds the consumer it is the context of.
#[derive(Debug)]
pub(super) struct RebalanceHandler {
    pub(super) shared: Arc<Shared>,
    /// How long a revoked partition's running batch may take before it is abandoned.
    pub(super) drain: Duration,
    pub(super) tokens: TokenRefresh,
}
