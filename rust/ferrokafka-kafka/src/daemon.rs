//! Plumbing shared by the daemons that own a group consumer and produce synchronously (the
//! scheduler and the redelivery tracker).
//!
//! Threading: [`GroupContext::rebalance`] and [`FlushTracker::delivery`] run on librdkafka
//! threads; they only record events under a mutex (and signal a condvar) for the daemon thread
//! ([`GroupContext::take_events`], [`send_all`]). No Python ever runs here. librdkafka's
//! statistics reach [`GroupContext`] inside the consumer's poll, on the daemon thread, which
//! publishes them with its partitions' rows ([`DaemonStatus`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::client::log_unless_end;
use crate::config::{ClientRole, ClientSettings};
use crate::connection_failure::ConnectionWatch;
use crate::error::{KafkaIoError, KafkaResult};
use crate::oauth::{TokenRefresh, answer_token_refresh};
use crate::record::OutgoingRecord;
use crate::statistics::{BrokerOffsets, GroupStatistics, KeptStatistics};

/// Wall-clock milliseconds since the epoch (0 if the clock is before 1970).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A running daemon (the scheduler, the redelivery tracker): its thread, its stop flag and the
/// status `S` it publishes after each loop. Dropping it leaves the thread running; stop it with
/// [`Daemon::request_stop`] and [`Daemon::wait`].
pub struct Daemon<S> {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    status: Arc<Mutex<S>>,
    /// Why the daemon ended on its own, if it did (see [`Daemon::failure`]).
    failure: Arc<Mutex<Option<KafkaIoError>>>,
}

