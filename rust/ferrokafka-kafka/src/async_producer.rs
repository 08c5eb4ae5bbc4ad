//! [`AsyncProducer`]: a background batching producer with a bounded queue and backpressure,
//! modelled on ruby-kafka's `AsyncProducer`, delivering through librdkafka.
//!
//! Threads and locks:
//! - Callers (`produce`, `produce_many`, `deliver_messages`, `flush`, `shutdown`) only touch the
//!   shared [`State`] under its mutex; they never wait on the network while holding it.
//! - One delivery worker thread moves buffered records to librdkafka when the delivery policy
//!   (threshold, interval, explicit request, shutdown) or a due retry says so.
//! - librdkafka's polling thread (owned by `ThreadedProducer`) runs [`DeliveryTracker::delivery`],
//!   which settles in-flight counts, schedules retries and pushes [`ProducerEvent`]s into a channel.
//!   No Python ever runs on these threads: the bindings drain the channel on a Python thread.
//!
//! Invariants: every record accepted by `produce` ends in exactly one of: delivered, handed back
//! in a `Failed` event (retries exhausted or a permanent error), handed back in a `Dropped` event
//! (`drop_oldest`), or returned by `shutdown` as undelivered. Nothing is lost silently.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrokafka_core::batch::{
    BatchBuffer, BufferLimits, DeliveryPolicy, Overflow, OverflowPolicy, PushOutcome,
};
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{
    BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig, ThreadedProducer,
};

use crate::config::ClientSettings;
use crate::error::{KafkaIoError, KafkaResult};
use crate::partitioner::PartitionCounts;
use crate::record::{OutgoingRecord, ReceivedRecord};

/// Identifies a record whose delivery result the caller wants back; 0 means "not tracked".
pub type Ticket = u64;

/// How long the worker sleeps at most between checks of the interval trigger and retries.
const WORKER_TICK: Duration = Duration::from_millis(50);
/// Records handed to librdkafka per lock acquisition, so producers are not held off for long.
const HANDOFF_CHUNK: usize = 1000;

/// Settings of an [`AsyncProducer`] beyond librdkafka's own.
#[derive(Clone, Debug, PartialEq)]
pub struct AsyncProducerOptions {
    /// Most records buffered before the overflow policy applies [1000].
    pub max_queue_size: usize,
    /// Most bytes (keys, values, headers) buffered before the overflow policy applies.
    pub max_queue_bytes: usize,
    /// What a full queue does to a new record [raise].
    pub overflow: OverflowPolicy,
    /// How long `block` waits for room before giving up.
    pub block_timeout: Duration,
    /// Deliver when this many records are buffered; 0 = off [0].
    pub delivery_threshold: usize,
    /// Deliver this often; zero = off [0].
    pub delivery_interval: Duration,
    /// Re-sends of a record after librdkafka reported it failed; -1 = unlimited [-1].
    pub max_retries: i64,
    /// Pause before a failed record is sent again [0].
    pub retry_backoff: Duration,
}

impl Default for AsyncProducerOptions {
    fn default() -> Self {
        AsyncProducerOptions {
            max_queue_size: 1000,
            max_queue_bytes: 64 * 1024 * 1024,
            overflow: OverflowPolicy::Raise,
            block_timeout: Duration::from_secs(10),
            delivery_threshold: 0,
            delivery_interval: Duration::ZERO,
            max_retries: -1,
            retry_backoff: Duration::ZERO,
        }
    }
}

impl AsyncProducerOptions {
    fn validate(&self) -> KafkaResult<()> {
        let invalid = |message: String| Err(KafkaIoError::InvalidArgument(message));
        if self.max_queue_size == 0 {
            return invalid("max_queue_size must be positive".to_owned());
        }
        if self.max_queue_bytes == 0 {
            return invalid("max_queue_bytes must be positive".to_owned());
        }
        if self.delivery_threshold > self.max_queue_size {
            return invalid(format!(
                "delivery_threshold ({}) cannot exceed max_queue_size ({}): the queue would fill \
                 before a delivery is triggered",
                self.delivery_threshold, self.max_queue_size
            ));
        }
        if self.max_retries < -1 {
            return invalid(format!(
                "max_retries must be -1 (unlimited) or >= 0, got {}",
                self.max_retries
            ));
        }
        Ok(())
    }
}

