//! [`AsyncProducer`]: a background batching producer with a bounded queue and backpressure,
//! modelled on ruby-kafka's `AsyncProducer`, delivering through librdkafka.
//!
//! Threads and locks:
//! - Callers (`produce`, `produce_many`, `deliver_messages`, `flush`, `shutdown`) only touch the
//!   shared [`State`] under its mutex; they never wait on the network while holding it.
//! - One delivery worker thread moves buffered records to librdkafka when the delivery policy
//!   (threshold, interval, explicit request, shutdown) or a due retry says so. A `produce_many`
//!   caller that makes a delivery due moves it itself ([`AsyncProducer::hand_off_due`], without
//!   the GIL), unless the worker is at it or older records wait to be sent again; it never waits
//!   for room in librdkafka's queue: what librdkafka refuses goes back in front for the worker. The `handoff` lock, held from taking
//!   a chunk until it is sent, keeps chunks in buffer order.
//! - librdkafka's polling thread (owned by `ThreadedProducer`) runs [`DeliveryTracker::delivery`],
//!   which settles in-flight counts, schedules retries and pushes [`ProducerEvent`]s into a channel
//!   (batch reports' acknowledgements gather in a list the bindings take in bulk). No Python ever
//!   runs on these threads: the bindings drain the channel on a Python thread.
//!
//! What travels: a chunk of one topic's records without headers or timestamps goes to librdkafka
//! in one `rd_kafka_produce_batch` call (keyless ones one partition per chunk, in turn); others
//! one by one. librdkafka copies each record and the engine drops its own at once: the delivery
//! opaque is an `InFlight` word, from which and librdkafka's copy a record is rebuilt when it
//! must be sent again or handed back.
//!
//! Invariants: every record accepted by `produce` ends in exactly one of: delivered, handed back
//! in a `Failed` event (retries exhausted or a permanent error), handed back in a `Dropped` event
//! (`drop_oldest`), or returned by `shutdown` as undelivered. Nothing is lost silently.
//!
//! Under faults:
//! - Shutdown: when its grace period ends the worker stops handing records over (even while
//!   librdkafka's queue is full), librdkafka's queues are purged, and the engine waits for every
//!   purged record's report before it returns what it still holds; so when `finish_shutdown`
//!   returns, every record is delivered, in a `Failed` event, or in the returned list.
//! - Transactions: each delivery round is one transaction. Its records count as delivered only
//!   once the transaction committed. Errors follow librdkafka's transactional model: a retriable
//!   one calls the same operation again (a commit that timed out is resumed, never abandoned);
//!   an abortable one aborts, and the round is sent again, in order, in a new transaction (each
//!   abort counts as a failure of its records towards `max_retries`); a fatal one (or one with
//!   none of the three flags) ends the librdkafka instance. A new instance with the same
//!   `transactional.id` then takes over and sends the round again (its init_transactions aborts
//!   what the old one left open), unless the id is no longer ours: not authorized, or fenced
//!   while the transaction was younger than `transaction.timeout.ms` (another producer took
//!   over; an older one was aborted by the coordinator, which librdkafka reports as the same
//!   fencing). Then everything is handed back and the error is raised by every later call.
//! - Idempotence: librdkafka retries without reordering until `message.timeout.ms`; a record that
//!   still fails is handed back, never re-sent behind newer records of its partition.

// A record is boxed once when accepted and then moves as a pointer through the buffer, the
// worker and librdkafka (the box is its delivery opaque): `Vec<Box<Pending>>` is deliberate.
#![allow(clippy::vec_box)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrokafka_core::PartitionKeyHashing;
use ferrokafka_core::batch::{
    BatchBuffer, BufferLimits, DeliveryPolicy, Overflow, OverflowPolicy, PushOutcome,
};
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext, PurgeConfig, ThreadedProducer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::util::IntoOpaque;

use crate::batch_produce::{TopicHandles, message};
use crate::config::{ClientRole, ClientSettings};
use crate::connection_failure::{ConnectionWatch, init_transactions};
use crate::error::{KafkaIoError, KafkaResult};
use crate::in_flight::InFlight;
use crate::locks::lock;
use crate::oauth::{self, TokenRefresh, answer_token_refresh};
use crate::partitioner::{METADATA_TIMEOUT, PartitionCounts};
pub use crate::pending::{POSITION_ONLY, Pending, Ticket};
use crate::record::ReceivedRecord;

/// Where a batch report's record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acknowledgement {
    /// The record's ticket.
    pub ticket: Ticket,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
}

/// How long the worker sleeps at most between checks of the interval trigger and retries.
const WORKER_TICK: Duration = Duration::from_millis(50);
/// Records handed to librdkafka per lock acquisition, so producers are not held off for long.
/// With transactions, also the records of one transaction.
const HANDOFF_CHUNK: usize = 1000;
/// Deadline of one attempt at a transaction call; retriable timeouts are retried, so this only
/// bounds how late the worker notices a shutdown.
const TRANSACTION_STEP: Duration = Duration::from_secs(2);
/// Longest a new transactional producer waits for its `init_transactions` (a refused connection
/// ends the wait at once).
const INIT_TRANSACTIONS_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between attempts of a transaction call that failed retriably.
const TRANSACTION_BACKOFF: Duration = Duration::from_millis(200);
/// librdkafka's default `transaction.timeout.ms`.
const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 60_000;
/// How long the end of a shutdown waits for librdkafka to report the records it purged.
const PURGE_WAIT: Duration = Duration::from_secs(5);

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
    /// How a record's `partition_key` is hashed into its partition [as WaterDrop].
    pub partition_key_hashing: PartitionKeyHashing,
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
            partition_key_hashing: PartitionKeyHashing::default(),
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
    /// Records of batch reports ([`POSITION_ONLY`] tickets) were written: take where with
    /// [`AsyncProducer::take_acknowledged`]. Sent when the first of them arrives after a take,
    /// so a million acknowledgements cost a handful of events.
    Acknowledged,
    /// A record finally failed; it is handed back with the error.
    Failed {
        /// The record.
        pending: Box<Pending>,
        /// Why it failed.
        error: KafkaIoError,
    },
    /// Records dropped by the `drop_oldest` policy, handed back.
    Dropped {
        /// The dropped records, oldest first.
        pending: Vec<Box<Pending>>,
    },
    /// A delivery round handed records to librdkafka (`deliver_messages`).
    DeliverMessages {
        /// Records handed over in the round.
        message_count: usize,
        /// Records still buffered after it.
        queue_size: usize,
    },
    /// The last event: the producer shut down (lets a listener stop waiting at once).
    ShutDown,
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
    /// Records waiting to be handed to librdkafka again: after a failed send, or given back by
    /// its full queue. Every accepted record is delivered, failed, dropped, or in
    /// `queue_size + retry_queue_size + in_flight`.
    pub retry_queue_size: u64,
}

/// Why a record was not accepted.
#[derive(Debug)]
pub enum Refusal {
    /// The queue is full; the policy refused the record (given back).
    Overflow(Box<Overflow<Box<Pending>>>),
    /// The producer is shutting down or shut down.
    Closed(Box<Pending>),
    /// The producer hit a fatal error and cannot send any more (the record is given back).
    Fatal(Box<Pending>, KafkaIoError),
}

