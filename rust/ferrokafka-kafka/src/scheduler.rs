//! [`Scheduler`]: the scheduled-messages daemon, wire-compatible with Karafka Pro's.
//!
//! One daemon thread owns a group consumer of the schedules topics and two producers (one for
//! dispatches, transactional when `transactional.id` is set; one for state reports). For each
//! assigned partition it replays the partition from the earliest offset into a
//! [`ScheduleTracker`] (state `loading`); the first end-of-partition event (or a record written
//! more than Karafka's 15 s grace after the load started) marks it `loaded`. A record with a
//! newer schema version pauses its partition (status `blocked`) until an upgraded daemon replays it.
//! From then on it dispatches every due schedule: the target message and a tombstone for the proxy
//! (same key and partition), in chunks of `flush_batch_size` messages. Without transactions the
//! chunks are pipelined: up to [`PIPELINE_SCHEDULES`] schedules are on their way at once, a chunk's
//! tombstones are sent only once every target of that chunk was acknowledged, and a partition's
//! schedules are marked dispatched in the order they were sent. With transactions each chunk is
//! one transaction holding its targets and their tombstones, committed before the next chunk
//! starts (one producer has one open transaction). A target the broker
//! refuses for good (too large, illegal or unauthorised topic) is counted as `failed`, logged
//! with its key and, when `dead_letter_topic` is set, copied there before its tombstone is
//! written; it never holds up the schedules behind it. Transient failures are restored and
//! retried with exponential backoff. Offsets read and acted upon are committed every
//! [`COMMIT_INTERVAL`] so the group's lag is meaningful while running.
//!
//! Read-back of far-future payloads (see `ScheduleTracker`'s horizon) is retried with backoff
//! until it succeeds: a schedule leaves memory only when dispatched, cancelled or failed.
//!
//! Delivery guarantee: with a transactional producer (and the consumer reading `read_committed`)
//! the target and its tombstone commit together, so a restart never dispatches a schedule twice.
//! Without transactions it is at-least-once: a crash after the target was written but before its
//! tombstone was can dispatch it again on restart.
//!
//! The daemon sleeps until the next due schedule (at most [`MAX_SLEEP`]), so dispatch lateness
//! is bounded by the poll slice, not by a fixed tick. State reports go to
//! `<topic><states_postfix>`, same partition, key `<state>_state`, zlib JSON, at most every
//! `state_interval`, and at once when a partition becomes loaded and on shutdown.
//!
//! Threading: rdkafka callbacks (rebalance, delivery) only record events in mutex-protected
//! lists that the daemon thread drains after each poll; no Python ever runs here.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrokafka_core::codec::envelope::{
    self, ProxyRecord, ProxySource, TargetAddress, validate_stored_epoch,
};
use ferrokafka_core::codec::json::encode_document;
use ferrokafka_core::codec::state::TrackerState;
use ferrokafka_core::schedule::{
    Dispatch, PayloadFetch, ScheduleRecord, ScheduleTracker, TrackerConfig,
};
use ferrokafka_core::{CoreError, PartitionKeyHashing};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers as _, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::client::EndIsExpected;
use crate::config::ClientSettings;
use crate::connection_failure::{ConnectionWatch, init_transactions};
use crate::daemon::{
    Daemon, DaemonStatus, FlushTracker, GroupContext, RebalanceEvent, SHUTDOWN_BUDGET,
    at_partition_end, commit_and_close, creation_error, enqueue_with, flush_before,
    group_consumer_settings, now_ms, producer_settings, publish, require_group_id,
    send_waiting_for_room,
};
use crate::error::{KafkaIoError, KafkaResult};
use crate::oauth;
use crate::packed_headers::PackedHeaders;
use crate::partitioner::METADATA_TIMEOUT;
use crate::partitioner::PartitionCounts;
use crate::record::OutgoingRecord;
use crate::rounds::{RoundId, RoundRecord, Rounds, send_round};
use crate::statistics::BrokerOffsets;

/// Longest the daemon waits in one poll, so stop requests and due schedules are noticed quickly.
const MAX_SLEEP: Duration = Duration::from_millis(100);
/// First pause before retrying after a transient failure (dispatch or read-back); doubled after
/// each further failure up to [`MAX_RETRY_PAUSE`].
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(200);
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(10);
/// Longest one read-back of far-future payloads waits for the broker before it is retried.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the offsets read and acted upon are committed while running.
const COMMIT_INTERVAL: Duration = Duration::from_secs(1);
/// Schedules of the at-least-once dispatcher on their way at once (targets or tombstones sent,
/// not yet acknowledged; at least one chunk): enough that a second's worth of due schedules is
/// handed to the producer at once, well within librdkafka's default queue of 100,000 messages.
const PIPELINE_SCHEDULES: usize = 25_000;
/// Sends of a tombstone (its target acknowledged) before its failure is only logged: a restart
/// may then dispatch that schedule again.
const TOMBSTONE_ATTEMPTS: u32 = 3;
/// Time a round waits beyond librdkafka's `message.timeout.ms` for the reports of its records.
const ROUND_GRACE: Duration = Duration::from_secs(5);
/// Records applied between two loading-progress log lines.
const PROGRESS_EVERY: u64 = 100_000;

/// Settings of a [`Scheduler`] beyond librdkafka's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerOptions {
    /// The schedules topics to serve.
    pub schedules_topics: Vec<String>,
    /// Consumer group of the daemons serving these topics.
    pub group_id: String,
    /// Most messages (targets plus tombstones) per dispatched chunk [1000].
    pub flush_batch_size: usize,
    /// Least time between two periodic state reports of a partition.
    pub state_interval: Duration,
    /// Appended to a schedules topic's name to name its states topic ["_states"].
    pub states_postfix: String,
    /// How far ahead schedules keep their payload in memory (see `ScheduleTracker`).
    pub horizon: Duration,
    /// Deadline of one round of sends (or of a transaction commit).
    pub dispatch_timeout: Duration,
    /// Where schedules whose target is refused for good are copied (none: only counted and
    /// logged; their proxy then stays on the schedules topic).
    pub dead_letter_topic: Option<String>,
    /// How a target's `partition_key` is hashed into its partition [as WaterDrop].
    pub partition_key_hashing: PartitionKeyHashing,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            schedules_topics: Vec::new(),
            // Karafka's group: Ruby and Python daemons on one topic share its partitions.
            group_id: "karafka_scheduled_messages".to_owned(),
            flush_batch_size: 1000,
            // Karafka's tick.
            state_interval: Duration::from_secs(5),
            states_postfix: "_states".to_owned(),
            horizon: Duration::from_secs(3600),
            dispatch_timeout: Duration::from_secs(30),
            dead_letter_topic: None,
            partition_key_hashing: PartitionKeyHashing::default(),
        }
    }
}

/// A partition's figures, for `status()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionStatus {
    /// Schedules topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Tracker state name: fresh, loading, loaded, stopped; or blocked (a record with a newer
    /// schema stopped the partition until the daemon is upgraded).
    pub state: &'static str,
    /// Schedules pending in memory (with payload) and beyond the horizon.
    pub pending: usize,
    /// Schedules dispatched by this daemon.
    pub dispatched: u64,
    /// Records skipped as undecodable.
    pub skipped: u64,
    /// Schedules whose target was refused for good (dead-lettered when a topic is set).
    pub failed: u64,
    /// Records applied.
    pub applied: u64,
    /// The partition's offsets from the group consumer's latest statistics; `None` before
    /// the first.
    pub broker: Option<BrokerOffsets>,
}

