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
//!   for room in librdkafka's queue: what librdkafka refuses goes back in front for the worker.
//!   The `handoff` lock, held from taking a chunk until it is sent, keeps chunks in buffer
//!   order.
//! - the producer's polling thread (its [`PolledProducer`]'s) runs [`DeliveryTracker::delivery`],
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
//!
//! Rooms, one idea each: `options` (settings, and what the engine reads from librdkafka's),
//! `pending` (a record in the engine's care) and `in_flight` (its delivery opaque), `state`
//! (what the threads share), `produce` (the callers' side: queueing, tickets, flush), `worker`
//! (the delivery worker), `handoff` (moving records to librdkafka), `delivery` (librdkafka's
//! delivery reports), `isolation` (a refused batch's records sent again in halves to find the
//! refused ones), `round` (the open transaction's reports), `transactions` (a round as a
//! transaction), `fatal` (a new instance, or everything handed back), `shutdown`, `reports`
//! (events, acknowledgements and counters for the bindings), `waiters` (who waits for which
//! tracked record: its own waiter or its batch's report, for the bindings to run). This file
//! holds the engine itself and its start.

// A record is boxed once when accepted and then moves as a pointer through the buffer, the
// worker and librdkafka (the box is its delivery opaque): `Vec<Box<Pending>>` is deliberate.
#![allow(clippy::vec_box)]

mod delivery;
mod fatal;
mod handoff;
mod in_flight;
mod isolation;
mod options;
mod pending;
mod produce;
mod reports;
mod round;
mod shutdown;
mod state;
mod transactions;
mod waiters;
mod worker;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrokafka_core::batch::{BatchBuffer, BufferLimits, DeliveryPolicy};

use crate::batch_produce::TopicHandles;
use crate::config::{ClientRole, ClientSettings};
use crate::connection_failure::{ConnectionWatch, init_transactions};
use crate::error::{KafkaIoError, KafkaResult};
use crate::oauth;
use crate::partitioner::PartitionCounts;
use crate::polled_producer::PolledProducer;
use crate::transaction_step::transaction_timeout;

use self::delivery::DeliveryTracker;
pub use self::options::AsyncProducerOptions;
use self::options::{DeliveryMode, setting_on, sticky_keyless};
pub use self::pending::{POSITION_ONLY, Pending, Ticket};
pub use self::produce::Refusal;
pub use self::reports::{Acknowledgement, ProducerEvent, ProducerStats};
use self::round::OpenRound;
use self::state::{Shared, State};
pub use self::waiters::{DeliveryWaiters, Settled};

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
/// How long the end of a shutdown waits for librdkafka to report the records it purged.
const PURGE_WAIT: Duration = Duration::from_secs(5);

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
    producer: RwLock<Arc<PolledProducer<DeliveryTracker>>>,
    /// The settings it was created with: a replacing instance is created from them, and a
    /// given-up instance's transaction is read back with a reader made of them.
    settings: ClientSettings,
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

/// A librdkafka producer reporting to `shared`'s delivery tracker.
fn create_producer(
    settings: &ClientSettings,
    shared: &Arc<Shared>,
) -> KafkaResult<PolledProducer<DeliveryTracker>> {
    oauth::create_client(
        &settings.for_role(ClientRole::Producer).to_client_config(),
        DeliveryTracker {
            shared: Arc::clone(shared),
        },
        "create producer",
    )
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
                suspects: Vec::new(),
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
        let producer = create_producer(&settings, &shared)?;
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
            transaction_timeout: transaction_timeout(&settings),
            settings,
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

    /// The producer's options.
    pub fn options(&self) -> &AsyncProducerOptions {
        &self.shared.options
    }

    fn stopping(&self) -> bool {
        self.shared.stopping.load(Ordering::Acquire)
    }

    /// The current librdkafka instance.
    fn producer(&self) -> Arc<PolledProducer<DeliveryTracker>> {
        Arc::clone(&self.producer.read().unwrap_or_else(|p| p.into_inner()))
    }
}