struct State {
    buffer: BatchBuffer<Box<Pending>>,
    /// Records waiting to be sent again, oldest first; at shutdown also the records the worker
    /// took but could not hand over.
    retries: VecDeque<(Instant, Box<Pending>)>,
    deliver_requested: bool,
    closing: bool,
    /// The worker is waiting on `work`; producers only notify then, which keeps a futex wake
    /// off the path of every record while the worker is busy.
    worker_idle: bool,
    /// A fatal error of the librdkafka producer: nothing more can be sent.
    fatal: Option<KafkaIoError>,
    stats: ProducerStats,
}

/// How the delivery reports of records are settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DeliveryMode {
    /// Each report settles its record; transient failures are sent again by the worker.
    Plain,
    /// `enable.idempotence`: librdkafka already retried without reordering, so a failure is final.
    Idempotent,
    /// Reports are collected for the open transaction and settled by its commit or abort.
    Transactional,
}

/// The open transaction: its records' reports as librdkafka gives them, and the failed sends
/// of its records by position (their in-flight words carry the position instead).
#[derive(Default)]
struct OpenRound {
    reports: Vec<RoundReport>,
    failures: Vec<u32>,
}

/// A record's report within the open transaction.
struct RoundReport {
    pending: Box<Pending>,
    /// Where it was written (copied only for a record whose result the caller wants), or why
    /// it failed and whether sending it again may succeed.
    outcome: Result<Option<Written>, (KafkaIoError, bool)>,
}

struct Shared {
    state: Mutex<State>,
    /// The worker waits here for work; producers and delivery reports notify it.
    work: Condvar,
    /// Blocked producers and flushers wait here for room or for settling.
    progress: Condvar,
    events: Sender<ProducerEvent>,
    options: AsyncProducerOptions,
    mode: DeliveryMode,
    /// Set when the shutdown's grace period is over: the worker hands nothing more over.
    stopping: AtomicBool,
    /// Held by whoever moves buffered records to librdkafka (the worker, or a caller of
    /// [`AsyncProducer::hand_off_due`]) from taking a chunk until it is sent, so chunks reach
    /// librdkafka in buffer order. Only ever taken with `try_lock`: no thread waits for it.
    handoff: Mutex<()>,
    /// The open transaction's reports (transactional mode only).
    round: Mutex<OpenRound>,
    /// The worker waits here for the open transaction's reports.
    round_reported: Condvar,
    /// Records handed to librdkafka and not settled. Atomic so that the delivery callback of a
    /// successful record never takes the state lock; it is only incremented under that lock,
    /// so "buffer empty and nothing in flight" is never seen in between.
    in_flight: AtomicUsize,
    /// Records confirmed written, counted without the lock for the same reason.
    delivered: AtomicU64,
    /// Batch reports' records written since the bindings last took them.
    acknowledged: Mutex<Vec<Acknowledgement>>,
    epoch: Instant,
    next_ticket: AtomicU64,
    /// Why librdkafka cannot connect (refused TLS or SASL), given to records that then fail.
    watch: ConnectionWatch,
    tokens: TokenRefresh,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock would be a bug in this file; keep serving regardless.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock_round(&self) -> MutexGuard<'_, OpenRound> {
        self.round.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes up to `max` buffered records when a delivery is due; as ruby-kafka, a trigger
    /// delivers everything buffered (in hand-off chunks), so it stays requested until the
    /// buffer is empty.
    fn take_due(&self, state: &mut State, max: usize) -> Vec<Box<Pending>> {
        let now_ms = self.now_ms();
        if state.buffer.should_deliver(now_ms) {
            state.deliver_requested = true;
        }
        if !state.deliver_requested {
            return Vec::new();
        }
        let batch = state.buffer.drain_chunk(max);
        if state.buffer.is_empty() {
            state.deliver_requested = false;
            state.buffer.mark_delivered(now_ms);
            state.stats.deliveries += u64::from(!batch.is_empty());
        }
        batch
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

    /// Tells a tracked record's waiter it was written: a `Delivered` event, or an entry in the
    /// acknowledgements (and an `Acknowledged` event if they were empty).
    fn report_written(&self, written: Written) {
        match written {
            Written::Record(ticket, record) => {
                self.emit(ProducerEvent::Delivered { ticket, record });
            }
            Written::Position(acknowledgement) => {
                let mut acknowledged = lock(&self.acknowledged);
                acknowledged.push(acknowledgement);
                if acknowledged.len() == 1 {
                    self.emit(ProducerEvent::Acknowledged);
                }
            }
        }
    }

    fn emit(&self, event: ProducerEvent) {
        // The receiver lives as long as the producer; after shutdown nobody listens any more.
        let _ = self.events.send(event);
    }

    /// Settles `count` records that left the worker's care: wakes flushers once all settled.
    fn settle(&self, count: usize) {
        if count > 0 && self.in_flight.fetch_sub(count, Ordering::AcqRel) == count {
            // Notify under the lock: a flusher checks and waits under it, so it cannot miss
            // this wake-up.
            let _state = self.lock();
            self.progress.notify_all();
        }
    }

    /// Hands records back after their final failure.
    fn fail(&self, records: impl IntoIterator<Item = (Box<Pending>, KafkaIoError)>) {
        let mut count = 0;
        for (pending, error) in records {
            count += 1;
            self.emit(ProducerEvent::Failed { pending, error });
        }
        self.lock().stats.failed += count as u64;
        self.settle(count);
    }

    /// Whether a record that failed `failures` times with a transient error gets another send.
    fn may_retry(&self, failures: u32) -> bool {
        let max = self.options.max_retries;
        !self.stopping.load(Ordering::Acquire) && (max < 0 || i64::from(failures) <= max)
    }

    /// Queues a failed record to be sent again after the backoff; `Failed` later if it never is.
    fn schedule_retry(&self, pending: Box<Pending>, error: KafkaIoError) {
        let topic = pending.record.topic.clone();
        let attempt = pending.failures;
        let mut state = self.lock();
        state.stats.retried += 1;
        state
            .retries
            .push_back((Instant::now() + self.options.retry_backoff, pending));
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        drop(state);
        self.work.notify_one();
        self.emit(ProducerEvent::DeliveryError {
            topic,
            error,
            attempt,
        });
    }
}

/// librdkafka's delivery callback context: settles records and schedules retries.
struct DeliveryTracker {
    shared: Arc<Shared>,
}

impl ClientContext for DeliveryTracker {
    answer_token_refresh!(shared.tokens);

    fn error(&self, error: KafkaError, reason: &str) {
        self.shared.watch.observe(&error, reason);
        crate::client::log_unless_end(error, &self.shared.watch.redact(reason));
    }
}

impl DeliveryTracker {
    /// The error a failed record is handed back with: a record that timed out or was purged
    /// while librdkafka could not connect failed because of that.
    fn failure(&self, err: &KafkaError) -> KafkaIoError {
        use RDKafkaErrorCode as C;
        let unsent = matches!(
            err.rdkafka_error_code(),
            Some(C::MessageTimedOut | C::PurgeQueue | C::PurgeInflight)
        );
        match self.shared.watch.failure() {
            Some(failure) if unsent => failure.error("produce"),
            _ => KafkaIoError::from_rdkafka("produce", err.clone(), Duration::ZERO, None),
        }
    }
}

impl ProducerContext for DeliveryTracker {
    type DeliveryOpaque = InFlight;