/// The proxy data a dispatch needs: its payload, its headers and where the target goes.
#[derive(Clone, Debug)]
struct ProxyPayload {
    value: Option<Vec<u8>>,
    headers: PackedHeaders,
    target: TargetAddress,
}

struct PartitionRun {
    tracker: ScheduleTracker<ProxyPayload>,
    next_offset: i64,
    /// The offset last stored for commit.
    stored_offset: i64,
    applied: u64,
    last_report: Option<Instant>,
    dispatch_backoff: Backoff,
    /// Why the partition is stopped (a record with a newer schema), if it is.
    blocked: Option<String>,
    /// Schedules whose payload read-back failed; retried under `read_back_backoff`.
    unread: Vec<PayloadFetch>,
    read_back_backoff: Backoff,
}

/// Exponential backoff after transient failures.
#[derive(Default)]
struct Backoff {
    retry_at: Option<Instant>,
    pause: Duration,
}

impl Backoff {
    fn waiting(&self) -> bool {
        self.retry_at.is_some_and(|at| Instant::now() < at)
    }

    /// Records a failure; returns the pause before the next try.
    fn failed(&mut self) -> Duration {
        self.pause = (self.pause * 2).clamp(FIRST_RETRY_PAUSE, MAX_RETRY_PAUSE);
        self.retry_at = Some(Instant::now() + self.pause);
        self.pause
    }

    fn succeeded(&mut self) {
        *self = Backoff::default();
    }
}

/// What became of one schedule of a dispatched chunk.
enum DispatchResult {
    /// Target acknowledged (and its tombstone written or, rarely, logged as not written).
    Dispatched,
    /// Target refused for good; the reason, with where the schedule went.
    Failed(String),
    /// Not dispatched; retry, after a backoff pause when `transient` names the error.
    Retry { transient: Option<String> },
}

/// An at-least-once chunk of one partition's schedules on its way. Its targets are sent
/// without waiting for the chunks before it; its tombstones only once every target of the chunk
/// was acknowledged (a chunk with a failed target is settled synchronously, see
/// `settle_failed_targets`).
struct ChunkInFlight {
    partition: (String, i32),
    due: Vec<Dispatch<ProxyPayload>>,
    stage: ChunkStage,
}

enum ChunkStage {
    /// Targets sent; acknowledgements awaited.
    Targets(RoundId),
    /// Every target acknowledged; tombstones (of `due[of[i]]`) sent for the `attempt`th time.
    Tombstones {
        round: RoundId,
        of: Vec<usize>,
        attempt: u32,
    },
    /// The fate of every schedule is known; marked once the earlier chunks of its partition are.
    Settled(Vec<DispatchResult>),
}

/// The running daemon; see the module docs.
pub type Scheduler = Daemon<DaemonStatus<PartitionStatus>>;

impl Scheduler {
    /// Validates the settings, creates the Kafka clients and starts the daemon thread.
    pub fn start(settings: ClientSettings, options: SchedulerOptions) -> KafkaResult<Self> {
        if options.schedules_topics.is_empty()
            || options.schedules_topics.iter().any(String::is_empty)
        {
            return Err(KafkaIoError::InvalidArgument(
                "at least one non-empty schedules topic is required".to_owned(),
            ));
        }
        require_group_id(&options.group_id)?;
        if let Some(topic) = &options.dead_letter_topic {
            // Caught now, not when the broker first refuses a dead-letter copy.
            envelope::require_topic_name("dead_letter_topic", topic)
                .map_err(|e| KafkaIoError::InvalidArgument(e.to_string()))?;
        }
        if options.flush_batch_size < 2 {
            return Err(KafkaIoError::InvalidArgument(format!(
                "flush_batch_size must be >= 2 (a target and its tombstone), got {}",
                options.flush_batch_size
            )));
        }
        let daemon = SchedulerLoop::new(settings, options)?;
        Daemon::spawn("ferrokafka-scheduler", move |stop, status| {
            daemon.run(stop, status)
        })
    }
}

struct SchedulerLoop {
    consumer: BaseConsumer<GroupContext>,
    dispatcher: ThreadedProducer<Rounds>,
    reporter: ThreadedProducer<FlushTracker>,
    /// At-least-once chunks on their way, oldest first (transactional chunks are synchronous).
    in_flight: VecDeque<ChunkInFlight>,
    fetch_settings: ClientSettings,
    transactional: bool,
    options: SchedulerOptions,
    partitions: PartitionCounts,
    runs: BTreeMap<(String, i32), PartitionRun>,
    last_commit: Instant,
}

impl SchedulerLoop {
    fn new(settings: ClientSettings, options: SchedulerOptions) -> KafkaResult<Self> {
        settings.bootstrap()?;
        let transactional = settings.get("transactional.id").is_some();
        let mut consumer_settings = group_consumer_settings(&settings, &options.group_id);
        consumer_settings.set_default("isolation.level", "read_committed");
        // Offsets are stored once acted upon (see `commit_progress`), not when merely polled.
        consumer_settings.set("enable.auto.offset.store", "false");
        let consumer: BaseConsumer<GroupContext> = oauth::create(
            &consumer_settings.to_client_config(),
            GroupContext::new("scheduler", &settings, true),
        )
        .map_err(creation_error("create scheduler consumer"))?;
        let topics: Vec<&str> = options
            .schedules_topics
            .iter()
            .map(String::as_str)
            .collect();
        consumer
            .subscribe(&topics)
            .map_err(creation_error("subscribe to schedules topics"))?;
        let mut dispatch_settings = producer_settings(&settings);
        // Pipelined (at-least-once) chunks follow each other closely, so a short linger packs
        // them into fewer, fuller produce requests: in a burst of 100,000 that cut the client
        // CPU per dispatch by about a fifth against linger.ms 0 (benches/RESULTS.md), for at
        // most 5 ms more per dispatch. A transaction's records are awaited before the next chunk
        // is sent: there lingering would only add to every chunk.
        dispatch_settings.set_default("linger.ms", if transactional { "0" } else { "5" });
        if !transactional {
            // librdkafka gives up on a record before its round does (see `round_timeout`), so
            // a record whose round timed out and that is sent again is not also delivered late.
            // (In a transaction an abort settles that, and librdkafka bounds the timeout by
            // transaction.timeout.ms itself.)
            dispatch_settings.set_default(
                "message.timeout.ms",
                &options.dispatch_timeout.as_millis().to_string(),
            );
        }
        let dispatcher: ThreadedProducer<Rounds> = oauth::create(
            &dispatch_settings.to_client_config(),
            Rounds::new(ConnectionWatch::new(&settings), settings.token_refresh()),
        )
        .map_err(creation_error("create dispatch producer"))?;
        if transactional {
            init_transactions(
                &dispatcher,
                dispatcher.context().watch(),
                options.dispatch_timeout,
                settings.bootstrap().ok(),
            )?;
        }
        let mut report_settings = producer_settings(&settings);
        report_settings.remove("transactional.id");
        let reporter: ThreadedProducer<FlushTracker> = oauth::create(
            &report_settings.to_client_config(),
            FlushTracker::new(settings.token_refresh()),
        )
        .map_err(creation_error("create state report producer"))?;
        Ok(SchedulerLoop {
            consumer,
            dispatcher,
            reporter,
            in_flight: VecDeque::new(),
            fetch_settings: consumer_settings,
            transactional,
            partitions: PartitionCounts::new(options.partition_key_hashing),
            options,
            runs: BTreeMap::new(),
            last_commit: Instant::now(),
        })
    }