impl<S: Clone + Default + Send + 'static> Daemon<S> {
    /// Starts `run(stop, status)` on a thread called `name`; `run` returns once `stop` is set,
    /// or with the error that ended the daemon before.
    pub(crate) fn spawn(
        name: &str,
        run: impl FnOnce(&AtomicBool, &Mutex<S>) -> KafkaResult<()> + Send + 'static,
    ) -> KafkaResult<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let status = Arc::new(Mutex::new(S::default()));
        let failure = Arc::new(Mutex::new(None));
        let (thread_stop, thread_status) = (Arc::clone(&stop), Arc::clone(&status));
        let thread_failure = Arc::clone(&failure);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                if let Err(e) = run(&thread_stop, &thread_status) {
                    *thread_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
            })
            .map_err(|e| KafkaIoError::InvalidArgument(format!("cannot start daemon: {e}")))?;
        Ok(Daemon {
            stop,
            thread: Mutex::new(Some(thread)),
            status,
            failure,
        })
    }

    /// The error that ended the daemon without a stop request (its settings cannot work, see
    /// [`GroupContext::poll_error`]); None while it runs or after it was stopped.
    pub fn failure(&self) -> Option<KafkaIoError> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets the stop flag; the daemon finishes its loop and shuts down (final reports,
    /// offsets committed, group left). Returns at once.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Waits up to `wait` for the thread to end; true once it has.
    pub fn wait(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut slot = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match slot.as_ref() {
                None => return true,
                Some(handle) if handle.is_finished() => {
                    if let Some(handle) = slot.take() {
                        let _ = handle.join();
                    }
                    return true;
                }
                Some(_) if Instant::now() >= deadline => return false,
                Some(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// The status as of the daemon's last loop.
    pub fn status(&self) -> S {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl<S: Clone + Default + Send + std::fmt::Debug + 'static> std::fmt::Debug for Daemon<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

/// What a daemon publishes after each loop (see [`Daemon::status`]): a row `P` per assigned
/// partition and its group consumer's state from librdkafka's latest statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonStatus<P> {
    /// One row per assigned partition.
    pub partitions: Vec<P>,
    /// The consumer group's state; `None` before the first statistics.
    pub group: Option<GroupStatistics>,
    /// Bytes per second received from and sent to the brokers by the group consumer between
    /// the latest two statistics; `None` before the second.
    pub transfer_rates: Option<(u64, u64)>,
}

impl<P> Default for DaemonStatus<P> {
    fn default() -> Self {
        DaemonStatus {
            partitions: Vec::new(),
            group: None,
            transfer_rates: None,
        }
    }
}

/// Most time a daemon's shutdown waits for the broker, every step together (dispatches on their
/// way, final state reports, flushes): a stop ends within seconds whatever the broker does, so
/// `ferrokafka scheduler` and `ferrokafka redelivery` exit soon after SIGINT/SIGTERM even with
/// the broker gone. What is not acknowledged by then is logged and dropped.
pub(crate) const SHUTDOWN_BUDGET: Duration = Duration::from_secs(3);

/// Waits until `deadline` for `producer` to deliver what it holds; logs at WARNING how many of
/// `what` the broker did not acknowledge by then (librdkafka purges them when the producer is
/// dropped).
pub(crate) fn flush_before<C: ProducerContext>(
    producer: &ThreadedProducer<C>,
    deadline: Instant,
    daemon: &str,
    what: &str,
) {
    if producer
        .flush(deadline.saturating_duration_since(Instant::now()))
        .is_err()
    {
        log::warn!(
            "{daemon} stopping: {} {what} not acknowledged by the broker within {}s, dropped",
            producer.in_flight_count(),
            SHUTDOWN_BUDGET.as_secs()
        );
    }
}

/// Least time [`commit_and_close`] waits even when the other shutdown steps used the whole
/// [`SHUTDOWN_BUDGET`]: with a broker that answers, a commit and a group leave take milliseconds.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// What the thread of [`commit_and_close`] reports, in this order.
enum ClosingStep {
    Committed(Result<(), KafkaError>),
    Closed,
}

/// Runs `final_commit` (a synchronous offset commit) and then closes `consumer` (leaving its
/// group) on a thread of their own, waiting for them until `deadline` or [`CLOSE_GRACE`] from
/// now, whichever is later. Returns the commit's result, None if it did not end in time.
///
/// Why a thread: librdkafka bounds neither step. With the coordinator gone, a synchronous commit
/// returns only once the group session times out, and rdkafka's consumer drop polls until the
/// close completes, so a daemon stopping in an outage would outlive its signal by the session
/// timeout and more. What has not ended by the deadline is logged and left to end in the
/// background; the group's session timeout frees the partitions, and the records after the last
/// commit are read again by the next owner (both daemons rebuild their state from the topic).
pub(crate) fn commit_and_close<C: ConsumerContext + 'static>(
    consumer: BaseConsumer<C>,
    final_commit: impl FnOnce(&BaseConsumer<C>) -> Result<(), KafkaError> + Send + 'static,
    deadline: Instant,
    daemon: &str,
) -> Option<Result<(), KafkaError>> {
    let deadline = deadline.max(Instant::now() + CLOSE_GRACE);
    let (steps, step) = std::sync::mpsc::channel();
    let closer = std::thread::Builder::new()
        .name(format!("{daemon} close"))
        .spawn(move || {
            let _ = steps.send(ClosingStep::Committed(final_commit(&consumer)));
            drop(consumer);
            let _ = steps.send(ClosingStep::Closed);
        });
    if let Err(e) = closer {
        log::warn!(
            "{daemon} stopping: cannot start the closing thread ({e}); offsets not committed"
        );
        return None;
    }
    let next = || step.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    let committed = match next() {
        Ok(ClosingStep::Committed(result)) => result,
        _ => {
            log::warn!(
                "{daemon} stopping: the broker did not answer the final offset commit in time; \
                 left to finish in the background (the next owner of its partitions reads \
                 again from the last commit)"
            );
            return None;
        }
    };
    if !matches!(next(), Ok(ClosingStep::Closed)) {
        log::warn!(
            "{daemon} stopping: the broker did not answer the group leave in time; left to \
             finish in the background (the group's session timeout frees the partitions)"
        );
    }
    Some(committed)
}

/// Publishes `status` for [`Daemon::status`].
pub(crate) fn publish<S>(slot: &Mutex<S>, status: S) {
    *slot.lock().unwrap_or_else(|p| p.into_inner()) = status;
}

/// Refuses an empty `group.id`, which librdkafka would only report as a consumer without a
/// queue ("rdkafka consumer queue not available").
pub(crate) fn require_group_id(group_id: &str) -> KafkaResult<()> {
    if group_id.is_empty() {
        return Err(KafkaIoError::InvalidArgument(
            "group_id must be a non-empty consumer group name".to_owned(),
        ));
    }
    Ok(())
}

/// A daemon's group consumer settings: `settings` without producer-only keys, in `group_id`,
/// committing itself, told about partition ends, starting at the earliest offset when the group
/// has none.
pub(crate) fn group_consumer_settings(settings: &ClientSettings, group_id: &str) -> ClientSettings {
    let mut consumer = settings.for_role(ClientRole::Consumer);
    consumer.set("group.id", group_id);
    consumer.set("enable.auto.commit", "false");
    consumer.set("enable.partition.eof", "true");
    consumer.set("auto.offset.reset", "earliest");
    // librdkafka's 45 s default would leave a dead daemon's partitions idle that long.
    consumer.set_default("session.timeout.ms", DAEMON_SESSION_TIMEOUT_MS);
    // The group's state and the partitions' offsets in `status` and in process reports.
    consumer.set_default("statistics.interval.ms", DAEMON_STATISTICS_INTERVAL_MS);
    consumer
}

/// A daemon's producer settings: `settings` without consumer-only keys, and without
/// `statistics.interval.ms`, which is for the group consumer (the producers' contexts keep no
/// statistics: librdkafka would only build them for rdkafka to log).
pub(crate) fn producer_settings(settings: &ClientSettings) -> ClientSettings {
    let mut producer = settings.for_role(ClientRole::Producer);
    producer.remove("statistics.interval.ms");
    producer
}

/// Default statistics interval of the daemons' group consumers: the interval at which a
/// `Consumer` with a default tracking reporter gets them.
const DAEMON_STATISTICS_INTERVAL_MS: &str = "5000";

/// Default group session timeout of the daemons: how long a dead daemon's partitions wait before
/// another daemon takes them (a restart with the same `group.instance.id` takes them back at once).
const DAEMON_SESSION_TIMEOUT_MS: &str = "10000";

/// Maps a client-creation failure of `what` to the engine error.
pub(crate) fn creation_error(what: &str) -> impl FnOnce(KafkaError) -> KafkaIoError + '_ {
    move |e| KafkaIoError::from_rdkafka(what, e, Duration::ZERO, None)
}

/// Rebalance events recorded by [`GroupContext`], handled by the daemon thread.
#[derive(Debug)]
pub(crate) enum RebalanceEvent {
    Assigned(Vec<(String, i32)>),
    Revoked(Vec<(String, i32)>),
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

/// Consumer context of a daemon: applies assignments (eager or cooperative) and records them,
/// and keeps the consumer's refused connections.
pub(crate) struct GroupContext {
    assignments: Mutex<Vec<RebalanceEvent>>,
    /// Assigned partitions start at their beginning (the state is the whole partition) instead
    /// of the committed offset.
    replay_from_start: bool,
    /// Names the daemon in log lines.
    daemon: &'static str,
    watch: ConnectionWatch,
    tokens: TokenRefresh,
    /// Whether the consumer ever joined its group (a first rebalance event came).
    joined: AtomicBool,
    /// The group's state and the partitions' offsets from librdkafka's latest statistics.
    statistics: KeptStatistics,
}

impl GroupContext {
    /// The context of `daemon`'s consumer, created with `settings`.
    pub(crate) fn new(
        daemon: &'static str,
        settings: &ClientSettings,
        replay_from_start: bool,
    ) -> Self {
        GroupContext {
            assignments: Mutex::new(Vec::new()),
            replay_from_start,
            daemon,
            watch: ConnectionWatch::new(settings),
            tokens: settings.token_refresh(),
            joined: AtomicBool::new(false),
            statistics: KeptStatistics::default(),
        }
    }

    /// `partitions`' rows with the group's state from the latest statistics.
    pub(crate) fn status<P>(&self, partitions: Vec<P>) -> DaemonStatus<P> {
        DaemonStatus {
            partitions,
            group: self.statistics.group(),
            transfer_rates: self.statistics.transfer_rates(),
        }
    }

    /// A partition's offsets from the latest statistics that listed it.
    pub(crate) fn offsets(&self, topic: &str, partition: i32) -> Option<BrokerOffsets> {
        self.statistics.partition(topic, partition)
    }

    /// What the daemon does with an error its consumer's poll returned. A refused connection
    /// (a wrong password, an untrusted CA, a token that cannot be had) before the group was ever
    /// joined ends the daemon with librdkafka's description of the cause: its settings cannot
    /// work, and a daemon that only logged would run on doing nothing. Anything else, and a
    /// refusal after the daemon has worked (credentials rotated under it may come back), is
    /// logged with its cause and the daemon goes on while librdkafka retries.
    pub(crate) fn poll_error(&self, error: KafkaError) -> KafkaResult<()> {
        let explained = self.watch.explain("poll", error);
        if !self.joined.load(Ordering::Acquire)
            && let Some(failure) = self.watch.failure()
        {
            let ended = failure.error(&format!("{} connection", self.daemon));
            log::error!("{} stopped: {ended}", self.daemon);
            return Err(ended);
        }
        log::warn!("{} consumer: {explained}", self.daemon);
        Ok(())
    }

    /// The consumer read a record: its connection works.
    pub(crate) fn connected(&self) {
        self.watch.clear();
    }

    fn record(&self, event: RebalanceEvent) {
        self.assignments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    /// The events recorded since the last call, oldest first.
    pub(crate) fn take_events(&self) -> Vec<RebalanceEvent> {
        std::mem::take(&mut *self.assignments.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl ClientContext for GroupContext {
    answer_token_refresh!(tokens);

    fn stats(&self, statistics: Statistics) {
        self.statistics.record(&statistics);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.watch.observe(&error, reason);
        log_unless_end(error, reason);
    }
}

impl ConsumerContext for GroupContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        self.joined.store(true, Ordering::Release);
        self.watch.clear();
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                if self.replay_from_start {
                    let _ = tpl.set_all_offsets(Offset::Beginning);
                }
                self.record(RebalanceEvent::Assigned(partitions_of(tpl)));
                if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.record(RebalanceEvent::Revoked(partitions_of(tpl)));
                if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
            other => {
                log::error!("{} rebalance error: {other:?}", self.daemon);
                consumer.unassign()
            }
        };
        if let Err(e) = result {
            log::error!("{} rebalance failed: {e}", self.daemon);
        }
    }
}

/// Producer context that counts records in flight and collects delivery failures, so that
/// [`send_all`] can wait for its own records. (rdkafka's `flush` on a `ThreadedProducer` waits in
/// 100 ms polls that never see the delivery reports, which the polling thread takes.)
pub(crate) struct FlushTracker {
    state: Mutex<FlushState>,
    settled: Condvar,
    tokens: TokenRefresh,
}

#[derive(Default)]
struct FlushState {
    in_flight: usize,
    failures: Vec<KafkaError>,
}

impl FlushTracker {
    pub(crate) fn new(tokens: TokenRefresh) -> Self {
        FlushTracker {
            state: Mutex::new(FlushState::default()),
            settled: Condvar::new(),
            tokens,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FlushState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ClientContext for FlushTracker {
    answer_token_refresh!(tokens);

    // rdkafka's default logs every error at ERROR, the broker failures librdkafka logs itself too.
    fn error(&self, error: KafkaError, reason: &str) {
        crate::client::log_unless_end(error, reason);
    }
}

impl ProducerContext for FlushTracker {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let mut state = self.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if let Err((err, _)) = result {
            state.failures.push(err.clone());
        }
        // Waking the waiter for every report of a large batch would only make it contend.
        if state.in_flight == 0 {
            self.settled.notify_all();
        }
    }
}

/// Hands `record` to librdkafka without waiting for its delivery, waiting only while
/// librdkafka's own queue is full.
pub(crate) fn enqueue<C: ProducerContext<DeliveryOpaque = ()>>(
    producer: &ThreadedProducer<C>,
    record: &OutgoingRecord,
) -> Result<(), KafkaError> {
    enqueue_with(producer, record, ())
}

/// [`enqueue`] with a delivery opaque, which the context's delivery report receives.
pub(crate) fn enqueue_with<C: ProducerContext>(
    producer: &ThreadedProducer<C>,
    record: &OutgoingRecord,
    opaque: C::DeliveryOpaque,
) -> Result<(), KafkaError> {
    send_waiting_for_room(producer, record.base_record(opaque))
}

/// Hands `base` to librdkafka, waiting only while librdkafka's own queue is full.
pub(crate) fn send_waiting_for_room<C: ProducerContext>(
    producer: &ThreadedProducer<C>,
    mut base: BaseRecord<'_, [u8], [u8], C::DeliveryOpaque>,
) -> Result<(), KafkaError> {
    loop {
        match producer.send(base) {
            Ok(()) => return Ok(()),
            Err((
                KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                back,
            )) => {
                base = back;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Produces `records` and waits until librdkafka confirmed or failed every one (and every
/// record still in flight from an earlier call that timed out); the first failure is returned.
/// Only one `send_all` may run per producer at a time.
pub(crate) fn send_all(
    producer: &ThreadedProducer<FlushTracker>,
    records: &[OutgoingRecord],
    timeout: Duration,
) -> KafkaResult<()> {
    dispatch_all(producer, records, timeout)?;
    settle_all(producer, timeout)
}

/// The first half of [`send_all`]: hands `records` to librdkafka and counts them in flight,
/// forgetting the failures of earlier rounds.
pub(crate) fn dispatch_all(
    producer: &ThreadedProducer<FlushTracker>,
    records: &[OutgoingRecord],
    timeout: Duration,
) -> KafkaResult<()> {
    let tracker = producer.context();
    tracker.state().failures.clear();
    for record in records {
        // Counted before the send: the delivery report may arrive before `enqueue` returns.
        tracker.state().in_flight += 1;
        if let Err(e) = enqueue(producer, record) {
            let mut state = tracker.state();
            state.in_flight = state.in_flight.saturating_sub(1);
            return Err(KafkaIoError::from_rdkafka("dispatch", e, timeout, None));
        }
    }
    Ok(())
}

/// The second half of [`send_all`]: waits up to `timeout` until nothing is in flight and
/// returns the first failure since the last [`dispatch_all`].
pub(crate) fn settle_all(
    producer: &ThreadedProducer<FlushTracker>,
    timeout: Duration,
) -> KafkaResult<()> {
    let tracker = producer.context();
    let deadline = Instant::now() + timeout;
    let mut state = tracker.state();
    while state.in_flight > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(KafkaIoError::Timeout {
                operation: "dispatch flush".to_owned(),
                timeout,
                bootstrap: None,
            });
        }
        state = tracker
            .settled
            .wait_timeout(state, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    match state.failures.drain(..).next() {
        None => Ok(()),
        Some(e) => Err(KafkaIoError::from_rdkafka("dispatch", e, timeout, None)),
    }
}

/// Whether the consumer has read `topic`/`partition` to its current end: its fetch position
/// (which, unlike the last record's offset, steps over transaction markers) or `next_offset`
/// reached the high watermark. `None` when the position or the watermark could not be read.
pub(crate) fn at_partition_end<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
    next_offset: i64,
    timeout: Duration,
) -> Option<bool> {
    let position = consumer
        .position()
        .ok()?
        .find_partition(topic, partition)
        .and_then(|e| e.offset().to_raw())
        .unwrap_or(-1);
    let (_, high) = consumer.fetch_watermarks(topic, partition, timeout).ok()?;
    Some(position >= high || next_offset >= high)
}
