//! [`ConcurrentConsumer`]: an ordered-per-partition, concurrent-across-partitions consumer with
//! at-least-once commits, modelled on Elixir's `KafkaClient.Consumer`.
//!
//! Threads and locks:
//! - One poller thread owns the polling of the rdkafka `BaseConsumer`. Each assigned partition
//!   has its own librdkafka queue ([`PartitionSource`](crate::partition_source::PartitionSource),
//!   drained in runs) and one [`Slot`](state::Slot) whose
//!   [`PartitionBuffer`](ferrokafka_core::PartitionBuffer) (the pure core) holds the records
//!   handed from that queue to the worker. The poller takes from a partition's queue only as
//!   many records as its buffer has room for: a full partition is simply not polled
//!   (librdkafka then stops fetching it once its prefetch fills), so nothing is paused,
//!   resumed or discarded. The poller also serves the main queue
//!   (rebalances, statistics, errors, and records fetched before a partition's queue was split),
//!   commits finished offsets every `commit_interval`, and, on shutdown, drains, commits and
//!   closes the consumer. It sleeps on [`Wake`] when nothing arrived: librdkafka's
//!   non-empty-queue callbacks and workers that free room in a full buffer wake it. librdkafka runs
//!   the rebalance callbacks of [`RebalanceHandler`] on this thread too (inside `poll`); they stay
//!   in Rust and push [`ConsumerEvent`]s into a channel that the bindings drain on a Python thread.
//! - Workers (one per assigned partition, owned by the bindings) call [`ConcurrentConsumer::fetch`]
//!   and [`ConcurrentConsumer::ack`] / [`ConcurrentConsumer::fail`]; records cross from the poller
//!   in runs (one lock per run) and leave as one shared batch. Workers that are tasks of one
//!   event loop register the partitions that ran dry ([`ConcurrentConsumer::wait_for_records`])
//!   and take their batches when [`ConcurrentConsumer::ready_fd`] says one may be ready
//!   ([`ConcurrentConsumer::fetch_ready`]): no thread waits for them.
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
//!
//! Rooms, one idea each: `options` (what to consume, the error policy), `events` (what the
//! bindings hear), `state` (the slots of assigned partitions and what the threads share),
//! `waiting` (an event loop's dry workers, signalled through a file descriptor), `start` (subscribing or assigning at start), `poller` (the poller thread and routing),
//! `rebalance` (librdkafka's callbacks: rebalances, statistics, errors), `dispatch` (handing
//! batches to workers and applying their outcome), `commit` (commit progress), `stats`
//! (counters and snapshots), `report_sample` (its part of a process report), `overdue`
//! (handlers that overrun `max.poll.interval.ms`). This file holds
//! the engine itself, its start and its stop.

mod commit;
mod dispatch;
mod events;
mod options;
mod overdue;
mod poller;
mod rebalance;
mod report_sample;
mod start;
mod state;
mod stats;
mod waiting;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use ferrokafka_core::OrderBy;

use crate::config::{ClientRole, ClientSettings};
use crate::connection_failure::ConnectionWatch;
use crate::dead_letter::DeadLetterWriter;
use crate::error::{KafkaIoError, KafkaResult};
use crate::locks::{lock, wait_timeout};
use crate::oauth;
use crate::report_sample::GroupMember;
use crate::statistics::KeptStatistics;

pub use self::commit::CLOSE_WITHIN;
pub use self::dispatch::{Outcome, Verdict};
pub use self::events::{Assignment, ConsumerEvent, Fetched, WorkerId};
pub use self::options::{ConsumerOptions, ErrorPolicy, OnError, StartAt, Subscription};
use self::poller::run_poller;
use self::start::{start_consuming, start_without_group};
use self::state::{Handle, RebalanceHandler, Shared, Shutdown, Slots};
use self::stats::Totals;
pub use self::stats::{ConsumerStats, PartitionCounters, PartitionStats};
use self::waiting::Waiting;
use crate::wake::Wake;

/// The concurrent consumer engine; see the module docs.
#[derive(Debug)]
pub struct ConcurrentConsumer {
    shared: Arc<Shared>,
    /// Writes failed batches when the error policy dead-letters (present exactly when it can);
    /// also used by the poller (resends). Kept out of `Shared`: the writer's delivery callbacks
    /// hold `Shared` weakly.
    dead_letters: Option<Arc<DeadLetterWriter>>,
    events: Mutex<Option<Receiver<ConsumerEvent>>>,
    poller: Mutex<Option<JoinHandle<()>>>,
    /// Who the consumer is in process reports.
    member: GroupMember,
    /// Whether it reads only committed transactions (`isolation.level`, librdkafka's default
    /// `read_committed`): its lag then ends at the last stable offset.
    read_committed: bool,
}