    /// Runs until `stop` is set, or until the consumer's connection is refused before it ever
    /// worked (see [`GroupContext::poll_error`]).
    fn run(
        mut self,
        stop: &AtomicBool,
        status: &Mutex<DaemonStatus<PartitionStatus>>,
    ) -> KafkaResult<()> {
        log::info!(
            "scheduler started for {:?} (group {}, {})",
            self.options.schedules_topics,
            self.options.group_id,
            if self.transactional {
                "transactional"
            } else {
                "at-least-once"
            }
        );
        while !stop.load(Ordering::Acquire) {
            let sleep = self.sleep_budget();
            if self.in_flight.is_empty() {
                self.poll_records(sleep)?;
            } else {
                // Woken by the acknowledgements the pipeline waits for, not only by records;
                // a full pipeline has nothing to do before one arrives.
                let sleep = if self.pipeline_full() {
                    MAX_SLEEP
                } else {
                    sleep
                };
                self.dispatcher.context().wait_for_progress(sleep);
                self.poll_records(Duration::ZERO)?;
            }
            self.handle_assignments();
            self.settle_chunks();
            self.dispatch_due();
            self.advance_horizons();
            self.report_states(false);
            self.commit_progress();
            publish(status, self.status());
        }
        self.shutdown(status);
        Ok(())
    }

    /// How long the next poll may block: until the earliest due schedule, at most `MAX_SLEEP`.
    fn sleep_budget(&self) -> Duration {
        let now = now_ms();
        self.runs
            .values()
            .filter(|run| {
                // A blocked partition dispatches nothing: its due schedules must not keep the
                // thread from sleeping.
                run.tracker.state() == TrackerState::Loaded
                    && run.blocked.is_none()
                    && !run.dispatch_backoff.waiting()
            })
            .filter_map(|run| run.tracker.next_due_ms())
            .min()
            .map_or(MAX_SLEEP, |due| {
                Duration::from_millis(due.saturating_sub(now)).min(MAX_SLEEP)
            })
    }

    /// Applies records until none is waiting (or a bounded number, to keep dispatching); an
    /// error that ends the daemon (see [`GroupContext::poll_error`]).
    fn poll_records(&mut self, first_wait: Duration) -> KafkaResult<()> {
        let mut wait = first_wait;
        for _ in 0..10_000 {
            let Some(polled) = self.consumer.poll(wait) else {
                return Ok(());
            };
            wait = Duration::ZERO;
            match polled {
                Ok(message) => {
                    self.consumer.context().connected();
                    let horizon_ms =
                        u64::try_from(self.options.horizon.as_millis()).unwrap_or(u64::MAX);
                    // Read in place: only a schedule's payload and headers are copied out.
                    let newer_schema = apply(&mut self.runs, horizon_ms, &message);
                    drop(message);
                    if let Some((topic, partition)) = newer_schema {
                        let mut paused = TopicPartitionList::new();
                        let _ = paused.add_partition(&topic, partition);
                        if let Err(e) = self.consumer.pause(&paused) {
                            log::warn!("pause {topic}-{partition}: {e}");
                        }
                    }
                }
                Err(KafkaError::PartitionEOF(partition)) => self.reached_end(partition),
                Err(e) => self.consumer.context().poll_error(e)?,
            }
        }
        Ok(())
    }

    fn handle_assignments(&mut self) {
        let events = self.consumer.context().take_events();
        for event in events {
            match event {
                RebalanceEvent::Assigned(partitions) => {
                    for (topic, partition) in partitions {
                        log::info!("assigned {topic}-{partition}: loading schedules");
                        self.run_for(&topic, partition);
                    }
                }
                RebalanceEvent::Revoked(partitions) => {
                    for key in partitions {
                        log::info!("revoked {}-{}: dropping its schedules", key.0, key.1);
                        self.runs.remove(&key);
                    }
                }
            }
        }
    }

    fn run_for(&mut self, topic: &str, partition: i32) -> &mut PartitionRun {
        let horizon_ms = u64::try_from(self.options.horizon.as_millis()).unwrap_or(u64::MAX);
        run_for(&mut self.runs, horizon_ms, topic, partition)
    }

    fn reached_end(&mut self, partition: i32) {
        // The assignment may have arrived in this same poll round: its run must exist first.
        self.handle_assignments();
        for ((topic, p), run) in &mut self.runs {
            if *p != partition
                || run.tracker.state() != TrackerState::Loading
                || run.blocked.is_some()
            {
                continue;
            }
            // The end-of-partition event does not name the topic: the loading run of this
            // partition number that reached its end is the one.
            let at_end =
                at_partition_end(&self.consumer, topic, *p, run.next_offset, MAX_SLEEP * 10);
            if at_end == Some(true) {
                let _ = run.tracker.mark_loaded();
                log::info!(
                    "loaded {topic}-{p}: {} records read, {} schedules pending",
                    run.applied,
                    run.tracker.len()
                );
                run.last_report = None;
            }
        }
    }

    fn dispatch_due(&mut self) {
        if self.transactional {
            self.dispatch_due_transactional();
        } else {
            self.start_due_chunks();
        }
    }

    /// Sends due chunks, one per partition in turn, while the pipeline has room (see
    /// [`ChunkInFlight`]); [`Self::settle_chunks`] moves them on as the broker answers.
    fn start_due_chunks(&mut self) {
        let per_chunk = self.options.flush_batch_size / 2;
        let keys: Vec<(String, i32)> = self.runs.keys().cloned().collect();
        let mut started = true;
        while started {
            started = false;
            for key in &keys {
                if self.pipeline_full() {
                    return;
                }
                let Some(due) = self.take_due(key, per_chunk) else {
                    continue;
                };
                let round = Rounds::start(
                    &self.dispatcher,
                    &self.targets_of(&key.0, key.1, &due),
                    self.round_timeout(),
                );
                self.in_flight.push_back(ChunkInFlight {
                    partition: key.clone(),
                    due,
                    stage: ChunkStage::Targets(round),
                });
                started = true;
            }
        }
    }

    /// How long a round waits for its delivery reports: librdkafka's own `message.timeout.ms`
    /// (the dispatch timeout by default) plus [`ROUND_GRACE`] for its report to arrive.
    fn round_timeout(&self) -> Duration {
        self.options.dispatch_timeout + ROUND_GRACE
    }

    fn pipeline_full(&self) -> bool {
        let on_the_way: usize = self.in_flight.iter().map(|chunk| chunk.due.len()).sum();
        on_the_way >= PIPELINE_SCHEDULES
    }

    /// One transaction per chunk, each committed before the next is sent.
    fn dispatch_due_transactional(&mut self) {
        let per_chunk = self.options.flush_batch_size / 2;
        let keys: Vec<(String, i32)> = self.runs.keys().cloned().collect();
        for key in keys {
            while let Some(due) = self.take_due(&key, per_chunk) {
                let started = Instant::now();
                let results = self.flush_chunk_transactional(&key, &due);
                log::debug!(
                    "{}-{}: {} schedules handled in {:?}",
                    key.0,
                    key.1,
                    due.len(),
                    started.elapsed()
                );
                if !self.settle(&key, due, results) {
                    break;
                }
            }
        }
    }

