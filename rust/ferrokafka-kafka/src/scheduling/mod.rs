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
//! chunks are pipelined: up to `dispatcher::PIPELINE_SCHEDULES` schedules are on their way at
//! once, a chunk's tombstones are sent only once every target of that chunk was acknowledged, and
//! a partition's schedules are marked dispatched in the order they were sent. With transactions
//! the chunks due, up to `PIPELINE_SCHEDULES` schedules, share one transaction holding their
//! targets and their tombstones, all sent before the first acknowledgement is awaited and
//! committed once every record is acknowledged; the next transaction begins after that commit
//! (one producer has one open transaction). A target the broker
//! refuses for good (too large, illegal or unauthorised topic) is counted as `failed`, logged
//! with its key and, when `dead_letter_topic` is set, copied there before its tombstone is
//! written; it never holds up the schedules behind it. Transient failures are restored and
//! retried with exponential backoff. Offsets read and acted upon are committed every
//! `commit::COMMIT_INTERVAL` so the group's lag is meaningful while running.
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
//!
//! Rooms: this file holds the daemon thread (its clients, its loop and its stop) and the state
//! of a partition's run; `options.rs` the settings; `loading.rs` the replay of the schedules
//! topic (decoding records, rebalances, the partition end); `read_back.rs` the read-back of
//! far-future payloads; `dispatcher.rs` the at-least-once pipeline of chunks; `records.rs` the
//! records it writes (targets, tombstones, dead-letter copies); `refused.rs` a chunk whose targets
//! failed; `transactions.rs` the transactional dispatch; `rounds.rs` the delivery results per
//! record; `commit.rs` the offsets; `status.rs` the state reports and `status()`;
//! `report_sample.rs` its part of a process report.

mod commit;
mod dispatcher;
mod loading;
mod options;
mod read_back;
mod records;
mod refused;
mod report_sample;
mod rounds;
mod status;
mod takeover;
mod transactions;

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrokafka_core::codec::envelope::TargetAddress;
use ferrokafka_core::codec::state::TrackerState;
use ferrokafka_core::schedule::{PayloadFetch, ScheduleTracker, TrackerCounts};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::Producer;

use crate::bounded_commit::{Offsets, commit_before};
use crate::config::{ClientRole, ClientSettings};
use crate::connection_failure::{ConnectionWatch, init_transactions};
use crate::daemon::{
    Daemon, DaemonStatus, FlushTracker, GroupContext, SHUTDOWN_BUDGET, commit_and_close,
    flush_before, group_consumer_settings, now_ms, publish,
};
use crate::error::{KafkaIoError, KafkaResult};
use crate::oauth;
use crate::packed_headers::PackedHeaders;
use crate::partitioner::PartitionCounts;
use crate::polled_producer::PolledProducer;
use crate::report_sample::GroupMember;
use dispatcher::ChunkInFlight;
use report_sample::report_sample;
use rounds::Rounds;
use takeover::Renewal;

pub use options::SchedulerOptions;
pub use refused::DEAD_LETTER_REASON_HEADER;
pub use status::PartitionStatus;

/// Longest the daemon waits in one poll, so stop requests and due schedules are noticed quickly.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// First pause before retrying after a transient failure (dispatch or read-back); doubled after
/// each further failure up to [`MAX_RETRY_PAUSE`].
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(200);
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(10);

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
    /// Why the last state report could not be sent, while that lasts: said once, not every
    /// `state_interval` for as long as it lasts (a states topic with fewer partitions than the
    /// schedules topic after partitions were added: for ever).
    state_report_failing: Option<String>,
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

/// The running daemon; see the module docs.
pub type Scheduler = Daemon<DaemonStatus<PartitionStatus>>;

/// The producer that dispatches, made of `settings`; a transactional one has its transactions
/// initialised (within `timeout`). `stop` is the daemon's stop flag.
fn create_dispatcher(
    settings: &ClientSettings,
    stop: &Arc<AtomicBool>,
    timeout: Duration,
) -> KafkaResult<PolledProducer<Rounds>> {
    let dispatcher: PolledProducer<Rounds> = oauth::create_client(
        &settings.to_client_config(),
        Rounds::new(
            ConnectionWatch::new(settings),
            settings.token_refresh(),
            Arc::clone(stop),
        ),
        "create dispatch producer",
    )?;
    if settings.get("transactional.id").is_some() {
        init_transactions(
            &dispatcher,
            dispatcher.context().watch(),
            timeout,
            settings.bootstrap().ok(),
        )?;
    }
    Ok(dispatcher)
}