/// A record in the producer's care, with what is needed to report on it.
#[derive(Clone, Debug)]
pub struct Pending {
    /// The record.
    pub record: OutgoingRecord,
    /// Hashing key for choosing the partition, when it differs from the record key.
    pub partition_key: Option<Vec<u8>>,
    /// Delivery-result ticket (0 = untracked).
    pub ticket: Ticket,
    /// Sends so far that librdkafka reported failed.
    pub failures: u32,
}

/// Something the bindings report to Python: delivery results and instrumentation.
#[derive(Debug)]
pub enum ProducerEvent {
    /// A tracked record was written.
    Delivered {
        /// The record's ticket.
        ticket: Ticket,
        /// Where it landed.
        record: ReceivedRecord,
    },
    /// A record finally failed; it is handed back with the error.
    Failed {
        /// The record.
        pending: Pending,
        /// Why it failed.
        error: KafkaIoError,
    },
    /// Records dropped by the `drop_oldest` policy, handed back.
    Dropped {
        /// The dropped records, oldest first.
        pending: Vec<Pending>,
    },
    /// A delivery round handed records to librdkafka (`deliver_messages`).
    DeliverMessages {
        /// Records handed over in the round.
        message_count: usize,
        /// Records still buffered after it.
        queue_size: usize,
    },
    /// librdkafka reported a failed send that will be retried (`delivery_error`).
    DeliveryError {
        /// Topic of the record.
        topic: String,
        /// The error.
        error: KafkaIoError,
        /// Failures of this record so far.
        attempt: u32,
    },
}

/// Counters exposed by [`AsyncProducer::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Records accepted into the queue.
    pub enqueued: u64,
    /// Records confirmed written by the broker.
    pub delivered: u64,
    /// Records handed back after their final failure.
    pub failed: u64,
    /// Re-sends after a failure.
    pub retried: u64,
    /// Records dropped by `drop_oldest`.
    pub dropped: u64,
    /// Records refused because the queue was full.
    pub overflowed: u64,
    /// Delivery rounds run.
    pub deliveries: u64,
    /// Records buffered now.
    pub queue_size: u64,
    /// Bytes buffered now.
    pub queue_bytes: u64,
    /// Records handed to librdkafka and not yet settled.
    pub in_flight: u64,
}

/// Why a record was not accepted.
#[derive(Debug)]
pub enum Refusal {
    /// The queue is full; the policy refused the record (given back).
    Overflow(Box<Overflow<Pending>>),
    /// The producer is shutting down or shut down.
    Closed(Box<Pending>),
}

struct State {
    buffer: BatchBuffer<Pending>,
    retries: VecDeque<(Instant, Pending)>,
    deliver_requested: bool,
    closing: bool,
    /// The worker is waiting on `work`; producers only notify then, which keeps a futex wake
    /// off the path of every record while the worker is busy.
    worker_idle: bool,
    stats: ProducerStats,
}