    /// Up to `max` schedules of `key`'s partition due now, unless the partition is blocked or
    /// waits out a backoff.
    fn take_due(&mut self, key: &(String, i32), max: usize) -> Option<Vec<Dispatch<ProxyPayload>>> {
        let run = self.runs.get_mut(key)?;
        if run.dispatch_backoff.waiting() || run.blocked.is_some() {
            return None;
        }
        let due = run.tracker.due(now_ms(), max);
        (!due.is_empty()).then_some(due)
    }

    fn targets_of<'a>(
        &self,
        topic: &'a str,
        partition: i32,
        due: &'a [Dispatch<ProxyPayload>],
    ) -> Vec<DispatchRecord<'a>> {
        due.iter()
            .map(|dispatch| self.target_record(topic, partition, dispatch))
            .collect()
    }

    /// Moves on every chunk whose round the broker answered: acknowledged targets get their
    /// tombstones, failed tombstones are sent again, failed targets are settled at once. A
    /// chunk's schedules are marked once it and every earlier chunk of its partition settled,
    /// so a partition's marks follow dispatch order.
    fn settle_chunks(&mut self) {
        if self.in_flight.is_empty() {
            return;
        }
        let mut chunks = std::mem::take(&mut self.in_flight);
        for chunk in &mut chunks {
            self.advance_chunk(chunk);
        }
        let mut unsettled: HashSet<(String, i32)> = HashSet::new();
        for chunk in chunks {
            match chunk.stage {
                ChunkStage::Settled(results) if !unsettled.contains(&chunk.partition) => {
                    self.settle(&chunk.partition, chunk.due, results);
                }
                _ => {
                    unsettled.insert(chunk.partition.clone());
                    self.in_flight.push_back(chunk);
                }
            }
        }
    }

    fn advance_chunk(&self, chunk: &mut ChunkInFlight) {
        let rounds = self.dispatcher.context();
        let timeout = self.round_timeout();
        let (topic, partition) = (&chunk.partition.0, chunk.partition.1);
        match &chunk.stage {
            ChunkStage::Targets(round) => {
                let Some(sent) = rounds.take_finished(*round) else {
                    return;
                };
                if sent.iter().all(Result::is_ok) {
                    let records: Vec<DispatchRecord<'_>> = chunk
                        .due
                        .iter()
                        .map(|dispatch| tombstone_record(topic, partition, dispatch))
                        .collect();
                    chunk.stage = ChunkStage::Tombstones {
                        round: Rounds::start(&self.dispatcher, &records, timeout),
                        of: (0..records.len()).collect(),
                        attempt: 1,
                    };
                } else {
                    chunk.stage = ChunkStage::Settled(
                        self.settle_failed_targets(topic, partition, &chunk.due, sent),
                    );
                }
            }
            ChunkStage::Tombstones { round, of, attempt } => {
                let Some(results) = rounds.take_finished(*round) else {
                    return;
                };
                let (mut again, mut again_of) = (Vec::new(), Vec::new());
                for (&n, result) in of.iter().zip(results) {
                    let Err(e) = result else { continue };
                    let dispatch = &chunk.due[n];
                    if *attempt < TOMBSTONE_ATTEMPTS && !refused_for_good(&e) {
                        again.push(tombstone_record(topic, partition, dispatch));
                        again_of.push(n);
                    } else {
                        log::warn!(
                            "{topic}-{partition}@{}: target of {:?} dispatched but its tombstone was not written ({e}); a restart may dispatch it again",
                            dispatch.offset,
                            dispatch.key
                        );
                    }
                }
                chunk.stage = if again.is_empty() {
                    ChunkStage::Settled(
                        chunk
                            .due
                            .iter()
                            .map(|_| DispatchResult::Dispatched)
                            .collect(),
                    )
                } else {
                    ChunkStage::Tombstones {
                        round: Rounds::start(&self.dispatcher, &again, timeout),
                        of: again_of,
                        attempt: attempt + 1,
                    }
                };
            }
            ChunkStage::Settled(_) => {}
        }
    }

    /// Applies what became of a chunk's schedules to its partition's tracker (nothing when the
    /// partition was revoked meanwhile). Returns false when a transient failure put some back:
    /// the partition then waits out a backoff, counted once per failure, not once per chunk.
    fn settle(
        &mut self,
        key: &(String, i32),
        due: Vec<Dispatch<ProxyPayload>>,
        results: Vec<DispatchResult>,
    ) -> bool {
        let Some(run) = self.runs.get_mut(key) else {
            return false;
        };
        let mut transient = None;
        let mut retried = 0;
        for (dispatch, result) in due.into_iter().zip(results) {
            match result {
                DispatchResult::Dispatched => {
                    run.tracker.mark_dispatched(&dispatch.key, dispatch.offset);
                }
                DispatchResult::Failed(reason) => {
                    log::error!(
                        "{}-{}@{}: schedule {:?} failed for good: {reason}",
                        key.0,
                        key.1,
                        dispatch.offset,
                        dispatch.key
                    );
                    run.tracker.mark_failed(&dispatch.key, dispatch.offset);
                }
                DispatchResult::Retry { transient: error } => {
                    transient = transient.or(error);
                    retried += 1;
                    let _ = run.tracker.restore(dispatch);
                }
            }
        }
        match transient {
            Some(error) => {
                if !run.dispatch_backoff.waiting() {
                    let pause = run.dispatch_backoff.failed();
                    log::error!(
                        "dispatch of {retried} schedules from {}-{} failed, retrying in {pause:?}: {error}",
                        key.0,
                        key.1,
                    );
                }
                false
            }
            None => {
                run.dispatch_backoff.succeeded();
                true
            }
        }
    }

    /// The target record of `dispatch`, from the schedules partition `topic`/`partition`.
    fn target_record<'a>(
        &self,
        topic: &'a str,
        partition: i32,
        dispatch: &'a Dispatch<ProxyPayload>,
    ) -> DispatchRecord<'a> {
        let target = &dispatch.payload.target;
        let target_partition = target.partition.or_else(|| {
            target.partition_key.as_ref().and_then(|pk| {
                self.partitions.partition_for(
                    self.dispatcher.client(),
                    &target.topic,
                    pk.as_bytes(),
                    METADATA_TIMEOUT,
                )
            })
        });
        DispatchRecord::Target {
            source: source_of(topic, partition, dispatch),
            dispatch,
            partition: target_partition,
        }
    }

    /// The copy of a refused schedule for the dead-letter topic: the target message with the
    /// dispatch headers and the refusal reason, keyed by the proxy key.
    fn dead_letter_record(
        &self,
        dead_letter_topic: &str,
        topic: &str,
        partition: i32,
        dispatch: &Dispatch<ProxyPayload>,
        reason: &str,
    ) -> OutgoingRecord {
        let proxy = &dispatch.payload;
        let mut headers = Vec::with_capacity(proxy.headers.len() + 5);
        envelope::visit_dispatch_headers(
            proxy.headers.iter(),
            &source_of(topic, partition, dispatch),
            |name, value| headers.push((name.to_owned(), Some(value.to_vec()))),
        );
        headers.push((
            DEAD_LETTER_REASON_HEADER.to_owned(),
            Some(reason.as_bytes().to_vec()),
        ));
        OutgoingRecord {
            topic: dead_letter_topic.to_owned(),
            partition: None,
            key: Some(dispatch.key.as_bytes().to_vec()),
            value: proxy.value.clone(),
            headers,
            timestamp_ms: None,
        }
    }

    /// What became of each schedule of a chunk whose targets round (`sent`) had failures: a
    /// refusal is confirmed by sending the target alone; tombstones follow acknowledged targets,
    /// dead-letter copies (then tombstones) follow refused ones. Synchronous: failures are rare.
    fn settle_failed_targets(
        &self,
        topic: &str,
        partition: i32,
        due: &[Dispatch<ProxyPayload>],
        mut sent: Vec<Result<(), KafkaError>>,
    ) -> Vec<DispatchResult> {
        let timeout = self.round_timeout();
        let targets = self.targets_of(topic, partition, due);
        // The broker refuses a whole batch when it is too large, so a refusal counts only once
        // the target, sent alone, is refused again.
        for (target, result) in targets.iter().zip(sent.iter_mut()) {
            if result.as_ref().is_err_and(refused_for_good) {
                *result = send_round(&self.dispatcher, std::slice::from_ref(target), timeout)
                    .pop()
                    .unwrap_or(Ok(()));
            }
        }
        // Second round: tombstones of acknowledged targets, dead-letter copies of refused ones.
        let mut follow_ups = Vec::new();
        let mut follow_up_of = vec![None; due.len()];
        for (n, (dispatch, result)) in due.iter().zip(&sent).enumerate() {
            let record = match result {
                Ok(()) => Some(tombstone_record(topic, partition, dispatch)),
                Err(e) if refused_for_good(e) => {
                    self.options.dead_letter_topic.as_ref().map(|dlt| {
                        DispatchRecord::DeadLetter(self.dead_letter_record(
                            dlt,
                            topic,
                            partition,
                            dispatch,
                            &e.to_string(),
                        ))
                    })
                }
                Err(_) => None,
            };
            if let Some(record) = record {
                follow_up_of[n] = Some(follow_ups.len());
                follow_ups.push(record);
            }
        }
        let followed = send_round(&self.dispatcher, &follow_ups, timeout);
        // Third round: tombstones of dead-lettered schedules, once their copy is acknowledged.
        let mut tombstones = Vec::new();
        let mut tombstone_of = vec![None; due.len()];
        for (n, dispatch) in due.iter().enumerate() {
            let dead_lettered =
                sent[n].is_err() && follow_up_of[n].is_some_and(|i| followed[i].is_ok());
            if dead_lettered {
                tombstone_of[n] = Some(tombstones.len());
                tombstones.push(tombstone_record(topic, partition, dispatch));
            }
        }
        let entombed = send_round(&self.dispatcher, &tombstones, timeout);
        due.iter()
            .enumerate()
            .map(|(n, dispatch)| {
                let follow_up = follow_up_of[n].map(|i| &followed[i]);
                match (&sent[n], follow_up) {
                    (Ok(()), tombstone) => {
                        if let Some(Err(e)) = tombstone {
                            log::warn!(
                                "{topic}-{partition}@{}: target of {:?} dispatched but its tombstone was not written ({e}); a restart may dispatch it again",
                                dispatch.offset,
                                dispatch.key
                            );
                        }
                        DispatchResult::Dispatched
                    }
                    (Err(e), _) if !refused_for_good(e) => DispatchResult::Retry {
                        transient: Some(e.to_string()),
                    },
                    (Err(e), None) => DispatchResult::Failed(format!(
                        "{e} (no dead-letter topic; its proxy stays on the schedules topic)"
                    )),
                    (Err(e), Some(Ok(()))) => {
                        if let Some(Err(t)) = tombstone_of[n].map(|i| &entombed[i]) {
                            log::warn!(
                                "{topic}-{partition}@{}: tombstone of dead-lettered {:?} not written: {t}",
                                dispatch.offset,
                                dispatch.key
                            );
                        }
                        DispatchResult::Failed(format!("{e} (copied to the dead-letter topic)"))
                    }
                    (Err(e), Some(Err(d))) if refused_for_good(d) => DispatchResult::Failed(
                        format!("{e}; the dead-letter topic refused it too: {d}"),
                    ),
                    (Err(_), Some(Err(d))) => DispatchResult::Retry {
                        transient: Some(format!("dead-letter copy: {d}")),
                    },
                }
            })
            .collect()
    }

    /// Dispatches `due` in one transaction: targets and tombstones are sent together (the
    /// transaction commits a tombstone only with its target), then committed.
    fn flush_chunk_transactional(
        &self,
        (topic, partition): &(String, i32),
        due: &[Dispatch<ProxyPayload>],
    ) -> Vec<DispatchResult> {
        let (topic, partition) = (topic.as_str(), *partition);
        let retry_all = |error: String| {
            due.iter()
                .map(|_| DispatchResult::Retry {
                    transient: Some(error.clone()),
                })
                .collect()
        };
        let mut records = self.targets_of(topic, partition, due);
        records.extend(
            due.iter()
                .map(|dispatch| tombstone_record(topic, partition, dispatch)),
        );
        let mut sent = match self.in_transaction(&records) {
            Ok(sent) => sent,
            Err(error) => return retry_all(error),
        };
        if sent.iter().all(Result::is_ok) {
            return match self.finish_transaction(&[]) {
                Ok(()) => due.iter().map(|_| DispatchResult::Dispatched).collect(),
                Err(error) => retry_all(error),
            };
        }
        // What became of the tombstones does not matter: the transaction is aborted below.
        sent.truncate(due.len());
        records.truncate(due.len());
        let targets = &records;
        // A failed record makes the whole transaction abortable.
        let _ = self
            .dispatcher
            .abort_transaction(self.options.dispatch_timeout);
        if !sent
            .iter()
            .any(|result| result.as_ref().is_err_and(refused_for_good))
        {
            let error = sent
                .iter()
                .find_map(|r| r.as_ref().err())
                .map(ToString::to_string);
            return retry_all(error.unwrap_or_default());
        }
        // Settle the refused ones (dead-letter copy and tombstone in a transaction of their own)
        // and retry the rest at once: they failed only with the aborted transaction.
        let mut settled = Vec::new();
        for ((dispatch, target), result) in due.iter().zip(targets).zip(&sent) {
            if !result.as_ref().is_err_and(refused_for_good) {
                settled.push(DispatchResult::Retry { transient: None });
                continue;
            }
            // The broker refuses a whole batch when it is too large: confirm the refusal with
            // the target alone.
            let alone = match self.in_transaction(std::slice::from_ref(target)) {
                Ok(mut sent) => sent.pop().unwrap_or(Ok(())),
                Err(error) => {
                    settled.push(DispatchResult::Retry {
                        transient: Some(error),
                    });
                    continue;
                }
            };
            let e = match alone {
                Ok(()) => {
                    let tombstone = tombstone_record(topic, partition, dispatch);
                    settled.push(match self.finish_transaction(&[tombstone]) {
                        Ok(()) => DispatchResult::Dispatched,
                        Err(error) => DispatchResult::Retry {
                            transient: Some(error),
                        },
                    });
                    continue;
                }
                Err(e) => {
                    let _ = self
                        .dispatcher
                        .abort_transaction(self.options.dispatch_timeout);
                    if !refused_for_good(&e) {
                        settled.push(DispatchResult::Retry {
                            transient: Some(e.to_string()),
                        });
                        continue;
                    }
                    e
                }
            };
            settled.push(match &self.options.dead_letter_topic {
                None => DispatchResult::Failed(format!(
                    "{e} (no dead-letter topic; its proxy stays on the schedules topic)"
                )),
                Some(dlt) => {
                    let reason = e.to_string();
                    let records = [
                        DispatchRecord::DeadLetter(
                            self.dead_letter_record(dlt, topic, partition, dispatch, &reason),
                        ),
                        tombstone_record(topic, partition, dispatch),
                    ];
                    match self.in_transaction(&records).and_then(|sent| {
                        match sent.into_iter().find_map(Result::err) {
                            None => self.finish_transaction(&[]),
                            Some(d) => {
                                let _ = self
                                    .dispatcher
                                    .abort_transaction(self.options.dispatch_timeout);
                                Err(format!("dead-letter copy: {d}"))
                            }
                        }
                    }) {
                        Ok(()) => {
                            DispatchResult::Failed(format!("{e} (copied to the dead-letter topic)"))
                        }
                        Err(error) => DispatchResult::Retry {
                            transient: Some(error),
                        },
                    }
                }
            });
        }
        settled
    }

    /// Begins a transaction and sends `records` in it; the per-record results.
    fn in_transaction(
        &self,
        records: &[DispatchRecord<'_>],
    ) -> Result<Vec<Result<(), KafkaError>>, String> {
        self.dispatcher
            .begin_transaction()
            .map_err(|e| format!("begin_transaction: {e}"))?;
        Ok(send_round(&self.dispatcher, records, self.round_timeout()))
    }

    /// Sends `records` in the open transaction and commits it (aborts it on any failure).
    fn finish_transaction(&self, records: &[DispatchRecord<'_>]) -> Result<(), String> {
        let timeout = self.options.dispatch_timeout;
        let sent = send_round(&self.dispatcher, records, self.round_timeout());
        let committed = match sent.into_iter().find_map(Result::err) {
            Some(e) => Err(format!("dispatch: {e}")),
            None => self
                .dispatcher
                .commit_transaction(timeout)
                .map_err(|e| format!("commit_transaction: {e}")),
        };
        if committed.is_err() {
            let _ = self.dispatcher.abort_transaction(timeout);
        }
        committed
    }

    /// Stores, for commit, the read position of every loaded partition with nothing waiting
    /// for a retry, and commits the stored offsets every [`COMMIT_INTERVAL`].
    fn commit_progress(&mut self) {
        if self.last_commit.elapsed() < COMMIT_INTERVAL {
            return;
        }
        self.last_commit = Instant::now();
        let mut stored = false;
        for ((topic, partition), run) in &mut self.runs {
            let settled = run.tracker.state() == TrackerState::Loaded
                && run.blocked.is_none()
                && run.dispatch_backoff.retry_at.is_none()
                && run.unread.is_empty();
            if !settled || run.next_offset <= run.stored_offset {
                continue;
            }
            // librdkafka stores `offset + 1`: the next offset to read.
            match self
                .consumer
                .store_offset(topic, *partition, run.next_offset - 1)
            {
                Ok(()) => {
                    run.stored_offset = run.next_offset;
                    stored = true;
                }
                Err(e) => log::debug!("store offset {topic}-{partition}: {e}"),
            }
        }
        if stored
            && let Err(e) = self
                .consumer
                .commit_consumer_state(rdkafka::consumer::CommitMode::Async)
        {
            log::warn!("scheduler offset commit: {e}");
        }
    }

    /// Moves each partition's horizon forward and reads back the payloads now needed, retrying
    /// those that could not be read (broker unreachable) with backoff.
    fn advance_horizons(&mut self) {
        let now = now_ms();
        let keys: Vec<(String, i32)> = self.runs.keys().cloned().collect();
        for key in keys {
            let Some(run) = self.runs.get_mut(&key) else {
                continue;
            };
            if let Ok(entering) = run.tracker.advance_horizon(now)
                && !entering.is_empty()
            {
                log::info!(
                    "{}-{}: reading back {} schedules entering the horizon",
                    key.0,
                    key.1,
                    entering.len()
                );
                run.unread.extend(entering);
            }
            if run.unread.is_empty() || run.read_back_backoff.waiting() {
                continue;
            }
            let mut fetches = std::mem::take(&mut run.unread);
            fetches.sort_unstable_by_key(|fetch| fetch.offset);
            fetches.dedup_by_key(|fetch| fetch.offset);
            let offsets: Vec<i64> = fetches
                .iter()
                .filter_map(|f| i64::try_from(f.offset).ok())
                .collect();
            let mut read = read_offsets(&self.fetch_settings, &key.0, key.1, &offsets);
            let Some(run) = self.runs.get_mut(&key) else {
                continue;
            };
            for fetch in fetches {
                let offset = i64::try_from(fetch.offset).unwrap_or(i64::MAX);
                let gone = match read.records.remove(&fetch.offset) {
                    Some(Some(payload)) => {
                        run.tracker
                            .provide_payload(&fetch.key, fetch.offset, payload);
                        continue;
                    }
                    Some(None) => "the record read back is no longer this schedule",
                    // Read past it: compaction removed it, so a later record replaced it.
                    None if read.covered.is_some_and(|covered| covered >= offset) => {
                        "it is gone from the topic"
                    }
                    None => {
                        run.unread.push(fetch);
                        continue;
                    }
                };
                log::warn!(
                    "{}-{}@{}: schedule {:?} skipped: {gone}",
                    key.0,
                    key.1,
                    fetch.offset,
                    fetch.key
                );
                let _ = run
                    .tracker
                    .apply(fetch.offset, &fetch.key, ScheduleRecord::Cancel);
                run.tracker.record_skipped(fetch.offset);
            }
            if run.unread.is_empty() {
                run.read_back_backoff.succeeded();
            } else {
                let pause = run.read_back_backoff.failed();
                log::warn!(
                    "{}-{}: {} schedules could not be read back yet, retrying in {pause:?}",
                    key.0,
                    key.1,
                    run.unread.len()
                );
            }
        }
    }

    /// Sends the state report of every partition whose interval passed (or all, when `force`).
    fn report_states(&mut self, force: bool) {
        let now = Instant::now();
        let interval = self.options.state_interval;
        let postfix = self.options.states_postfix.clone();
        for ((topic, partition), run) in &mut self.runs {
            let due = force
                || run
                    .last_report
                    .is_none_or(|last| now.duration_since(last) >= interval);
            if !due {
                continue;
            }
            run.last_report = Some(now);
            let report = run.tracker.state_report(now_ms());
            let payload = match encode_document(&report, 6) {
                Ok(payload) => payload,
                Err(e) => {
                    log::error!("state report of {topic}-{partition} is invalid, not sent: {e}");
                    continue;
                }
            };
            let states_topic = format!("{topic}{postfix}");
            let key = format!("{}_state", report.state.as_str());
            let record = BaseRecord::to(&states_topic)
                .partition(*partition)
                .key(key.as_bytes())
                .payload(&payload)
                .headers(
                    rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
                        key: "zlib",
                        value: Some("true"),
                    }),
                );
            if let Err((e, _)) = self.reporter.send(record) {
                log::warn!("state report for {states_topic}-{partition} not sent: {e}");
            }
        }
    }

    /// Stops within [`SHUTDOWN_BUDGET`] (and the close's grace) whatever the broker does:
    /// chunks on their way settle, final state reports and dispatches are flushed, the status
    /// is published, then the offsets are committed and the group left.
    fn shutdown(mut self, status: &Mutex<DaemonStatus<PartitionStatus>>) {
        let deadline = Instant::now() + SHUTDOWN_BUDGET;
        self.drain_pipeline(deadline);
        for run in self.runs.values_mut() {
            run.tracker.stop();
        }
        self.report_states(true);
        flush_before(
            &self.reporter,
            deadline,
            "scheduler",
            "final state report(s)",
        );
        flush_before(
            &self.dispatcher,
            deadline,
            "scheduler",
            "dispatched message(s)",
        );
        publish(status, self.status());
        let applied_any = !self.runs.is_empty();
        let SchedulerLoop { consumer, .. } = self;
        let final_commit = move |consumer: &BaseConsumer<GroupContext>| {
            if applied_any {
                consumer.commit_consumer_state(rdkafka::consumer::CommitMode::Sync)
            } else {
                Ok(())
            }
        };
        if let Some(Err(e)) = commit_and_close(consumer, final_commit, deadline, "scheduler") {
            log::debug!("final offset commit: {e}");
        }
        log::info!("scheduler stopped");
    }

    /// Lets the chunks on their way settle until `deadline`, so acknowledged targets get their
    /// tombstones before the daemon stops.
    fn drain_pipeline(&mut self, deadline: Instant) {
        while !self.in_flight.is_empty() && Instant::now() < deadline {
            self.dispatcher.context().wait_for_progress(MAX_SLEEP);
            self.settle_chunks();
        }
        if !self.in_flight.is_empty() {
            let schedules: usize = self.in_flight.iter().map(|chunk| chunk.due.len()).sum();
            log::warn!(
                "stopping with {schedules} schedules not confirmed dispatched; a restart may dispatch them again"
            );
        }
    }

    fn status(&self) -> DaemonStatus<PartitionStatus> {
        let context = self.consumer.context();
        let rows = self
            .runs
            .iter()
            .map(|((topic, partition), run)| {
                let report = run.tracker.state_report(now_ms());
                PartitionStatus {
                    topic: topic.clone(),
                    partition: *partition,
                    state: if run.blocked.is_some() {
                        "blocked"
                    } else {
                        run.tracker.state().as_str()
                    },
                    pending: run.tracker.len(),
                    dispatched: report.dispatched,
                    skipped: report.skipped_records,
                    failed: report.failed,
                    applied: run.applied,
                    broker: context.offsets(topic, *partition),
                }
            })
            .collect();
        context.status(rows)
    }
}

