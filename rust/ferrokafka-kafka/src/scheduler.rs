//! [`Scheduler`]: the scheduled-messages daemon, wire-compatible with Karafka Pro's.
//!
//! One daemon thread owns a group consumer of the schedules topics and two producers (one for
//! dispatches, transactional when `transactional.id` is set; one for state reports). For each
//! assigned partition it replays the partition from the earliest offset into a
//! [`ScheduleTracker`] (state `loading`); the first end-of-partition event marks it `loaded`.
//! From then on it dispatches every due schedule: the target message and a tombstone for the proxy
//! (same key and partition), produced synchronously in chunks of `flush_batch_size` messages,
//! inside one transaction per chunk when transactional. Only a confirmed chunk is marked
//! dispatched; a failed one is restored and retried after a pause.
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

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrokafka_core::codec::envelope::{self, Headers, ProxyRecord, ProxySource, TargetAddress};
use ferrokafka_core::codec::json::encode_document;
use ferrokafka_core::schedule::{
    Dispatch, ScheduleRecord, ScheduleTracker, TrackerConfig, TrackerState,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use crate::client::EndIsExpected;
use crate::config::ClientSettings;
use crate::daemon::{
    Daemon, FlushTracker, GroupContext, RebalanceEvent, at_partition_end, creation_error,
    group_consumer_settings, now_ms, publish, send_all,
};
use crate::error::{KafkaIoError, KafkaResult};
use crate::partitioner::PartitionCounts;
use crate::record::{OutgoingRecord, ReceivedRecord};

/// Longest the daemon waits in one poll, so stop requests and due schedules are noticed quickly.
const MAX_SLEEP: Duration = Duration::from_millis(100);
/// Pause before retrying a chunk whose dispatch failed.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Records applied between two loading-progress log lines.
const PROGRESS_EVERY: u64 = 100_000;

/// Settings of a [`Scheduler`] beyond librdkafka's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerOptions {
    /// The schedules topics to serve.
    pub schedules_topics: Vec<String>,
    /// Consumer group of the daemons serving these topics.
    pub group_id: String,
    /// Most messages (targets plus tombstones) produced per synchronous flush [1000].
    pub flush_batch_size: usize,
    /// Least time between two periodic state reports of a partition.
    pub state_interval: Duration,
    /// Appended to a schedules topic's name to name its states topic ["_states"].
    pub states_postfix: String,
    /// How far ahead schedules keep their payload in memory (see `ScheduleTracker`).
    pub horizon: Duration,
    /// Deadline of one synchronous flush (or transaction commit).
    pub dispatch_timeout: Duration,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            schedules_topics: Vec::new(),
            group_id: "ferrokafka-scheduler".to_owned(),
            flush_batch_size: 1000,
            state_interval: Duration::from_secs(10),
            states_postfix: "_states".to_owned(),
            horizon: Duration::from_secs(3600),
            dispatch_timeout: Duration::from_secs(30),
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
    /// Tracker state name: fresh, loading, loaded, stopped.
    pub state: &'static str,
    /// Schedules pending in memory (with payload) and beyond the horizon.
    pub pending: usize,
    /// Schedules dispatched by this daemon.
    pub dispatched: u64,
    /// Records skipped as undecodable.
    pub skipped: u64,
    /// Records applied.
    pub applied: u64,
}

/// The proxy data a dispatch needs: its payload, its headers and where the target goes.
#[derive(Clone, Debug)]
struct ProxyPayload {
    value: Option<Vec<u8>>,
    headers: Headers,
    target: TargetAddress,
}

struct PartitionRun {
    tracker: ScheduleTracker<ProxyPayload>,
    next_offset: i64,
    applied: u64,
    last_report: Option<Instant>,
    retry_after: Option<Instant>,
}