impl Scheduler {
    /// Validates the settings, creates the Kafka clients and starts the daemon thread.
    pub fn start(settings: ClientSettings, options: SchedulerOptions) -> KafkaResult<Self> {
        options.validate()?;
        let member = GroupMember::new(&options.group_id, &settings);
        let stop = Arc::new(AtomicBool::new(false));
        let daemon = SchedulerLoop::new(settings, options, Arc::clone(&stop))?;
        Daemon::spawn(
            "ferrokafka-scheduler",
            stop,
            move |status| report_sample(&member, status),
            move |status| daemon.run(status),
        )
    }
}

struct SchedulerLoop {
    consumer: BaseConsumer<GroupContext>,
    dispatcher: PolledProducer<Rounds>,
    reporter: PolledProducer<FlushTracker>,
    /// What `dispatcher` was made of, and the daemon's stop flag its context holds: a new
    /// instance takes over from one that could not end a transaction (`takeover`).
    dispatch_settings: ClientSettings,
    stop: Arc<AtomicBool>,
    /// Set when the dispatcher left a transaction it could not end (an abort not answered or
    /// refused, a failed instance): a new instance must take over before the next transaction
    /// begins, tried again from that instant on (`takeover`).
    renewal_due: Cell<Option<Renewal>>,
    /// At-least-once chunks on their way, oldest first (transactional chunks are synchronous).
    in_flight: VecDeque<ChunkInFlight>,
    fetch_settings: ClientSettings,
    transactional: bool,
    options: SchedulerOptions,
    partitions: PartitionCounts,
    runs: BTreeMap<(String, i32), PartitionRun>,
    /// What the runs of partitions revoked from this daemon counted, for their next run here.
    earlier_counts: HashMap<(String, i32), TrackerCounts>,
    last_commit: Instant,
}

impl SchedulerLoop {
    fn new(
        settings: ClientSettings,
        options: SchedulerOptions,
        stop: Arc<AtomicBool>,
    ) -> KafkaResult<Self> {
        settings.bootstrap()?;
        let transactional = settings.get("transactional.id").is_some();
        let mut consumer_settings = group_consumer_settings(&settings, &options.group_id);
        consumer_settings.set_default("isolation.level", "read_committed");
        // Offsets are stored once acted upon (see `commit_progress`), not when merely polled.
        consumer_settings.set("enable.auto.offset.store", "false");
        let consumer: BaseConsumer<GroupContext> = oauth::create_client(
            &consumer_settings.to_client_config(),
            GroupContext::new("scheduler", &settings, true),
            "create scheduler consumer",
        )?;
        let topics: Vec<&str> = options
            .schedules_topics
            .iter()
            .map(String::as_str)
            .collect();
        consumer
            .subscribe(&topics)
            .map_err(KafkaIoError::subscribing("the schedules topics", &topics))?;
        let mut dispatch_settings = settings.for_role(ClientRole::Producer);
        // Chunks follow each other closely (pipelined, or sent together in one transaction), so
        // a short linger packs them into fewer, fuller produce requests: in a burst of 100,000
        // that cut the client CPU per dispatch by about a fifth against linger.ms 0, and made
        // the transactional burst 1.2-1.3x faster (benches/RESULTS.md), for at most 5 ms more
        // per dispatch (per transaction, whose last records are awaited before its commit).
        dispatch_settings.set_default("linger.ms", "5");
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
        let dispatcher = create_dispatcher(&dispatch_settings, &stop, options.dispatch_timeout)?;
        let report_settings = settings.for_plain_producer();
        let reporter: PolledProducer<FlushTracker> = oauth::create_client(
            &report_settings.to_client_config(),
            FlushTracker::new(settings.token_refresh()),
            "create state report producer",
        )?;
        Ok(SchedulerLoop {
            consumer,
            dispatcher,
            reporter,
            dispatch_settings,
            stop,
            renewal_due: Cell::new(None),
            in_flight: VecDeque::new(),
            fetch_settings: consumer_settings,
            transactional,
            partitions: PartitionCounts::new(options.partition_key_hashing),
            options,
            runs: BTreeMap::new(),
            earlier_counts: HashMap::new(),
            last_commit: Instant::now(),
        })
    }

    /// Dispatches until the scheduler's stop flag (held by its `Rounds`) is set, then shuts
    /// down; or ends with the error of a consumer whose connection is refused before it ever
    /// worked ([`GroupContext::poll_error`]).
    fn run(mut self, status: &Mutex<DaemonStatus<PartitionStatus>>) -> KafkaResult<()> {
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
        while !self.dispatcher.context().stopping() {
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
        let final_commit = move |consumer: &BaseConsumer<GroupContext>, by| {
            if applied_any {
                commit_before(consumer, Offsets::Stored, by)
            } else {
                Ok(())
            }
        };
        if let Some(Err(e)) = commit_and_close(consumer, final_commit, deadline, "scheduler") {
            log::debug!("final offset commit: {e}");
        }
        log::info!("scheduler stopped");
    }
}