/// Why a schedules record cannot be applied.
#[derive(Debug)]
enum RecordProblem {
    /// Malformed or foreign: counted and skipped.
    Bad(String),
    /// Written with a newer schema: the partition stops until the daemon is upgraded.
    NewerSchema(String),
}

impl std::fmt::Display for RecordProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordProblem::Bad(reason) | RecordProblem::NewerSchema(reason) => f.write_str(reason),
        }
    }
}

/// Decodes a schedules-topic record into the tracker's terms, reading it in place: a tombstone
/// or cancel copies nothing, a schedule copies its payload and headers.
fn decode_message<M: Message>(
    message: &M,
) -> Result<(&str, ScheduleRecord<ProxyPayload>), RecordProblem> {
    let key = message
        .key()
        .and_then(|k| std::str::from_utf8(k).ok())
        .filter(|k| !k.is_empty())
        .ok_or_else(|| RecordProblem::Bad("missing or non-UTF-8 key".to_owned()))?;
    let headers: Vec<(&str, &[u8])> = message
        .headers()
        .map(|headers| {
            headers
                .iter()
                .map(|header| (header.key, header.value.unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let parsed = envelope::parse_proxy_headers(&headers).map_err(|e| match e {
        CoreError::UnsupportedVersion { .. } => RecordProblem::NewerSchema(e.to_string()),
        e => RecordProblem::Bad(e.to_string()),
    })?;
    let decoded = match parsed {
        ProxyRecord::Schedule { epoch_secs, target } => ScheduleRecord::Schedule {
            epoch_secs,
            payload: ProxyPayload {
                value: message.payload().map(<[u8]>::to_vec),
                headers: PackedHeaders::pack(&headers),
                target,
            },
        },
        ProxyRecord::Cancel => ScheduleRecord::Cancel,
        ProxyRecord::Tombstone { source_offset } => ScheduleRecord::Tombstone { source_offset },
    };
    Ok((key, decoded))
}

/// The run of `topic`/`partition`, created (loading) when the partition is new.
fn run_for<'a>(
    runs: &'a mut BTreeMap<(String, i32), PartitionRun>,
    horizon_ms: u64,
    topic: &str,
    partition: i32,
) -> &'a mut PartitionRun {
    runs.entry((topic.to_owned(), partition))
        .or_insert_with(|| {
            let mut tracker = ScheduleTracker::new(TrackerConfig { horizon_ms }, now_ms());
            // A fresh tracker always accepts the move to loading.
            let _ = tracker.mark_loading();
            PartitionRun {
                tracker,
                next_offset: 0,
                stored_offset: -1,
                applied: 0,
                last_report: None,
                dispatch_backoff: Backoff::default(),
                blocked: None,
                unread: Vec::new(),
                read_back_backoff: Backoff::default(),
            }
        })
}

/// Applies one schedules-topic record to its partition's run. Returns the partition to pause
/// when the record has a newer schema (the partition then stops until the daemon is upgraded).
fn apply<M: Message>(
    runs: &mut BTreeMap<(String, i32), PartitionRun>,
    horizon_ms: u64,
    message: &M,
) -> Option<(String, i32)> {
    let (topic, partition) = (message.topic(), message.partition());
    let decoded = decode_message(message).and_then(|(key, decoded)| {
        check_epoch(&decoded, now_ms())?;
        Ok((key, decoded))
    });
    let run = run_for(runs, horizon_ms, topic, partition);
    if run.blocked.is_some() {
        // Fetched before the pause took effect; read again after an upgrade.
        return None;
    }
    let offset = u64::try_from(message.offset()).unwrap_or(0);
    if let Err(RecordProblem::NewerSchema(reason)) = &decoded {
        log::error!(
            "{topic}-{partition}@{offset}: {reason}; partition stopped (nothing applied or \
             dispatched from here) until this daemon is upgraded, as Karafka does"
        );
        run.blocked = Some(reason.clone());
        return Some((topic.to_owned(), partition));
    }
    run.next_offset = message.offset() + 1;
    run.applied += 1;
    if run.tracker.state() == TrackerState::Loading && run.applied % PROGRESS_EVERY == 0 {
        log::info!("loading {topic}-{partition}: {} records read", run.applied);
    }
    match decoded {
        Ok((key, decoded)) => {
            if let Err(e) = run.tracker.apply(offset, key, decoded) {
                log::warn!("{topic}-{partition}@{offset}: skipped: {e}");
                run.tracker.record_skipped(offset);
            }
        }
        Err(e) => {
            log::warn!("{topic}-{partition}@{offset}: skipped a bad schedules record: {e}");
            run.tracker.record_skipped(offset);
        }
    }
    let written_ms = message
        .timestamp()
        .to_millis()
        .and_then(|ms| u64::try_from(ms).ok())
        .unwrap_or(0);
    if run.tracker.state() == TrackerState::Loading && run.tracker.loaded_by_record_time(written_ms)
    {
        log::info!(
            "loaded {topic}-{partition}: records written after the load started reached \
             ({} read, {} schedules pending; the partition end was not reached)",
            run.applied,
            run.tracker.len()
        );
        run.last_report = None;
    }
    None
}

/// Header of a dead-letter copy naming why the target refused it.
pub const DEAD_LETTER_REASON_HEADER: &str = "schedule_dead_letter_reason";

/// Karafka's read-side epoch bounds (see `validate_stored_epoch`) applied to a decoded schedule.
fn check_epoch(decoded: &ScheduleRecord<ProxyPayload>, now_ms: u64) -> Result<(), RecordProblem> {
    if let ScheduleRecord::Schedule { epoch_secs, .. } = decoded {
        let now_secs = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
        validate_stored_epoch(*epoch_secs, now_secs)
            .map_err(|e| RecordProblem::Bad(e.to_string()))?;
    }
    Ok(())
}

fn source_of<'a>(
    topic: &'a str,
    partition: i32,
    dispatch: &'a Dispatch<ProxyPayload>,
) -> ProxySource<'a> {
    ProxySource {
        topic,
        partition,
        offset: dispatch.offset,
        key: &dispatch.key,
    }
}