struct Shared {
    state: Mutex<State>,
    /// The worker waits here for work; producers and delivery reports notify it.
    work: Condvar,
    /// Blocked producers and flushers wait here for room or for settling.
    progress: Condvar,
    events: Sender<ProducerEvent>,
    options: AsyncProducerOptions,
    /// Records handed to librdkafka and not settled. Atomic so that the delivery callback of a
    /// successful record never takes the state lock; it is only incremented under that lock,
    /// so "buffer empty and nothing in flight" is never seen in between.
    in_flight: AtomicUsize,
    /// Records confirmed written, counted without the lock for the same reason.
    delivered: AtomicU64,
    epoch: Instant,
    next_ticket: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock would be a bug in this file; keep serving regardless.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// True when nothing is buffered, waiting for a retry, or in flight.
    fn settled(&self, state: &State) -> bool {
        state.buffer.is_empty()
            && state.retries.is_empty()
            && self.in_flight.load(Ordering::Acquire) == 0
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn emit(&self, event: ProducerEvent) {
        // The receiver lives as long as the producer; after shutdown nobody listens any more.
        let _ = self.events.send(event);
    }
}

/// librdkafka's delivery callback context: settles records and schedules retries.
struct DeliveryTracker {
    shared: Arc<Shared>,
}

impl ClientContext for DeliveryTracker {}

impl ProducerContext for DeliveryTracker {
    type DeliveryOpaque = Box<Pending>;

    fn delivery(&self, result: &DeliveryResult<'_>, mut pending: Self::DeliveryOpaque) {
        let shared = &self.shared;
        match result {
            Ok(message) => {
                shared.delivered.fetch_add(1, Ordering::Relaxed);
                if pending.ticket != 0 {
                    let record = ReceivedRecord::from_message(message);
                    shared.emit(ProducerEvent::Delivered {
                        ticket: pending.ticket,
                        record,
                    });
                }
                if shared.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
                    // Notify under the lock: a flusher checks and waits under it, so it cannot
                    // miss this wake-up.
                    let _state = shared.lock();
                    shared.progress.notify_all();
                }
            }
            Err((err, message)) => {
                pending.failures += 1;
                pending.record.topic = message.topic().to_owned();
                pending.record.key = message.key().map(<[u8]>::to_vec);
                pending.record.value = message.payload().map(<[u8]>::to_vec);
                let error =
                    KafkaIoError::from_rdkafka("produce", err.clone(), Duration::ZERO, None);
                let options = &shared.options;
                let retry = is_transient(err)
                    && (options.max_retries < 0
                        || i64::from(pending.failures) <= options.max_retries);
                let mut state = shared.lock();
                if retry {
                    state.stats.retried += 1;
                    let topic = pending.record.topic.clone();
                    let attempt = pending.failures;
                    state
                        .retries
                        .push_back((Instant::now() + options.retry_backoff, *pending));
                    shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                    drop(state);
                    shared.work.notify_one();
                    shared.emit(ProducerEvent::DeliveryError {
                        topic,
                        error,
                        attempt,
                    });
                } else {
                    state.stats.failed += 1;
                    shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                    let settled = shared.settled(&state);
                    drop(state);
                    shared.emit(ProducerEvent::Failed {
                        pending: *pending,
                        error,
                    });
                    if settled {
                        shared.progress.notify_all();
                    }
                }
            }
        }
    }
}

/// Whether sending the same record again may succeed: not for oversize or malformed records,
/// and not for records purged by shutdown.
fn is_transient(err: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    !matches!(
        err.rdkafka_error_code(),
        Some(
            C::MessageSizeTooLarge
                | C::InvalidMessageSize
                | C::InvalidMessage
                | C::InvalidRecord
                | C::TopicAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::InvalidTopic
                | C::PurgeQueue
                | C::PurgeInflight
                | C::Fatal
        )
    )
}

/// The background batching producer; see the module docs.
pub struct AsyncProducer {
    shared: Arc<Shared>,
    producer: ThreadedProducer<DeliveryTracker>,
    events: Mutex<Option<Receiver<ProducerEvent>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    transactional: bool,
    partitions: PartitionCounts,
}