    fn delivery(&self, result: &DeliveryResult<'_>, in_flight: Self::DeliveryOpaque) {
        let shared = &self.shared;
        if result.is_ok() {
            shared.watch.clear();
        }
        if shared.mode == DeliveryMode::Transactional {
            // The transaction decides: keep the record whole, in case it must be sent again.
            let message = match result {
                Ok(message) => message,
                Err((_, message)) => message,
            };
            let pending = in_flight.into_pending(message);
            let outcome = match result {
                Ok(message) => Ok(Written::of(pending.ticket, message)),
                // Purged by the worker's own abort (or a failed instance's purge): the record
                // did nothing wrong and goes again with the round, unless the producer stops.
                Err((err, _)) => Err((self.failure(err), is_transient(err) || is_purged(err))),
            };
            shared
                .lock_round()
                .reports
                .push(RoundReport { pending, outcome });
            shared.round_reported.notify_all();
            return;
        }
        match result {
            Ok(message) => {
                shared.delivered.fetch_add(1, Ordering::Relaxed);
                if let Some(written) = Written::of(in_flight.settle(), message) {
                    shared.report_written(written);
                }
                shared.settle(1);
            }
            Err((err, message)) => {
                let mut pending = in_flight.into_pending(message);
                pending.failures += 1;
                let error = self.failure(err);
                if shared.mode == DeliveryMode::Plain
                    && is_transient(err)
                    && shared.may_retry(pending.failures)
                {
                    shared.schedule_retry(pending, error);
                } else {
                    shared.fail([(pending, error)]);
                }
            }
        }
    }
}

/// What the waiter of a tracked record learns when it was written.
#[derive(Debug)]
enum Written {
    /// A batch report's record: where it landed.
    Position(Acknowledgement),
    /// Any other tracked record: a copy of it as written.
    Record(Ticket, ReceivedRecord),
}

impl Written {
    /// For the record with `ticket`, written as `message`; None if untracked.
    fn of<M: Message>(ticket: Ticket, message: &M) -> Option<Self> {
        if ticket == 0 {
            None
        } else if ticket & POSITION_ONLY != 0 {
            Some(Written::Position(Acknowledgement {
                ticket,
                partition: message.partition(),
                offset: message.offset(),
            }))
        } else {
            Some(Written::Record(
                ticket,
                ReceivedRecord::from_message(message),
            ))
        }
    }
}

/// Whether librdkafka's partitioner would choose a record's partition without a key to hash.
fn keyless(pending: &Pending) -> bool {
    pending.record.partition.is_none() && pending.record.key.is_none()
}

/// Whether a record can go in a batch call: librdkafka's batch carries no headers or timestamps.
fn batchable(pending: &Pending) -> bool {
    pending.record.headers.is_empty() && pending.record.timestamp_ms.is_none()
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

/// Whether librdkafka took the record back itself (a purge), rather than the broker refusing it.
fn is_purged(err: &KafkaError) -> bool {
    matches!(
        err.rdkafka_error_code(),
        Some(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight)
    )
}

/// What librdkafka's transactional error model asks of the caller after a transactional call
/// failed (rd_kafka_error_is_retriable / txn_requires_abort / is_fatal).
enum TransactionStep {
    /// Call the same operation again (e.g. commit after a commit that timed out).
    Retry,
    /// Abort the transaction, then send its records again in a new one.
    Abort,
    /// The librdkafka instance is unusable.
    Fatal,
}

fn transaction_step(err: &KafkaError) -> TransactionStep {
    match err {
        KafkaError::Transaction(rd) if rd.is_fatal() => TransactionStep::Fatal,
        KafkaError::Transaction(rd) if rd.txn_requires_abort() => TransactionStep::Abort,
        KafkaError::Transaction(rd) if rd.is_retriable() => TransactionStep::Retry,
        // rust-rdkafka flushes before calling librdkafka's commit, whose own flush would return
        // this timeout as a retriable error of the commit.
        KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut) => TransactionStep::Retry,
        // librdkafka: treat an error that is neither retriable, abortable nor fatal as fatal.
        _ => TransactionStep::Fatal,
    }
}

/// Whether a new instance may take over after a fatal error of a transaction open for `age`.
/// Not when the producer may not use its `transactional.id`, nor when another instance fenced
/// it (a new one would fence the rightful owner in turn); but a coordinator also bumps the
/// epoch when it aborts a transaction older than `transaction.timeout.ms` (an outage), which
/// librdkafka reports as the same fencing: a transaction at least that old explains it.
fn may_renew(err: &KafkaError, age: Duration, transaction_timeout: Duration) -> bool {
    use RDKafkaErrorCode as C;
    match err.rdkafka_error_code() {
        Some(C::TransactionalIdAuthorizationFailed | C::ClusterAuthorizationFailed) => false,
        Some(C::Fenced | C::ProducerFenced | C::InvalidProducerEpoch) => age >= transaction_timeout,
        _ => true,
    }
}

/// The error a fatal transactional failure is handed back and raised with: fatal, also when
/// librdkafka set none of its flags.
fn fatal_error(operation: &str, err: KafkaError) -> KafkaIoError {
    match KafkaIoError::from_rdkafka(operation, err, TRANSACTION_STEP, None) {
        KafkaIoError::Broker {
            operation,
            code,
            name,
            message,
            ..
        } => KafkaIoError::Broker {
            operation,
            code,
            name,
            message,
            retriable: false,
            fatal: true,
        },
        other => other,
    }
}

/// What became of one record the worker offered to librdkafka.
enum Handoff {
    /// librdkafka took it; its delivery report settles it.
    Sent,
    /// librdkafka refused it for good; it was handed back with the error.
    Refused,
    /// A shutdown ended the wait for room in librdkafka's queue; the record is given back.
    Unsent(Box<Pending>),
}

impl RoundReport {
    /// A record of a failed round that never reached librdkafka: it fails with the round.
    fn not_sent(pending: Box<Pending>) -> Self {
        RoundReport {
            pending,
            outcome: Ok(None),
        }
    }
}

/// The records of an ended transaction, then those never handed over, to hand back in order.
fn round_records(reports: Vec<RoundReport>, unsent: Vec<Box<Pending>>) -> Vec<Box<Pending>> {
    reports
        .into_iter()
        .map(|r| r.pending)
        .chain(unsent)
        .collect()
}

/// How a transaction of the worker ended.
enum RoundEnd {
    /// Committed: its records are delivered.
    Committed(Vec<RoundReport>),
    /// Aborted: its records are to be sent again (or handed back).
    Aborted(Vec<RoundReport>, KafkaIoError),
    /// The librdkafka instance failed fatally (its open transaction is lost, so never
    /// committed). When the `transactional.id` is still ours (`renewable`), a new instance
    /// sends the records again; otherwise they are handed back.
    Fatal {
        reports: Vec<RoundReport>,
        error: KafkaIoError,
        renewable: bool,
    },
    /// Shutdown's grace period ended first: its records are handed back.
    Stopped(Vec<Box<Pending>>),
}

/// The background batching producer; see the module docs.
pub struct AsyncProducer {
    shared: Arc<Shared>,
    /// Declared before `producer`, so released before it.
    topics: TopicHandles,
    /// Whether keyless records may go one partition per run (librdkafka's sticky partitioning
    /// for them is in effect; see [`sticky_keyless`]).
    keyless_runs: bool,
    /// The librdkafka instance. Replaced only in transactional mode, after a fatal error that
    /// leaves the `transactional.id` ours ([`AsyncProducer::renew_producer`]); records go one
    /// by one there, so `topics` never holds a handle of a replaced instance.
    producer: RwLock<Arc<ThreadedProducer<DeliveryTracker>>>,
    /// What a replacing instance is created from.
    client_config: ClientConfig,
    /// librdkafka's `transaction.timeout.ms`: the coordinator aborts a transaction open longer.
    transaction_timeout: Duration,
    events: Mutex<Option<Receiver<ProducerEvent>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
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

/// Whether librdkafka's boolean setting `key` is on.
fn setting_on(settings: &ClientSettings, key: &str) -> bool {
    settings
        .get(key)
        .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1"))
}

/// Whether librdkafka would place keyless records stickily (one random partition for a while):
/// its `*random` partitioners do unless `sticky.partitioning.linger.ms` is 0; the others hash
/// the missing key to one fixed partition.
fn sticky_keyless(settings: &ClientSettings) -> bool {
    let partitioner = settings.get("partitioner").map(str::trim);
    let random = partitioner.is_none_or(|p| p.ends_with("random"));
    let linger = settings
        .get("sticky.partitioning.linger.ms")
        .map(|v| v.trim().parse::<u64>().unwrap_or(1));
    random && linger != Some(0)
}

/// A librdkafka producer reporting to `shared`'s delivery tracker.
fn create_producer(
    config: &ClientConfig,
    shared: &Arc<Shared>,
) -> KafkaResult<ThreadedProducer<DeliveryTracker>> {
    oauth::create(
        config,
        DeliveryTracker {
            shared: Arc::clone(shared),
        },
    )
    .map_err(|e| KafkaIoError::from_rdkafka("create producer", e, Duration::ZERO, None))
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
        let transactional = settings.get("transactional.id").is_some();
        let mode = if transactional {
            DeliveryMode::Transactional
        } else if setting_on(&settings, "enable.idempotence") {
            DeliveryMode::Idempotent
        } else {
            DeliveryMode::Plain
        };
        let (events, receiver) = channel();
        let partitions = PartitionCounts::new(options.partition_key_hashing);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                buffer,
                retries: VecDeque::new(),
                deliver_requested: false,
                closing: false,
                worker_idle: false,
                fatal: None,
                stats: ProducerStats::default(),
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
            events,
            options,
            mode,
            stopping: AtomicBool::new(false),
            handoff: Mutex::new(()),
            round: Mutex::new(OpenRound::default()),
            round_reported: Condvar::new(),
            epoch: Instant::now(),
            next_ticket: AtomicU64::new(1),
            in_flight: AtomicUsize::new(0),
            delivered: AtomicU64::new(0),
            acknowledged: Mutex::new(Vec::new()),
            watch: ConnectionWatch::new(&settings),
            tokens: settings.token_refresh(),
        });
        let client_config = settings.for_role(ClientRole::Producer).to_client_config();
        let producer = create_producer(&client_config, &shared)?;
        if transactional {
            init_transactions(
                &producer,
                &shared.watch,
                INIT_TRANSACTIONS_TIMEOUT,
                settings.bootstrap().ok(),
            )?;
        }
        let engine = Arc::new(AsyncProducer {
            shared,
            topics: TopicHandles::default(),
            keyless_runs: sticky_keyless(&settings),
            producer: RwLock::new(Arc::new(producer)),
            transaction_timeout: Duration::from_millis(
                client_config
                    .get("transaction.timeout.ms")
                    .and_then(|ms| ms.trim().parse().ok())
                    .unwrap_or(DEFAULT_TRANSACTION_TIMEOUT_MS),
            ),
            client_config,
            events: Mutex::new(Some(receiver)),
            worker: Mutex::new(None),
            partitions,
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
        self.tickets(1)
    }

    /// The first of `count` consecutive tickets for the records of one batch report, each with
    /// [`POSITION_ONLY`] set.
    pub fn batch_tickets(&self, count: usize) -> Ticket {
        self.tickets(count) | POSITION_ONLY
    }

    /// Takes the batch reports' records written since the last take, in the order they were
    /// written.
    pub fn take_acknowledged(&self) -> Vec<Acknowledgement> {
        std::mem::take(&mut *lock(&self.shared.acknowledged))
    }

    /// The first of `count` consecutive ticket numbers, all below [`POSITION_ONLY`].
    fn tickets(&self, count: usize) -> Ticket {
        let count = count.max(1) as Ticket;
        let first = self.shared.next_ticket.fetch_add(count, Ordering::Relaxed);
        // Folded into the numbers below POSITION_ONLY, never 0, never running past it.
        (first - 1) % (POSITION_ONLY - count) + 1
    }

    /// Takes the event receiver; the bindings drain it on a Python thread. Only the first call
    /// gets it.
    pub fn take_events(&self) -> Option<Receiver<ProducerEvent>> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Queues records from the front of `items` under one lock, without waiting, until all
    /// are queued or one is refused. Returns how many were queued, the queue size right after
    /// (for the `enqueue_message` event: the worker may deliver at once), and the refusal, whose
    /// record is handed back (a `block` caller puts it back in front and waits for room; a
    /// caller that gives up reports it with [`AsyncProducer::count_overflow`]).
    /// `drop_oldest` reports what it dropped in a `Dropped` event. With `hand_off_here` the
    /// caller calls [`AsyncProducer::hand_off_due`] next, so a due delivery does not wake the
    /// worker.
    pub fn try_produce(
        &self,
        items: &mut VecDeque<Box<Pending>>,
        hand_off_here: bool,
    ) -> (usize, usize, Option<Refusal>) {
        let shared = &self.shared;
        let mut state = shared.lock();
        if let Some(error) = &state.fatal {
            let error = error.clone();
            let refusal = items.pop_front().map(|p| Refusal::Fatal(p, error));
            return (0, state.buffer.len(), refusal);
        }
        if state.closing {
            let refusal = items.pop_front().map(Refusal::Closed);
            return (0, state.buffer.len(), refusal);
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
                    refusal = Some(Refusal::Overflow(Box::new(overflow)));
                    break;
                }
            }
        }
        state.stats.enqueued += accepted as u64;
        state.stats.dropped += dropped.len() as u64;
        // A caller that will call `hand_off_due` itself does not wake the worker for it.
        let wake = state.worker_idle
            && !(hand_off_here && shared.mode != DeliveryMode::Transactional)
            && state.buffer.should_deliver(shared.now_ms());
        let queue_size = state.buffer.len();
        drop(state);
        if !dropped.is_empty() {
            shared.emit(ProducerEvent::Dropped { pending: dropped });
        }
        if wake {
            shared.work.notify_one();
        }
        (accepted, queue_size, refusal)
    }

    /// Counts a record finally refused for lack of room (the `overflowed` statistic).
    pub fn count_overflow(&self) {
        self.shared.lock().stats.overflowed += 1;
    }

    /// Waits up to `wait` for the queue to have room (or to change); used by the `block` policy
    /// between attempts. A full queue is delivered at once: otherwise a producer without a
    /// delivery trigger would wait for room that nothing frees.
    pub fn wait_for_room(&self, wait: Duration) {
        let mut state = self.shared.lock();
        if state.buffer.len() >= state.buffer.limits().max_count || state.closing {
            if !state.closing && !state.deliver_requested {
                state.deliver_requested = true;
                self.shared.work.notify_one();
            }
            let _ = self.shared.progress.wait_timeout(state, wait);
        }
    }

    /// Asks the worker to deliver everything buffered now; returns at once.
    pub fn deliver_messages(&self) {
        self.shared.lock().deliver_requested = true;
        self.shared.work.notify_one();
    }

    /// The fatal error that stopped the producer, if one did.
    pub fn fatal_error(&self) -> Option<KafkaIoError> {
        self.shared.lock().fatal.clone()
    }

    /// Why librdkafka cannot connect (a refused TLS handshake or SASL authentication), as the
    /// error of `operation`, while that lasts: waiting for delivery will not help.
    pub fn connection_failure(&self, operation: &str) -> Option<KafkaIoError> {
        self.shared
            .watch
            .failure()
            .map(|failure| failure.error(operation))
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

    /// Ends a shutdown: stops the worker (which hands nothing more to librdkafka), purges what
    /// librdkafka still holds and waits for those records' reports (they arrive as `Failed`
    /// events), then returns the records that were never handed to librdkafka. When it returns
    /// every accepted record is delivered, failed, dropped or in the returned list.
    pub fn finish_shutdown(&self) -> Vec<Box<Pending>> {
        self.begin_shutdown();
        self.shared.stopping.store(true, Ordering::Release);
        let handle = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = handle {
            self.shared.work.notify_all();
            let _ = handle.join();
        }
        if self.shared.in_flight.load(Ordering::Acquire) > 0 {
            self.producer()
                .purge(PurgeConfig::default().queue().inflight());
            // Purged records come back through the delivery callback on librdkafka's polling
            // thread; wait until each one was reported.
            let deadline = Instant::now() + PURGE_WAIT;
            let mut state = self.shared.lock();
            while self.shared.in_flight.load(Ordering::Acquire) > 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    log::error!(
                        "shutdown: librdkafka did not report {} purged record(s) within {:?}",
                        self.shared.in_flight.load(Ordering::Acquire),
                        PURGE_WAIT
                    );
                    break;
                }
                state = self
                    .shared
                    .progress
                    .wait_timeout(state, left.min(WORKER_TICK))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        let mut state = self.shared.lock();
        let mut undelivered: Vec<Box<Pending>> = state.retries.drain(..).map(|(_, p)| p).collect();
        undelivered.extend(state.buffer.drain_chunk(usize::MAX));
        state.stats.failed += undelivered.len() as u64;
        state.stats.queue_size = 0;
        drop(state);
        self.shared.emit(ProducerEvent::ShutDown);
        undelivered
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ProducerStats {
        let state = self.shared.lock();
        ProducerStats {
            queue_size: state.buffer.len() as u64,
            queue_bytes: state.buffer.bytes() as u64,
            in_flight: self.shared.in_flight.load(Ordering::Acquire) as u64,
            retry_queue_size: state.retries.len() as u64,
            delivered: self.shared.delivered.load(Ordering::Relaxed),
            ..state.stats
        }
    }

    /// The producer's options.
    pub fn options(&self) -> &AsyncProducerOptions {
        &self.shared.options
    }

    fn stopping(&self) -> bool {
        self.shared.stopping.load(Ordering::Acquire)
    }

    /// The current librdkafka instance.
    fn producer(&self) -> Arc<ThreadedProducer<DeliveryTracker>> {
        Arc::clone(&self.producer.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn run_worker(&self) {
        loop {
            let Some((handoff, batch)) = self.next_batch() else {
                return;
            };
            let count = batch.len();
            if self.shared.mode == DeliveryMode::Transactional {
                self.hand_off_transactions(batch);
            } else {
                self.hand_off(batch, true);
            }
            drop(handoff);
            self.delivered_chunk(count);
        }
    }

    /// Reports one chunk handed to librdkafka (ruby-kafka's `deliver_messages` notification).
    fn delivered_chunk(&self, count: usize) {
        let queue_size = self.shared.lock().buffer.len();
        self.shared.emit(ProducerEvent::DeliverMessages {
            message_count: count,
            queue_size,
        });
    }

    /// Hands what is due to librdkafka from the calling thread, instead of waking the worker
    /// for it: after `produce_many` made a delivery due, the records go on while they are still
    /// in this core's cache, and the buffer does not grow while the worker is scheduled. Leaves
    /// the work to the worker when it is handing off itself, in transactional mode (the worker
    /// owns the transactions), while records wait to be sent again (they go first), and when
    /// librdkafka's queue is full (what librdkafka could not take goes back before everything
    /// else and the worker waits for room; a caller never blocks here). Call it without the
    /// GIL: a due buffer may hold many chunks.
    pub fn hand_off_due(&self) {
        let shared = &self.shared;
        if shared.mode == DeliveryMode::Transactional {
            return;
        }
        let Ok(handoff) = shared.handoff.try_lock() else {
            return;
        };
        loop {
            let mut state = shared.lock();
            // Records waiting to be sent again are older than the buffer's and go first, which
            // only the worker does (it takes them before the buffer).
            if self.stopping() || state.fatal.is_some() || !state.retries.is_empty() {
                break;
            }
            let batch = shared.take_due(&mut state, HANDOFF_CHUNK);
            if batch.is_empty() {
                break;
            }
            shared.in_flight.fetch_add(batch.len(), Ordering::AcqRel);
            drop(state);
            shared.progress.notify_all();
            let count = batch.len();
            let all_sent = self.hand_off(batch, false);
            self.delivered_chunk(count);
            if !all_sent {
                break;
            }
        }
        drop(handoff);
        // Whatever became due meanwhile (or was put back) is the worker's.
        let state = shared.lock();
        let due = state.deliver_requested
            || !state.retries.is_empty()
            || state.buffer.should_deliver(shared.now_ms());
        drop(state);
        if due {
            shared.work.notify_one();
        }
    }

    /// Waits for a reason to deliver and takes the next chunk, with the hand-off lock that is
    /// held until the chunk is sent; `None` when the worker should stop.
    fn next_batch(&self) -> Option<(MutexGuard<'_, ()>, Vec<Box<Pending>>)> {
        let shared = &self.shared;
        let mut state = shared.lock();
        loop {
            if self.stopping() || state.fatal.is_some() {
                return None;
            }
            let now = Instant::now();
            // A caller handing a due chunk over itself holds the lock: wait for it to finish.
            if let Ok(handoff) = shared.handoff.try_lock() {
                let mut batch: Vec<Box<Pending>> = Vec::new();
                while state.retries.front().is_some_and(|(due, _)| *due <= now) {
                    if let Some((_, pending)) = state.retries.pop_front() {
                        batch.push(pending);
                    }
                }
                let room = HANDOFF_CHUNK - batch.len().min(HANDOFF_CHUNK);
                batch.extend(shared.take_due(&mut state, room));
                if !batch.is_empty() {
                    shared.in_flight.fetch_add(batch.len(), Ordering::AcqRel);
                    drop(state);
                    shared.progress.notify_all();
                    return Some((handoff, batch));
                }
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

    /// Sends a batch to librdkafka, waiting for room in its queue when `wait_for_room`; records
    /// it could not hand over (full queue without waiting, or a shutdown) are put back in front
    /// of the retries, in order, for the worker or `finish_shutdown`. False when some were.
    /// Consecutive records of one topic without headers or timestamps go in one call.
    fn hand_off(&self, batch: Vec<Box<Pending>>, wait_for_room: bool) -> bool {
        let producer = self.producer();
        let mut records = batch
            .into_iter()
            .map(|p| self.with_partition(&producer, p))
            .peekable();
        while let Some(pending) = records.next() {
            let unsent = if batchable(&pending) {
                let mut run = vec![pending];
                while let Some(next) = records
                    .next_if(|next| batchable(next) && next.record.topic == run[0].record.topic)
                {
                    run.push(next);
                }
                self.send_run(&producer, run, wait_for_room)
            } else {
                let in_flight = InFlight::of(&pending);
                match self.send(&producer, pending, in_flight, wait_for_room) {
                    Handoff::Unsent(unsent) => vec![unsent],
                    Handoff::Sent | Handoff::Refused => Vec::new(),
                }
            };
            if !unsent.is_empty() {
                self.put_back(unsent.into_iter().chain(records).collect());
                return false;
            }
        }
        true
    }

    /// Hands a run of one topic's records to librdkafka in one call (again after 1 ms for what
    /// a full queue refused, while `wait_for_room` and no shutdown); records refused for another
    /// reason are handed back with the error. Returns, in order, those a full queue kept out.
    fn send_run(
        &self,
        producer: &ThreadedProducer<DeliveryTracker>,
        mut run: Vec<Box<Pending>>,
        wait_for_room: bool,
    ) -> Vec<Box<Pending>> {
        let topic = match self.topics.get(producer, &run[0].record.topic) {
            Ok(topic) => topic,
            Err(err) => {
                let error = KafkaIoError::from_rdkafka("produce", err, Duration::ZERO, None);
                self.shared
                    .fail(run.into_iter().map(|p| (p, error.clone())));
                return Vec::new();
            }
        };
        // Keyless records without a partition go to one partition per run, as librdkafka's
        // sticky partitioner sends them, without its lookup and lock for every record; chosen
        // once, so what a full queue refused goes on to the same partition.
        let run_partition = if self.keyless_runs && run.iter().any(|p| keyless(p)) {
            self.partitions
                .partition_for_run(producer.client(), &run[0].record.topic)
        } else {
            None
        };
        loop {
            let mut messages: Vec<_> = run
                .iter()
                .map(|pending| {
                    let partition = if keyless(pending) {
                        run_partition
                    } else {
                        pending.record.partition
                    };
                    let record = &pending.record;
                    let (key, value) = (record.key.as_deref(), record.value.as_deref());
                    message(partition, key, value, InFlight::of(pending).into_ptr())
                })
                .collect();
            // SAFETY: the keys and values live in `run` through the call; the opaques are the
            // delivery tracker's `InFlight` words.
            unsafe { topic.offer(&mut messages) };
            // What librdkafka took is in its copy now (and rebuilt from it if it must be sent
            // again): those records are dropped here.
            let mut full = Vec::new();
            let mut refused = Vec::new();
            for (message, pending) in messages.iter().zip(run) {
                if message.err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
                    continue;
                }
                // SAFETY: made by `into_ptr` above; librdkafka refused it, so it is ours.
                unsafe { InFlight::from_ptr(message._private) }.reclaim();
                if message.err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__QUEUE_FULL {
                    full.push(pending);
                } else {
                    let err = KafkaError::MessageProduction(message.err.into());
                    let error = KafkaIoError::from_rdkafka("produce", err, Duration::ZERO, None);
                    refused.push((pending, error));
                }
            }
            if !refused.is_empty() {
                self.shared.fail(refused);
            }
            if full.is_empty() || !wait_for_room || self.stopping() {
                return full;
            }
            run = full;
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Returns in-flight records to the front of the retries, in order, settling them.
    fn put_back(&self, records: Vec<Box<Pending>>) {
        let count = records.len();
        let now = Instant::now();
        let mut state = self.shared.lock();
        for pending in records.into_iter().rev() {
            state.retries.push_front((now, pending));
        }
        // They leave `in_flight` under the lock that `stats` reads `retries` under, so a
        // snapshot never counts them twice; flushers check and wait under it too.
        if count > 0 && self.shared.in_flight.fetch_sub(count, Ordering::AcqRel) == count {
            self.shared.progress.notify_all();
        }
    }

    /// Chooses the partition of a record that has a `partition_key` (by default as WaterDrop).
    fn with_partition(
        &self,
        producer: &ThreadedProducer<DeliveryTracker>,
        mut pending: Box<Pending>,
    ) -> Box<Pending> {
        if pending.record.partition.is_none()
            && let Some(key) = pending.partition_key.as_deref()
        {
            pending.record.partition = self.partitions.partition_for(
                producer.client(),
                &pending.record.topic,
                key,
                METADATA_TIMEOUT,
            );
        }
        pending
    }

    /// Sends a batch in transactions of its own, again and again until each record is
    /// committed or handed back: an aborted transaction's records go again, in order, before
    /// anything newer.
    fn hand_off_transactions(&self, mut batch: Vec<Box<Pending>>) {
        while !batch.is_empty() {
            let (reports, error) = match self.run_transaction(batch) {
                RoundEnd::Committed(reports) => {
                    self.settle_committed(reports);
                    return;
                }
                RoundEnd::Aborted(reports, error) => {
                    log::warn!(
                        "transaction of {} record(s) aborted, sending them again: {error}",
                        reports.len()
                    );
                    (reports, error)
                }
                RoundEnd::Fatal {
                    reports,
                    error,
                    renewable: true,
                } => match self.renew_producer() {
                    Ok(()) => {
                        log::warn!(
                            "the transactional producer failed ({error}); a new instance sends \
                             its {} record(s) again",
                            reports.len()
                        );
                        (reports, error)
                    }
                    Err(Some(fatal)) => {
                        self.fail_fatally(round_records(reports, Vec::new()), fatal);
                        return;
                    }
                    Err(None) => {
                        self.put_back(round_records(reports, Vec::new()));
                        return;
                    }
                },
                RoundEnd::Fatal { reports, error, .. } => {
                    self.fail_fatally(round_records(reports, Vec::new()), error);
                    return;
                }
                RoundEnd::Stopped(records) => {
                    self.put_back(records);
                    return;
                }
            };
            batch = self.settle_aborted(reports, &error);
            if !batch.is_empty() && !self.shared.options.retry_backoff.is_zero() {
                std::thread::sleep(self.shared.options.retry_backoff);
            }
        }
    }

    /// Sends `batch` in one transaction and commits it, following librdkafka's transactional
    /// error model: a retriable error calls the same operation again, an abortable one aborts,
    /// a fatal one ends the instance.
    fn run_transaction(&self, batch: Vec<Box<Pending>>) -> RoundEnd {
        let producer = self.producer();
        let started = Instant::now();
        loop {
            let Err(e) = producer.begin_transaction() else {
                break;
            };
            if self.stopping() {
                return RoundEnd::Stopped(batch);
            }
            match transaction_step(&e) {
                TransactionStep::Retry => std::thread::sleep(TRANSACTION_BACKOFF),
                // The previous transaction failed after it ended (a late delivery failure).
                TransactionStep::Abort => {
                    log::warn!("begin_transaction failed, aborting first: {e}");
                    if let Err(e) = self.abort_transaction(&producer) {
                        return self.end_fatally(
                            &producer,
                            started,
                            0,
                            batch,
                            e,
                            "abort_transaction",
                        );
                    }
                }
                TransactionStep::Fatal => {
                    return self.end_fatally(&producer, started, 0, batch, e, "begin_transaction");
                }
            }
        }
        *self.shared.lock_round() = OpenRound {
            reports: Vec::with_capacity(batch.len()),
            failures: batch.iter().map(|p| p.failures).collect(),
        };
        let mut records = batch.into_iter();
        let mut handed = 0;
        let mut unsent = Vec::new();
        let mut position = 0;
        while let Some(pending) = records.next() {
            let pending = self.with_partition(&producer, pending);
            let in_flight = InFlight::in_transaction(&pending, position);
            position += 1;
            match self.send(&producer, pending, in_flight, true) {
                Handoff::Sent => handed += 1,
                Handoff::Refused => {}
                Handoff::Unsent(pending) => {
                    unsent.push(pending);
                    unsent.extend(records.by_ref());
                }
            }
        }
        let mut abort_reason = None;
        if unsent.is_empty() {
            loop {
                let Err(e) = producer.commit_transaction(TRANSACTION_STEP) else {
                    return RoundEnd::Committed(self.take_round(handed));
                };
                match transaction_step(&e) {
                    // The commit goes on in librdkafka; calling it again resumes it.
                    TransactionStep::Retry if !self.stopping() => {
                        std::thread::sleep(TRANSACTION_BACKOFF);
                    }
                    TransactionStep::Retry => break,
                    TransactionStep::Abort => {
                        abort_reason = Some(KafkaIoError::from_rdkafka(
                            "commit_transaction",
                            e,
                            TRANSACTION_STEP,
                            None,
                        ));
                        break;
                    }
                    TransactionStep::Fatal => {
                        return self.end_fatally(
                            &producer,
                            started,
                            handed,
                            unsent,
                            e,
                            "commit_transaction",
                        );
                    }
                }
            }
        }
        match self.abort_transaction(&producer) {
            Err(e) if !self.stopping() => {
                self.end_fatally(&producer, started, handed, unsent, e, "abort_transaction")
            }
            _ if self.stopping() || !unsent.is_empty() => {
                RoundEnd::Stopped(round_records(self.take_round(handed), unsent))
            }
            _ => RoundEnd::Aborted(
                self.take_round(handed),
                abort_reason.unwrap_or(KafkaIoError::Closed("the transaction")),
            ),
        }
    }

    /// Aborts the open transaction, calling abort again after retriable failures until a
    /// shutdown; any other failure is returned (librdkafka: the instance is then unusable).
    fn abort_transaction(
        &self,
        producer: &ThreadedProducer<DeliveryTracker>,
    ) -> Result<(), KafkaError> {
        loop {
            let Err(e) = producer.abort_transaction(TRANSACTION_STEP) else {
                return Ok(());
            };
            match transaction_step(&e) {
                TransactionStep::Retry if !self.stopping() => {
                    std::thread::sleep(TRANSACTION_BACKOFF);
                }
                _ => return Err(e),
            }
        }
    }

    /// Ends a transaction whose `operation` failed fatally: purges what librdkafka still holds
    /// and takes back the reports of the `handed` records, then those never handed over.
    fn end_fatally(
        &self,
        producer: &ThreadedProducer<DeliveryTracker>,
        started: Instant,
        handed: usize,
        unsent: Vec<Box<Pending>>,
        err: KafkaError,
        operation: &str,
    ) -> RoundEnd {
        producer.purge(PurgeConfig::default().queue().inflight());
        let mut reports = if handed > 0 {
            self.take_round(handed)
        } else {
            Vec::new()
        };
        reports.extend(unsent.into_iter().map(RoundReport::not_sent));
        RoundEnd::Fatal {
            reports,
            renewable: may_renew(&err, started.elapsed(), self.transaction_timeout),
            error: fatal_error(operation, err),
        }
    }

    /// Replaces the librdkafka instance after a fatal error that left the `transactional.id`
    /// ours (librdkafka: a fatal error ends the instance; e.g. INVALID_TXN_STATE when an abort
    /// after an outage reaches a coordinator that never saw the transaction). The new
    /// instance's init_transactions bumps the producer epoch, which aborts whatever the old one
    /// left open, so none of its records can be committed any more. `Err(None)` when a
    /// shutdown came first, `Err(Some(error))` when no new instance can take over.
    fn renew_producer(&self) -> Result<(), Option<KafkaIoError>> {
        let producer = create_producer(&self.client_config, &self.shared).map_err(Some)?;
        loop {
            let Err(e) = producer.init_transactions(TRANSACTION_STEP) else {
                break;
            };
            match transaction_step(&e) {
                _ if self.stopping() => return Err(None),
                TransactionStep::Retry => std::thread::sleep(TRANSACTION_BACKOFF),
                _ => return Err(Some(fatal_error("init_transactions", e))),
            }
        }
        let replaced = std::mem::replace(
            &mut *self.producer.write().unwrap_or_else(|p| p.into_inner()),
            Arc::new(producer),
        );
        // Dropped outside the lock: librdkafka's teardown takes a while.
        drop(replaced);
        Ok(())
    }

    /// Waits for the reports of the `handed` records of the transaction that just ended and
    /// takes them, in the order they were sent per partition.
    /// Waits (at most `PURGE_WAIT`) for the reports of the `handed` records of the open
    /// transaction; returns them in the order the records were sent, with their failed sends.
    fn take_round(&self, handed: usize) -> Vec<RoundReport> {
        let deadline = Instant::now() + PURGE_WAIT;
        let mut round = self.shared.lock_round();
        while round.reports.len() < handed && Instant::now() < deadline {
            round = self
                .shared
                .round_reported
                .wait_timeout(round, WORKER_TICK)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if round.reports.len() < handed {
            log::error!(
                "{} of {handed} record(s) of a transaction were never reported by librdkafka",
                handed - round.reports.len()
            );
        }
        let OpenRound {
            mut reports,
            failures,
        } = std::mem::take(&mut *round);
        drop(round);
        // The failed-sends field carries each record's position (InFlight::in_transaction);
        // it saturates at 65,535, so in a larger round (only after that many were put back)
        // the records past it keep librdkafka's order among themselves.
        reports.sort_by_key(|report| report.pending.failures);
        for report in &mut reports {
            let position = report.pending.failures as usize;
            report.pending.failures = failures.get(position).copied().unwrap_or(0);
        }
        reports
    }

    /// Publishes a committed transaction's records as delivered.
    fn settle_committed(&self, reports: Vec<RoundReport>) {
        let count = reports.len();
        let mut failed = Vec::new();
        for report in reports {
            match report.outcome {
                Ok(event) => {
                    self.shared.delivered.fetch_add(1, Ordering::Relaxed);
                    if let Some(written) = event {
                        self.shared.report_written(written);
                    }
                }
                // librdkafka refuses to commit a transaction with a failed record; should one
                // appear all the same, it is handed back rather than counted as delivered.
                Err((error, _)) => failed.push((report.pending, error)),
            }
        }
        let failures = failed.len();
        self.shared.fail(failed);
        self.shared.settle(count - failures);
    }

    /// Sorts an aborted transaction's records: those that cannot succeed or have used up their
    /// retries are handed back; the others are returned, in order, to be sent again.
    fn settle_aborted(&self, reports: Vec<RoundReport>, error: &KafkaIoError) -> Vec<Box<Pending>> {
        let mut again = Vec::with_capacity(reports.len());
        let mut failed = Vec::new();
        let mut retried = 0;
        for RoundReport {
            mut pending,
            outcome,
        } in reports
        {
            pending.failures += 1;
            let (reason, transient) = match outcome {
                Ok(_) => (error.clone(), true),
                Err((reason, transient)) => (reason, transient),
            };
            if transient && self.shared.may_retry(pending.failures) {
                retried += 1;
                again.push(pending);
            } else {
                failed.push((pending, reason));
            }
        }
        self.shared.lock().stats.retried += retried;
        if let Some(first) = again.first() {
            self.shared.emit(ProducerEvent::DeliveryError {
                topic: first.record.topic.clone(),
                error: error.clone(),
                attempt: first.failures,
            });
        }
        self.shared.fail(failed);
        again
    }

    /// Hands back `records` (in flight) and everything buffered with a fatal error, which every
    /// later call raises.
    fn fail_fatally(&self, records: Vec<Box<Pending>>, error: KafkaIoError) {
        log::error!("the producer failed fatally and stops: {error}");
        let mut state = self.shared.lock();
        state.fatal = Some(error.clone());
        let mut buffered: Vec<Box<Pending>> = state.retries.drain(..).map(|(_, p)| p).collect();
        buffered.extend(state.buffer.drain_chunk(usize::MAX));
        self.shared
            .in_flight
            .fetch_add(buffered.len(), Ordering::AcqRel);
        drop(state);
        self.shared.fail(
            records
                .into_iter()
                .chain(buffered)
                .map(|p| (p, error.clone())),
        );
        self.shared.progress.notify_all();
    }

    /// Hands one record to librdkafka, waiting while librdkafka's own queue is full; librdkafka
    /// copies it, and the box is dropped here. A refused record is handed back with the error.
    /// Gives the record back when a shutdown ends the wait for room.
    fn send(
        &self,
        producer: &ThreadedProducer<DeliveryTracker>,
        pending: Box<Pending>,
        in_flight: InFlight,
        wait_for_room: bool,
    ) -> Handoff {
        let mut base = pending.record.base_record(in_flight);
        loop {
            match producer.send(base) {
                // librdkafka copied the record; the box is dropped here.
                Ok(()) => return Handoff::Sent,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    if !wait_for_room || self.stopping() {
                        back.delivery_opaque.reclaim();
                        return Handoff::Unsent(pending);
                    }
                    base = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((err, back)) => {
                    back.delivery_opaque.reclaim();
                    let error = KafkaIoError::from_rdkafka("produce", err, Duration::ZERO, None);
                    self.shared.fail([(pending, error)]);
                    return Handoff::Refused;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::OutgoingRecord;

    fn pending(n: usize) -> Box<Pending> {
        Box::new(Pending {
            record: OutgoingRecord {
                topic: "nowhere".to_owned(),
                value: Some(format!("v{n}").into_bytes()),
                ..OutgoingRecord::default()
            },
            partition_key: None,
            ticket: 0,
            failures: 0,
        })
    }

    fn settings(entries: &[(&str, &str)]) -> ClientSettings {
        ClientSettings::new(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
        .unwrap()
    }

    /// After a fatal error a new instance takes over unless the transactional.id is no longer
    /// ours: not authorized, or fenced while the transaction was too young for the coordinator
    /// to have aborted it (another producer took over).
    #[test]
    fn a_new_instance_takes_over_only_while_the_transactional_id_is_ours() {
        use RDKafkaErrorCode as C;
        let timeout = Duration::from_secs(10);
        let (young, old) = (Duration::from_secs(1), Duration::from_secs(11));
        let error = KafkaError::MessageProduction;
        for code in [C::Fenced, C::ProducerFenced, C::InvalidProducerEpoch] {
            assert!(!may_renew(&error(code), young, timeout), "{code:?}");
            assert!(may_renew(&error(code), old, timeout), "{code:?}");
        }
        for code in [
            C::TransactionalIdAuthorizationFailed,
            C::ClusterAuthorizationFailed,
        ] {
            assert!(!may_renew(&error(code), old, timeout), "{code:?}");
        }
        assert!(may_renew(
            &error(C::InvalidTransactionalState),
            young,
            timeout
        ));
    }

    /// Keyless records go one partition per run only where librdkafka itself would place them
    /// stickily: never under a partitioner that hashes the missing key to one partition.
    #[test]
    fn keyless_runs_follow_librdkafkas_partitioner_setting() {
        let cases = [
            (vec![], true),
            (vec![("partitioner", "consistent_random")], true),
            (vec![("partitioner", "murmur2_random")], true),
            (vec![("partitioner", "random")], true),
            (vec![("partitioner", "consistent")], false),
            (vec![("partitioner", "murmur2")], false),
            (vec![("partitioner", "fnv1a")], false),
            (vec![("sticky.partitioning.linger.ms", "0")], false),
            (vec![("sticky.partitioning.linger.ms", "10")], true),
        ];
        for (entries, expected) in cases {
            let mut entries = entries;
            entries.push(("bootstrap.servers", "127.0.0.1:1"));
            assert_eq!(sticky_keyless(&settings(&entries)), expected, "{entries:?}");
        }
    }

    /// No broker answers and librdkafka's own queue holds 10 records, so at shutdown records
    /// sit in librdkafka, in the worker's hands (waiting for room) and in the buffer. Every one
    /// must come back, as a `Failed` event or in the returned list, exactly once, and quickly.
    #[test]
    fn shutdown_without_a_broker_hands_back_every_record_once() {
        let settings = ClientSettings::new([
            ("bootstrap.servers".to_owned(), "127.0.0.1:1".to_owned()),
            ("queue.buffering.max.messages".to_owned(), "10".to_owned()),
        ])
        .unwrap();
        let options = AsyncProducerOptions {
            max_queue_size: 100,
            delivery_threshold: 1,
            ..AsyncProducerOptions::default()
        };
        let producer = AsyncProducer::new(settings, options).unwrap();
        let events = producer.take_events().unwrap();
        let mut items: VecDeque<Box<Pending>> = (0..100).map(pending).collect();
        let (accepted, _, refusal) = producer.try_produce(&mut items, false);
        assert_eq!((accepted, refusal.is_none()), (100, true));

        let started = Instant::now();
        producer.begin_shutdown();
        assert!(!producer.flush_step(Duration::from_millis(300)));
        let returned = producer.finish_shutdown();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );

        let mut values: Vec<Vec<u8>> = returned
            .into_iter()
            .filter_map(|p| p.record.value)
            .collect();
        for event in events.try_iter() {
            if let ProducerEvent::Failed { pending, .. } = event {
                values.extend(pending.record.value);
            }
        }
        values.sort();
        let mut expected: Vec<Vec<u8>> = (0..100).map(|n| format!("v{n}").into_bytes()).collect();
        expected.sort();
        assert_eq!(values, expected);
        let stats = producer.stats();
        assert_eq!(
            (stats.delivered, stats.failed, stats.in_flight),
            (0, 100, 0)
        );
    }
}