/// The tombstone that marks `dispatch`'s proxy as dispatched (same key and partition).
fn tombstone_record<'a>(
    topic: &'a str,
    partition: i32,
    dispatch: &'a Dispatch<ProxyPayload>,
) -> DispatchRecord<'a> {
    DispatchRecord::Tombstone {
        source: source_of(topic, partition, dispatch),
        dispatch,
    }
}

/// A record the dispatcher produces. Targets and tombstones are written straight from their
/// schedule's proxy data into librdkafka's message (headers included), with no owned copy:
/// they are most of what the daemon sends.
enum DispatchRecord<'a> {
    /// The target message of `dispatch`, to `partition` of its topic (None: the partitioner's).
    Target {
        source: ProxySource<'a>,
        dispatch: &'a Dispatch<ProxyPayload>,
        partition: Option<i32>,
    },
    /// The tombstone retiring the proxy of `dispatch` (same key and partition, null value).
    Tombstone {
        source: ProxySource<'a>,
        dispatch: &'a Dispatch<ProxyPayload>,
    },
    /// The dead-letter copy of a schedule whose target was refused for good.
    DeadLetter(OutgoingRecord),
}

impl RoundRecord for DispatchRecord<'_> {
    fn enqueue(
        &self,
        producer: &ThreadedProducer<Rounds>,
        sequence: usize,
    ) -> Result<(), KafkaError> {
        let (record, headers) = match self {
            DispatchRecord::DeadLetter(record) => return enqueue_with(producer, record, sequence),
            DispatchRecord::Target {
                source,
                dispatch,
                partition,
            } => {
                let proxy = &dispatch.payload;
                let target = &proxy.target;
                let mut record = BaseRecord::with_opaque_to(&target.topic, sequence);
                if let Some(key) = &target.key {
                    record = record.key(key.as_bytes());
                }
                if let Some(value) = &proxy.value {
                    record = record.payload(value.as_slice());
                }
                if let Some(partition) = partition {
                    record = record.partition(*partition);
                }
                let mut headers = HeaderBuilder::new(proxy.headers.len() + 4);
                envelope::visit_dispatch_headers(proxy.headers.iter(), source, |name, value| {
                    headers.add(name, value);
                });
                (record, headers)
            }
            DispatchRecord::Tombstone { source, dispatch } => {
                let record = BaseRecord::with_opaque_to(source.topic, sequence)
                    .key(dispatch.key.as_bytes())
                    .partition(source.partition);
                let proxy_headers = &dispatch.payload.headers;
                let mut headers = HeaderBuilder::new(proxy_headers.len() + 3);
                envelope::visit_tombstone_headers(
                    proxy_headers.iter(),
                    source.offset,
                    |name, value| {
                        headers.add(name, value);
                    },
                );
                (record, headers)
            }
        };
        send_waiting_for_room(producer, record.headers(headers.build()))
    }
}