/// The running daemon; see the module docs.
pub type Scheduler = Daemon<Vec<PartitionStatus>>;

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
        if options.flush_batch_size < 2 {
            return Err(KafkaIoError::InvalidArgument(format!(
                "flush_batch_size must be >= 2 (a target and its tombstone), got {}",
                options.flush_batch_size
            )));
        }
        let daemon = SchedulerLoop::new(settings, options)?;
        Daemon::spawn("ferrokafka-scheduler", move |stop, status| {
            daemon.run(stop, status);
        })
    }
}

struct SchedulerLoop {
    consumer: BaseConsumer<GroupContext>,
    dispatcher: ThreadedProducer<FlushTracker>,
    reporter: ThreadedProducer<FlushTracker>,
    fetch_settings: ClientSettings,
    transactional: bool,
    options: SchedulerOptions,
    partitions: PartitionCounts,
    runs: BTreeMap<(String, i32), PartitionRun>,
}

impl SchedulerLoop {
    fn new(settings: ClientSettings, options: SchedulerOptions) -> KafkaResult<Self> {
        settings.bootstrap()?;
        let transactional = settings.get("transactional.id").is_some();
        let mut consumer_settings = group_consumer_settings(&settings, &options.group_id);
        consumer_settings.set_default("isolation.level", "read_committed");
        let consumer: BaseConsumer<GroupContext> = consumer_settings
            .to_client_config()
            .create_with_context(GroupContext::new("scheduler", true))
            .map_err(creation_error("create scheduler consumer"))?;
        let topics: Vec<&str> = options
            .schedules_topics
            .iter()
            .map(String::as_str)
            .collect();
        consumer
            .subscribe(&topics)
            .map_err(creation_error("subscribe to schedules topics"))?;
        let mut dispatch_settings = settings.clone();
        // Every chunk is flushed synchronously, so lingering only adds to each chunk's latency.
        dispatch_settings.set_default("linger.ms", "0");
        let dispatcher: ThreadedProducer<FlushTracker> = dispatch_settings
            .to_client_config()
            .create_with_context(FlushTracker::new())
            .map_err(creation_error("create dispatch producer"))?;
        if transactional {
            dispatcher
                .init_transactions(options.dispatch_timeout)
                .map_err(|e| {
                    KafkaIoError::from_rdkafka(
                        "init_transactions",
                        e,
                        options.dispatch_timeout,
                        settings.bootstrap().ok(),
                    )
                })?;
        }
        let mut report_settings = settings.clone();
        report_settings.remove("transactional.id");
        let reporter: ThreadedProducer<FlushTracker> = report_settings
            .to_client_config()
            .create_with_context(FlushTracker::new())
            .map_err(creation_error("create state report producer"))?;
        Ok(SchedulerLoop {
            consumer,
            dispatcher,
            reporter,
            fetch_settings: consumer_settings,
            transactional,
            options,
            partitions: PartitionCounts::default(),
            runs: BTreeMap::new(),
        })
    }