impl std::fmt::Debug for AsyncProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncProducer")
            .field("options", &self.shared.options)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl AsyncProducer {
    /// Creates the producer and starts its delivery worker. With `transactional.id` set, every
    /// delivery round is one transaction.
    pub fn new(settings: ClientSettings, options: AsyncProducerOptions) -> KafkaResult<Arc<Self>> {
        options.validate()?;
        settings.bootstrap()?;
        let limits = BufferLimits {
            max_count: options.max_queue_size,
            max_bytes: options.max_queue_bytes,
            overflow: options.overflow,
        };
        let delivery = DeliveryPolicy {
            delivery_threshold: options.delivery_threshold,
            delivery_interval_ms: u64::try_from(options.delivery_interval.as_millis())
                .unwrap_or(u64::MAX),
        };
        let buffer = BatchBuffer::new(limits, delivery, 0)
            .map_err(|e| KafkaIoError::InvalidArgument(e.to_string()))?;
        let (events, receiver) = channel();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                buffer,
                retries: VecDeque::new(),
                deliver_requested: false,
                closing: false,
                worker_idle: false,
                stats: ProducerStats::default(),
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
            events,
            options,
            epoch: Instant::now(),
            next_ticket: AtomicU64::new(1),
            in_flight: AtomicUsize::new(0),
            delivered: AtomicU64::new(0),
        });
        let transactional = settings.get("transactional.id").is_some();
        let producer: ThreadedProducer<DeliveryTracker> = settings
            .to_client_config()
            .create_with_context(DeliveryTracker {
                shared: Arc::clone(&shared),
            })
            .map_err(|e| KafkaIoError::from_rdkafka("create producer", e, Duration::ZERO, None))?;
        if transactional {
            producer
                .init_transactions(Duration::from_secs(30))
                .map_err(|e| {
                    KafkaIoError::from_rdkafka(
                        "init_transactions",
                        e,
                        Duration::from_secs(30),
                        settings.bootstrap().ok(),
                    )
                })?;
        }
        let engine = Arc::new(AsyncProducer {
            shared,
            producer,
            events: Mutex::new(Some(receiver)),
            worker: Mutex::new(None),
            transactional,
            partitions: PartitionCounts::default(),
        });
        let worker_engine = Arc::clone(&engine);
        let handle = std::thread::Builder::new()
            .name("ferrokafka-producer".to_owned())
            .spawn(move || worker_engine.run_worker())
            .map_err(|e| KafkaIoError::InvalidArgument(format!("cannot start worker: {e}")))?;
        *engine.worker.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        Ok(engine)
    }

    /// A fresh ticket for a record whose delivery result the caller wants.
    pub fn ticket(&self) -> Ticket {
        self.shared.next_ticket.fetch_add(1, Ordering::Relaxed)
    }

    /// Takes the event receiver; the bindings drain it on a Python thread. Only the first call
    /// gets it.
    pub fn take_events(&self) -> Option<Receiver<ProducerEvent>> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Queues records from the front of `items` under one lock, without waiting, until all
    /// are queued or one is refused. Returns how many were queued and the refusal, whose record
    /// is handed back (a `block` caller puts it back in front and waits for room).
    /// `drop_oldest` reports what it dropped in a `Dropped` event.
    pub fn try_produce(&self, items: &mut VecDeque<Pending>) -> (usize, Option<Refusal>) {
        let shared = &self.shared;
        let mut state = shared.lock();
        if state.closing {
            return (0, items.pop_front().map(|p| Refusal::Closed(Box::new(p))));
        }
        let mut accepted = 0;
        let mut dropped = Vec::new();
        let mut refusal = None;
        while let Some(pending) = items.pop_front() {
            let size = pending.record.size() + pending.partition_key.as_ref().map_or(0, Vec::len);
            match state.buffer.push(pending, size) {
                Ok(PushOutcome::Queued) => accepted += 1,
                Ok(PushOutcome::QueuedAfterDropping(oldest)) => {
                    accepted += 1;
                    dropped.extend(oldest);
                }
                Err(overflow) => {
                    state.stats.overflowed += 1;
                    refusal = Some(Refusal::Overflow(Box::new(overflow)));
                    break;
                }
            }
        }
        state.stats.enqueued += accepted as u64;
        state.stats.dropped += dropped.len() as u64;
        let wake = state.worker_idle && state.buffer.should_deliver(shared.now_ms());
        drop(state);
        if !dropped.is_empty() {
            shared.emit(ProducerEvent::Dropped { pending: dropped });
        }
        if wake {
            shared.work.notify_one();
        }
        (accepted, refusal)
    }

    /// Records buffered now.
    pub fn queue_size(&self) -> usize {
        self.shared.lock().buffer.len()
    }

    /// Waits up to `wait` for the queue to have room (or to change); used by the `block` policy
    /// between attempts.
    pub fn wait_for_room(&self, wait: Duration) {
        let state = self.shared.lock();
        if state.buffer.len() >= state.buffer.limits().max_count || state.closing {
            let _ = self.shared.progress.wait_timeout(state, wait);
        }
    }

    /// Asks the worker to deliver everything buffered now; returns at once.
    pub fn deliver_messages(&self) {
        self.shared.lock().deliver_requested = true;
        self.shared.work.notify_one();
    }

    /// Delivers everything buffered and waits up to `wait` for every record to settle. Returns
    /// true when settled. Callers wait in slices to check for signals.
    pub fn flush_step(&self, wait: Duration) -> bool {
        let mut state = self.shared.lock();
        if self.shared.settled(&state) {
            return true;
        }
        if !state.buffer.is_empty() {
            state.deliver_requested = true;
            self.shared.work.notify_one();
        }
        let (state, _) = self
            .shared
            .progress
            .wait_timeout_while(state, wait, |s| !self.shared.settled(s))
            .unwrap_or_else(|p| p.into_inner());
        self.shared.settled(&state)
    }

    /// Starts shutting down: refuses new records and delivers what is buffered.
    pub fn begin_shutdown(&self) {
        let mut state = self.shared.lock();
        state.closing = true;
        state.deliver_requested = true;
        drop(state);
        self.shared.work.notify_one();
        self.shared.progress.notify_all();
    }

    /// Ends a shutdown: purges what librdkafka still holds (reported as `Failed` events), stops
    /// the worker, and returns the records that were never handed to librdkafka.
    pub fn finish_shutdown(&self) -> Vec<Pending> {
        self.begin_shutdown();
        self.producer
            .purge(PurgeConfig::default().queue().inflight());
        // Purged records come back through the delivery callback on librdkafka's polling thread.
        let _ = self.producer.flush(Duration::from_secs(5));
        let handle = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = handle {
            self.shared.work.notify_all();
            let _ = handle.join();
        }
        let mut state = self.shared.lock();
        let mut undelivered: Vec<Pending> = state.buffer.drain_chunk(usize::MAX);
        undelivered.extend(state.retries.drain(..).map(|(_, p)| p));
        state.stats.failed += undelivered.len() as u64;
        state.stats.queue_size = 0;
        undelivered
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ProducerStats {
        let state = self.shared.lock();
        ProducerStats {
            queue_size: state.buffer.len() as u64,
            queue_bytes: state.buffer.bytes() as u64,
            in_flight: self.shared.in_flight.load(Ordering::Acquire) as u64,
            delivered: self.shared.delivered.load(Ordering::Relaxed),
            ..state.stats
        }
    }

    /// The producer's options.
    pub fn options(&self) -> &AsyncProducerOptions {
        &self.shared.options
    }

    fn run_worker(&self) {
        loop {
            let Some(batch) = self.next_batch() else {
                return;
            };
            let count = batch.len();
            if count > 0 {
                self.hand_off(batch);
                let queue_size = self.shared.lock().buffer.len();
                self.shared.emit(ProducerEvent::DeliverMessages {
                    message_count: count,
                    queue_size,
                });
            }
        }
    }

    /// Waits for a reason to deliver and takes the next chunk; `None` when the worker should stop.
    fn next_batch(&self) -> Option<Vec<Pending>> {
        let shared = &self.shared;
        let mut state = shared.lock();
        loop {
            let now = Instant::now();
            let mut batch: Vec<Pending> = Vec::new();
            while state.retries.front().is_some_and(|(due, _)| *due <= now) {
                if let Some((_, pending)) = state.retries.pop_front() {
                    batch.push(pending);
                }
            }
            let now_ms = shared.now_ms();
            if state.deliver_requested || state.buffer.should_deliver(now_ms) {
                batch.extend(
                    state
                        .buffer
                        .drain_chunk(HANDOFF_CHUNK - batch.len().min(HANDOFF_CHUNK)),
                );
                if state.buffer.is_empty() {
                    state.deliver_requested = false;
                    state.buffer.mark_delivered(now_ms);
                }
            }
            if !batch.is_empty() {
                shared.in_flight.fetch_add(batch.len(), Ordering::AcqRel);
                state.stats.deliveries += u64::from(state.buffer.is_empty());
                drop(state);
                shared.progress.notify_all();
                return Some(batch);
            }
            if state.closing && state.buffer.is_empty() && state.retries.is_empty() {
                return None;
            }
            let next_retry = state
                .retries
                .front()
                .map(|(due, _)| due.saturating_duration_since(now));
            let wait = next_retry.map_or(WORKER_TICK, |d| d.min(WORKER_TICK));
            state.worker_idle = true;
            state = shared
                .work
                .wait_timeout(state, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            state.worker_idle = false;
        }
    }

    /// Sends a batch to librdkafka, inside one transaction when the producer is transactional.
    fn hand_off(&self, batch: Vec<Pending>) {
        if self.transactional
            && let Err(e) = self.producer.begin_transaction()
        {
            self.fail_batch(
                batch,
                KafkaIoError::from_rdkafka("begin_transaction", e, Duration::ZERO, None),
            );
            return;
        }
        for mut pending in batch {
            if pending.record.partition.is_none()
                && let Some(key) = pending.partition_key.as_deref()
            {
                pending.record.partition = self.partitions.partition_for(
                    self.producer.client(),
                    &pending.record.topic,
                    key,
                );
            }
            self.send(Box::new(pending));
        }
        if self.transactional
            && let Err(e) = self.producer.commit_transaction(Duration::from_secs(60))
        {
            log::error!("commit_transaction failed, aborting: {e}");
            let _ = self.producer.abort_transaction(Duration::from_secs(30));
        }
    }

    fn fail_batch(&self, batch: Vec<Pending>, error: KafkaIoError) {
        let mut state = self.shared.lock();
        state.stats.failed += batch.len() as u64;
        self.shared
            .in_flight
            .fetch_sub(batch.len(), Ordering::AcqRel);
        drop(state);
        for mut pending in batch {
            pending.failures += 1;
            self.shared.emit(ProducerEvent::Failed {
                pending,
                error: error.clone(),
            });
        }
        self.shared.progress.notify_all();
    }

    /// Hands one record to librdkafka, waiting while librdkafka's own queue is full. The key,
    /// value and topic move into librdkafka's copy; a failure restores them from the message.
    fn send(&self, mut pending: Box<Pending>) {
        let key = pending.record.key.take();
        let value = pending.record.value.take();
        let topic = std::mem::take(&mut pending.record.topic);
        let headers = pending.record.owned_headers();
        let partition = pending.record.partition;
        let timestamp = pending.record.timestamp_ms;
        let mut record = BaseRecord::with_opaque_to(&topic, pending);
        if let Some(key) = &key {
            record = record.key(key.as_slice());
        }
        if let Some(value) = &value {
            record = record.payload(value.as_slice());
        }
        if let Some(partition) = partition {
            record = record.partition(partition);
        }
        if let Some(timestamp) = timestamp {
            record = record.timestamp(timestamp);
        }
        if let Some(headers) = headers {
            record = record.headers(headers);
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((err, back)) => {
                    let mut pending = back.delivery_opaque;
                    pending.record.key = key;
                    pending.record.value = value;
                    pending.record.topic = topic;
                    let error = KafkaIoError::from_rdkafka("produce", err, Duration::ZERO, None);
                    self.fail_batch(vec![*pending], error);
                    return;
                }
            }
        }
    }
}