/// librdkafka's header list, filled one borrowed header at a time (librdkafka copies each).
struct HeaderBuilder(Option<OwnedHeaders>);

impl HeaderBuilder {
    fn new(capacity: usize) -> Self {
        HeaderBuilder(Some(OwnedHeaders::new_with_capacity(capacity)))
    }

    fn add(&mut self, name: &str, value: &[u8]) {
        self.0 = self.0.take().map(|headers| {
            headers.insert(Header {
                key: name,
                value: Some(value),
            })
        });
    }

    fn build(self) -> OwnedHeaders {
        self.0.unwrap_or_default()
    }
}

/// Whether retrying can never deliver a record that failed with `error`: it is too large, its
/// topic or partition is illegal or missing, or the producer is not allowed to write there.
fn refused_for_good(error: &KafkaError) -> bool {
    use RDKafkaErrorCode as Code;
    matches!(
        error.rdkafka_error_code(),
        Some(
            Code::MessageSizeTooLarge
                | Code::MessageBatchTooLarge
                | Code::InvalidMessageSize
                | Code::InvalidTopic
                | Code::InvalidRecord
                | Code::PolicyViolation
                | Code::TopicAuthorizationFailed
                | Code::ClusterAuthorizationFailed
                | Code::UnknownPartition
                | Code::UnknownTopic
        )
    )
}