    fn run(mut self, stop: &AtomicBool, status: &Mutex<Vec<PartitionStatus>>) {
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
            self.poll_records(sleep);
            self.handle_assignments();
            self.dispatch_due();
            self.advance_horizons();
            self.report_states(false);
            publish(status, self.status());
        }
        self.shutdown();
        publish(status, self.status());
    }

    /// How long the next poll may block: until the earliest due schedule, at most `MAX_SLEEP`.
    fn sleep_budget(&self) -> Duration {
        let now = now_ms();
        self.runs
            .values()
            .filter(|run| run.tracker.state() == TrackerState::Loaded && run.retry_after.is_none())
            .filter_map(|run| run.tracker.next_due_ms())
            .min()
            .map_or(MAX_SLEEP, |due| {
                Duration::from_millis(due.saturating_sub(now)).min(MAX_SLEEP)
            })
    }

    /// Applies records until none is waiting (or a bounded number, to keep dispatching).
    fn poll_records(&mut self, first_wait: Duration) {
        let mut wait = first_wait;
        for _ in 0..10_000 {
            let received = match self.consumer.poll(wait) {
                None => return,
                Some(result) => result.map(|message| ReceivedRecord::from_message(&message)),
            };
            wait = Duration::ZERO;
            match received {
                Ok(record) => self.apply(record),
                Err(KafkaError::PartitionEOF(partition)) => self.reached_end(partition),
                Err(e) => log::warn!("scheduler consumer: {e}"),
            }
        }
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
        self.runs
            .entry((topic.to_owned(), partition))
            .or_insert_with(|| {
                let mut tracker = ScheduleTracker::new(TrackerConfig { horizon_ms }, now_ms());
                // A fresh tracker always accepts the move to loading.
                let _ = tracker.mark_loading();
                PartitionRun {
                    tracker,
                    next_offset: 0,
                    applied: 0,
                    last_report: None,
                    retry_after: None,
                }
            })
    }

    fn apply(&mut self, record: ReceivedRecord) {
        let (topic, partition) = (record.topic.clone(), record.partition);
        let run = self.run_for(&topic, partition);
        let offset = u64::try_from(record.offset).unwrap_or(0);
        run.next_offset = record.offset + 1;
        run.applied += 1;
        if run.tracker.state() == TrackerState::Loading && run.applied % PROGRESS_EVERY == 0 {
            log::info!("loading {topic}-{partition}: {} records read", run.applied);
        }
        match decode_record(&record) {
            Ok((key, decoded)) => {
                if let Err(e) = run.tracker.apply(offset, &key, decoded) {
                    log::warn!("{topic}-{partition}@{offset}: skipped: {e}");
                    run.tracker.record_skipped(offset);
                }
            }
            Err(e) => {
                log::warn!("{topic}-{partition}@{offset}: skipped a bad schedules record: {e}");
                run.tracker.record_skipped(offset);
            }
        }
    }

    fn reached_end(&mut self, partition: i32) {
        // The assignment may have arrived in this same poll round: its run must exist first.
        self.handle_assignments();
        for ((topic, p), run) in &mut self.runs {
            if *p != partition || run.tracker.state() != TrackerState::Loading {
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
        let per_chunk = self.options.flush_batch_size / 2;
        let keys: Vec<(String, i32)> = self.runs.keys().cloned().collect();
        for key in keys {
            loop {
                let now = now_ms();
                let Some(run) = self.runs.get_mut(&key) else {
                    break;
                };
                if run.retry_after.is_some_and(|t| Instant::now() < t) {
                    break;
                }
                run.retry_after = None;
                let due = run.tracker.due(now, per_chunk);
                if due.is_empty() {
                    break;
                }
                let outcome = self.flush_chunk(&key, &due);
                let Some(run) = self.runs.get_mut(&key) else {
                    break;
                };
                match outcome {
                    Ok(()) => {
                        for dispatch in &due {
                            run.tracker.mark_dispatched(&dispatch.key, dispatch.offset);
                        }
                        self.store_position(&key);
                    }
                    Err(e) => {
                        log::error!(
                            "dispatch of {} schedules from {}-{} failed, retrying in {:?}: {e}",
                            due.len(),
                            key.0,
                            key.1,
                            RETRY_PAUSE
                        );
                        for dispatch in due {
                            let _ = run.tracker.restore(dispatch);
                        }
                        run.retry_after = Some(Instant::now() + RETRY_PAUSE);
                        break;
                    }
                }
            }
        }
    }

    /// Produces the targets and tombstones of `due` and waits for all of them.
    fn flush_chunk(
        &self,
        (topic, partition): &(String, i32),
        due: &[Dispatch<ProxyPayload>],
    ) -> KafkaResult<()> {
        let timeout = self.options.dispatch_timeout;
        let failed = |operation: &str, e: KafkaError| {
            KafkaIoError::from_rdkafka(operation, e, timeout, None)
        };
        if self.transactional {
            self.dispatcher
                .begin_transaction()
                .map_err(|e| failed("begin_transaction", e))?;
        }
        let mut records = Vec::with_capacity(due.len() * 2);
        for dispatch in due {
            let source = ProxySource {
                topic,
                partition: *partition,
                offset: dispatch.offset,
                key: &dispatch.key,
            };
            let proxy = &dispatch.payload;
            let target = &proxy.target;
            let target_partition = target.partition.or_else(|| {
                target.partition_key.as_ref().and_then(|pk| {
                    self.partitions.partition_for(
                        self.dispatcher.client(),
                        &target.topic,
                        pk.as_bytes(),
                    )
                })
            });
            records.push(OutgoingRecord {
                topic: target.topic.clone(),
                partition: target_partition,
                key: target.key.as_ref().map(|k| k.as_bytes().to_vec()),
                value: proxy.value.clone(),
                headers: with_values(envelope::dispatch_headers(&proxy.headers, &source)),
                timestamp_ms: None,
            });
            records.push(OutgoingRecord {
                topic: topic.clone(),
                partition: Some(*partition),
                key: Some(dispatch.key.as_bytes().to_vec()),
                value: None,
                headers: with_values(envelope::tombstone_headers(&proxy.headers, dispatch.offset)),
                timestamp_ms: None,
            });
        }
        let started = Instant::now();
        let sent = send_all(&self.dispatcher, &records, timeout);
        log::debug!(
            "{topic}-{partition}: {} messages flushed in {:?}",
            records.len(),
            started.elapsed()
        );
        let committed = sent.and_then(|()| {
            if self.transactional {
                self.dispatcher
                    .commit_transaction(timeout)
                    .map_err(|e| failed("commit_transaction", e))
            } else {
                Ok(())
            }
        });
        if committed.is_err() && self.transactional {
            let _ = self.dispatcher.abort_transaction(timeout);
        }
        committed
    }

    fn store_position(&self, key: &(String, i32)) {
        let Some(run) = self.runs.get(key) else {
            return;
        };
        if let Err(e) = self
            .consumer
            .store_offset(&key.0, key.1, run.next_offset - 1)
        {
            log::debug!("store offset {}-{}: {e}", key.0, key.1);
        }
    }

    /// Moves each partition's horizon forward and reads back the payloads now needed.
    fn advance_horizons(&mut self) {
        let now = now_ms();
        let keys: Vec<(String, i32)> = self.runs.keys().cloned().collect();
        for key in keys {
            let Some(run) = self.runs.get_mut(&key) else {
                continue;
            };
            let fetches = match run.tracker.advance_horizon(now) {
                Ok(fetches) if !fetches.is_empty() => fetches,
                _ => continue,
            };
            log::info!(
                "{}-{}: reading back {} schedules entering the horizon",
                key.0,
                key.1,
                fetches.len()
            );
            let offsets: Vec<i64> = fetches
                .iter()
                .filter_map(|f| i64::try_from(f.offset).ok())
                .collect();
            let fetched = read_offsets(&self.fetch_settings, &key.0, key.1, &offsets);
            let Some(run) = self.runs.get_mut(&key) else {
                continue;
            };
            for fetch in fetches {
                let payload = fetched
                    .get(&fetch.offset)
                    .and_then(|record| decode_record(record).ok())
                    .and_then(|(_, decoded)| match decoded {
                        ScheduleRecord::Schedule { payload, .. } => Some(payload),
                        _ => None,
                    });
                match payload {
                    Some(payload) => {
                        run.tracker
                            .provide_payload(&fetch.key, fetch.offset, payload);
                    }
                    None => {
                        log::warn!(
                            "{}-{}@{}: schedule could not be read back; dropping it",
                            key.0,
                            key.1,
                            fetch.offset
                        );
                        let _ = run
                            .tracker
                            .apply(fetch.offset, &fetch.key, ScheduleRecord::Cancel);
                    }
                }
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

    fn shutdown(&mut self) {
        for run in self.runs.values_mut() {
            run.tracker.stop();
        }
        self.report_states(true);
        let _ = self.reporter.flush(Duration::from_secs(10));
        if !self.runs.is_empty()
            && let Err(e) = self
                .consumer
                .commit_consumer_state(rdkafka::consumer::CommitMode::Sync)
        {
            log::debug!("final offset commit: {e}");
        }
        let _ = self.dispatcher.flush(Duration::from_secs(10));
        log::info!("scheduler stopped");
    }

    fn status(&self) -> Vec<PartitionStatus> {
        self.runs
            .iter()
            .map(|((topic, partition), run)| {
                let report = run.tracker.state_report(now_ms());
                PartitionStatus {
                    topic: topic.clone(),
                    partition: *partition,
                    state: run.tracker.state().as_str(),
                    pending: run.tracker.len() + run.tracker.deferred_len(),
                    dispatched: report.dispatched,
                    skipped: report.skipped_records,
                    applied: run.applied,
                }
            })
            .collect()
    }
}

/// Decodes a schedules-topic record into the tracker's terms.
fn decode_record(
    record: &ReceivedRecord,
) -> Result<(String, ScheduleRecord<ProxyPayload>), String> {
    let key = record
        .key
        .as_deref()
        .and_then(|k| std::str::from_utf8(k).ok())
        .filter(|k| !k.is_empty())
        .ok_or("missing or non-UTF-8 key")?
        .to_owned();
    let headers: Headers = record
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), value.clone().unwrap_or_default()))
        .collect();
    let decoded = match envelope::parse_proxy_headers(&headers).map_err(|e| e.to_string())? {
        ProxyRecord::Schedule { epoch_secs, target } => ScheduleRecord::Schedule {
            epoch_secs,
            payload: ProxyPayload {
                value: record.value.clone(),
                headers,
                target,
            },
        },
        ProxyRecord::Cancel => ScheduleRecord::Cancel,
        ProxyRecord::Tombstone { source_offset } => ScheduleRecord::Tombstone { source_offset },
    };
    Ok((key, decoded))
}

fn with_values(headers: Headers) -> Vec<(String, Option<Vec<u8>>)> {
    headers.into_iter().map(|(k, v)| (k, Some(v))).collect()
}

/// Reads the records at `offsets` of one partition (sorted ascending), for payloads entering the
/// horizon. Records that cannot be read within the time limit are simply missing.
fn read_offsets(
    settings: &ClientSettings,
    topic: &str,
    partition: i32,
    offsets: &[i64],
) -> HashMap<u64, ReceivedRecord> {
    let mut found = HashMap::new();
    let Some(&first) = offsets.first() else {
        return found;
    };
    let mut fetch_settings = settings.clone();
    fetch_settings.set("group.id", "ferrokafka-scheduler-fetch");
    fetch_settings.set("enable.partition.eof", "true");
    let consumer: BaseConsumer<EndIsExpected> = match fetch_settings
        .to_client_config()
        .create_with_context(EndIsExpected)
    {
        Ok(consumer) => consumer,
        Err(e) => {
            log::error!("cannot create the payload fetch consumer: {e}");
            return found;
        }
    };
    let wanted: std::collections::HashSet<i64> = offsets.iter().copied().collect();
    let mut tpl = TopicPartitionList::new();
    if tpl
        .add_partition_offset(topic, partition, Offset::Offset(first))
        .and_then(|()| consumer.assign(&tpl))
        .is_err()
    {
        return found;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let last = offsets.last().copied().unwrap_or(first);
    while Instant::now() < deadline {
        match consumer.poll(MAX_SLEEP) {
            Some(Ok(message)) => {
                let offset = message.offset();
                if wanted.contains(&offset) {
                    found.insert(offset as u64, ReceivedRecord::from_message(&message));
                }
                if offset >= last {
                    break;
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => break,
            Some(Err(e)) => log::warn!("payload fetch {topic}-{partition}: {e}"),
            None => {}
        }
    }
    found
}