/// The group id of a consumer without a group: librdkafka refuses `assign` without one, and
/// process reports list the consumer under it.
const WITHOUT_GROUP: &str = "ferrokafka-without-group";

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
        let reset = settings.get("auto.offset.reset");
        let start_without_group = start_without_group(reset);
        // `error` can never be met without a group, which has no committed offsets; any other
        // value naming no start is librdkafka's to refuse (it names it).
        if !group
            && reset.is_some_and(|reset| reset.eq_ignore_ascii_case("error"))
            && options
                .subscriptions
                .iter()
                .any(Subscription::has_no_start_of_its_own)
        {
            return Err(KafkaIoError::Config(format!(
                "auto.offset.reset={:?} leaves a consumer without group.id nowhere to start: \
                 it has no committed offsets; use earliest or latest, give each partition its \
                 own start, or set group.id",
                reset.unwrap_or_default()
            )));
        }
        let member = GroupMember::new(
            settings
                .get("group.id")
                .filter(|_| group)
                .unwrap_or(WITHOUT_GROUP),
            &settings,
        );
        let read_committed = settings
            .get("isolation.level")
            .is_none_or(|level| level == "read_committed");
        let mut config = settings.for_role(ClientRole::Consumer).to_client_config();
        if !group {
            // librdkafka refuses `assign` without a group id; this one never joins a group
            // (nothing is subscribed) and never commits.
            config.set("group.id", WITHOUT_GROUP);
        }
        config.set("enable.auto.commit", "false");
        config.set("enable.auto.offset.store", "false");
        // Exactly when the error policy can decide to dead-letter.
        let dead_letters = match options.errors.dead_letter_topic() {
            Some(topic) => Some(Arc::new(DeadLetterWriter::new(
                &settings,
                topic.to_owned(),
            )?)),
            None => None,
        };
        let (events, receiver) = channel();
        let shared = Arc::new(Shared {
            options,
            group,
            slots: Mutex::new(Slots::default()),
            totals: Mutex::new(Totals::default()),
            next_worker: AtomicU64::new(1),
            events,
            load_changes_wanted: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            shutdown: Mutex::new(Shutdown::default()),
            stopped: Condvar::new(),
            consumer: Mutex::new(None),
            wake: Arc::new(Wake::default()),
            waiting: Waiting::default(),
            statistics: KeptStatistics::default(),
            polled_at: Mutex::new(None),
            watch: ConnectionWatch::new(&settings),
            overdue_after: member.poll_interval(),
        });
        let handler = RebalanceHandler {
            shared: Arc::clone(&shared),
            drain,
            tokens: settings.token_refresh(),
        };
        let mut consumer: Handle = oauth::create_client(&config, handler, "create consumer")?;
        let wake = Arc::clone(&shared.wake);
        consumer.set_nonempty_callback(move || wake.notify());
        let consumer = Arc::new(consumer);
        *lock(&shared.consumer) = Some(Arc::clone(&consumer));
        let started = start_consuming(
            &shared,
            &consumer,
            start_without_group,
            bootstrap.as_deref(),
        );
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
            member,
            read_committed,
        }))
    }

    /// Takes the event receiver; the bindings drain it on a Python thread. Only the first call
    /// gets it.
    pub fn take_events(&self) -> Option<Receiver<ConsumerEvent>> {
        lock(&self.events).take()
    }

    /// From now on, sends a [`ConsumerEvent::LoadControl`] for each pause and resume of a
    /// partition's buffer (until then they are only counted): for telemetry, when someone
    /// listens. Never turned off again, so callers racing to turn it on cannot undo each other.
    pub fn report_load_changes(&self) {
        self.shared
            .load_changes_wanted
            .store(true, Ordering::Relaxed);
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

    /// Waits up to `wait` for the poller to finish shutting down; true when it has, or when
    /// the close has taken [`CLOSE_WITHIN`] and goes on without the caller: librdkafka waits for
    /// a coordinator that accepts connections and never answers (a hung broker) without a limit.
    pub fn wait_stopped(&self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        let mut shutdown = lock(&self.shared.shutdown);
        let finished = loop {
            if shutdown.finished {
                break true;
            }
            let now = Instant::now();
            if shutdown.close_by.is_some_and(|by| now >= by) {
                break false;
            }
            if now >= until {
                return false;
            }
            let limit = shutdown.close_by.map_or(until, |by| by.min(until));
            shutdown = wait_timeout(&self.shared.stopped, shutdown, limit - now);
        };
        drop(shutdown);
        // Taken out first: a guard in the `if let` would be held through the join and the log.
        let poller = lock(&self.poller).take();
        if let Some(handle) = poller {
            if finished {
                let _ = handle.join();
            } else {
                log::warn!(
                    "the consumer did not leave its group within {CLOSE_WITHIN:?}: the \
                     coordinator did not answer; it takes this member's partitions back after \
                     session.timeout.ms, and the close ends in the background"
                );
            }
        }
        true
    }
}

impl Drop for ConcurrentConsumer {
    fn drop(&mut self) {
        // Without an explicit stop, end without draining; the poller closes the consumer on its
        // own thread so dropping never waits on the network.
        self.begin_stop(Duration::ZERO);
    }
}