/// What a read-back found: the records wanted (the proxy data of each that is a schedule), and
/// the highest offset known to be read past (`i64::MAX` once the end of the partition was
/// reached), if any.
struct ReadBack {
    records: HashMap<u64, Option<ProxyPayload>>,
    covered: Option<i64>,
}

/// Reads the records at `offsets` of one partition (sorted ascending), for payloads entering the
/// horizon. Records that cannot be read within [`READ_BACK_TIMEOUT`] are simply missing.
fn read_offsets(
    settings: &ClientSettings,
    topic: &str,
    partition: i32,
    offsets: &[i64],
) -> ReadBack {
    let mut read = ReadBack {
        records: HashMap::new(),
        covered: None,
    };
    let Some(&first) = offsets.first() else {
        return read;
    };
    let mut fetch_settings = settings.clone();
    fetch_settings.set("group.id", "ferrokafka-scheduler-fetch");
    // A static member id here would fence the daemon's own group member.
    fetch_settings.remove("group.instance.id");
    // The daemon's statistics come from its group consumer; this one's would only be logged.
    fetch_settings.remove("statistics.interval.ms");
    fetch_settings.set("enable.partition.eof", "true");
    let consumer: BaseConsumer<EndIsExpected> = match oauth::create(
        &fetch_settings.to_client_config(),
        EndIsExpected {
            watch: None,
            tokens: fetch_settings.token_refresh(),
        },
    ) {
        Ok(consumer) => consumer,
        Err(e) => {
            log::error!("cannot create the payload fetch consumer: {e}");
            return read;
        }
    };
    let wanted: std::collections::HashSet<i64> = offsets.iter().copied().collect();
    let mut tpl = TopicPartitionList::new();
    if tpl
        .add_partition_offset(topic, partition, Offset::Offset(first))
        .and_then(|()| consumer.assign(&tpl))
        .is_err()
    {
        return read;
    }
    let deadline = Instant::now() + READ_BACK_TIMEOUT;
    let last = offsets.last().copied().unwrap_or(first);
    while Instant::now() < deadline {
        match consumer.poll(MAX_SLEEP) {
            Some(Ok(message)) => {
                let offset = message.offset();
                if wanted.contains(&offset) {
                    let payload =
                        decode_message(&message)
                            .ok()
                            .and_then(|(_, decoded)| match decoded {
                                ScheduleRecord::Schedule { payload, .. } => Some(payload),
                                _ => None,
                            });
                    read.records.insert(offset as u64, payload);
                }
                read.covered = Some(offset);
                if offset >= last {
                    break;
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {
                read.covered = Some(i64::MAX);
                break;
            }
            Some(Err(e)) => log::warn!("payload fetch {topic}-{partition}: {e}"),
            None => {}
        }
    }
    read
}
