//! [`RedeliveryTracker`]: the daemon that reads the markers topic into a [`MarkersQueue`] per
//! markers partition and redelivers the messages whose deadline passed on the tracker clock
//! (see the `redelivery` module docs for its invariants).
//!
//! Rooms: this file holds the daemon thread (its clients, its loop, the markers it applies) and
//! a markers partition's state and clock; `redeliver.rs` the redelivery writes; `commit.rs` the
//! markers offsets and the stop; `report_sample.rs` its part of a process report.

mod commit;
mod redeliver;
mod report_sample;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrokafka_core::codec::marker_codec::decode_marker;
use ferrokafka_core::markers::{MarkersQueue, MarkersQueueConfig, MessageId, Redelivery};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;

use self::report_sample::report_sample;
use super::RedeliveryOptions;
use super::marker_writer::millis;
use crate::config::ClientSettings;
use crate::daemon::{
    Daemon, DaemonStatus, FlushTracker, GroupContext, RebalanceEvent, group_consumer_settings,
    now_ms, publish, synchronous_producer,
};
use crate::error::{KafkaIoError, KafkaResult};
use crate::oauth;
use crate::polled_producer::PolledProducer;
use crate::record::ReceivedRecord;
use crate::report_sample::GroupMember;
use crate::statistics::BrokerOffsets;

/// Longest the tracker waits in one poll, so stop requests and due messages are noticed quickly.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// First pause after a failed redelivery write; doubled per failure up to `max_backoff`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// A markers partition's figures, for `status()`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrackerPartitionStatus {
    /// Markers partition.
    pub partition: i32,
    /// Whether the partition was read to its end (redelivery runs only then).
    pub caught_up: bool,
    /// Messages tracked: open, or being redelivered.
    pub open: usize,
    /// Markers read.
    pub applied: u64,
    /// Messages re-produced to the queue topic.
    pub redelivered: u64,
    /// Messages produced to the dead-letter topic.
    pub dead_lettered: u64,
    /// Messages past `max_redeliveries` dropped for want of a dead-letter topic (logged).
    pub dropped: u64,
    /// Markers that could not be decoded (logged and skipped).
    pub undecodable: u64,
    /// Last committed markers offset.
    pub committed: Option<u64>,
    /// The partition's offsets from the markers consumer's latest statistics; `None` before
    /// the first.
    pub broker: Option<BrokerOffsets>,
}

struct MarkersPartition {
    queue: MarkersQueue,
    status: TrackerPartitionStatus,
    next_offset: i64,
    /// The clock's anchor: a marker timestamp and when that marker was read.
    clock_anchor: Option<(u64, Instant)>,
    /// When the last marker was read.
    last_marker_seen: Option<Instant>,
    /// Due messages whose write failed, retried first.
    retry: Vec<Redelivery>,
    /// Redelivered messages whose END write failed.
    ends_to_write: Vec<MessageId>,
    backoff: Duration,
    retry_after: Option<Instant>,
    applied_since_commit: u64,
    last_commit: Instant,
}

impl MarkersPartition {
    fn new(partition: i32) -> Self {
        MarkersPartition {
            queue: MarkersQueue::new(MarkersQueueConfig::default()),
            status: TrackerPartitionStatus {
                partition,
                ..TrackerPartitionStatus::default()
            },
            next_offset: 0,
            clock_anchor: None,
            last_marker_seen: None,
            retry: Vec::new(),
            ends_to_write: Vec::new(),
            backoff: FIRST_BACKOFF,
            retry_after: None,
            applied_since_commit: 0,
            last_commit: Instant::now(),
        }
    }

    /// Takes a marker's timestamp into the clock. It re-anchors the clock only when it is ahead
    /// of it: a marker read late (behind a slow fetch) must not set the clock back.
    fn note_marker(&mut self, timestamp: u64) {
        let now = Instant::now();
        self.last_marker_seen = Some(now);
        let current = self
            .clock_anchor
            .map(|(anchor, at)| anchor.saturating_add(millis(at.elapsed())));
        if current.is_none_or(|current| timestamp > current) {
            self.clock_anchor = Some((timestamp, now));
        }
    }

    /// The tracker clock of this partition (see the module docs).
    fn clock(&self, use_now_after: Duration) -> u64 {
        match (self.clock_anchor, self.last_marker_seen) {
            (Some((anchor, at)), Some(seen)) if seen.elapsed() < use_now_after => {
                anchor.saturating_add(millis(at.elapsed()))
            }
            _ => now_ms(),
        }
    }
}

/// The running tracker daemon; see the module docs.
pub type RedeliveryTracker = Daemon<DaemonStatus<TrackerPartitionStatus>>;

impl RedeliveryTracker {
    /// Validates the settings, creates the Kafka clients and starts the daemon thread.
    pub fn start(settings: ClientSettings, options: RedeliveryOptions) -> KafkaResult<Self> {
        options.validate()?;
        let member = GroupMember::new(&options.group_id, &settings);
        let markers_topic = options.markers_topic.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let daemon = Tracker::new(settings, options, Arc::clone(&stop))?;
        Daemon::spawn(
            "ferrokafka-redelivery",
            stop,
            move |status| report_sample(&member, &markers_topic, status),
            move |status| daemon.run(status),
        )
    }
}

struct Tracker {
    consumer: BaseConsumer<GroupContext>,
    producer: PolledProducer<FlushTracker>,
    options: RedeliveryOptions,
    partitions: BTreeMap<i32, MarkersPartition>,
    /// The daemon's stop flag: a redelivery waiting for room in a full queue (the broker away)
    /// gives up once it is set.
    stop: Arc<AtomicBool>,
}

impl Tracker {
    fn new(
        settings: ClientSettings,
        options: RedeliveryOptions,
        stop: Arc<AtomicBool>,
    ) -> KafkaResult<Self> {
        settings.bootstrap()?;
        // The tracker's state is the markers after the committed offset, not the whole topic.
        let consumer: BaseConsumer<GroupContext> = oauth::create_client(
            &group_consumer_settings(&settings, &options.group_id).to_client_config(),
            GroupContext::new("redelivery tracker", &settings, false),
            "create markers consumer",
        )?;
        let markers = options.markers_topic.as_str();
        consumer
            .subscribe(&[markers])
            .map_err(KafkaIoError::subscribing("the markers topic", &[markers]))?;
        let producer = synchronous_producer(
            &settings,
            FlushTracker::new(settings.token_refresh()),
            "create redelivery producer",
        )?;
        Ok(Tracker {
            consumer,
            producer,
            options,
            partitions: BTreeMap::new(),
            stop,
        })
    }

    /// Redelivers until the tracker's stop flag is set, then shuts down; or ends with the error
    /// of a consumer whose connection is refused before it ever worked
    /// ([`GroupContext::poll_error`]).
    fn run(mut self, status: &Mutex<DaemonStatus<TrackerPartitionStatus>>) -> KafkaResult<()> {
        log::info!(
            "redelivery tracker started for {} (markers {}, group {})",
            self.options.queue_topic,
            self.options.markers_topic,
            self.options.group_id
        );
        while !self.stop.load(Ordering::Acquire) {
            let sleep = self.sleep_budget();
            self.poll_markers(sleep)?;
            self.handle_assignments();
            self.redeliver_due();
            self.commit();
            publish(status, self.status());
        }
        self.shutdown(status);
        Ok(())
    }

    /// How long the next poll may block: until the earliest deadline, at most `MAX_SLEEP`.
    fn sleep_budget(&self) -> Duration {
        let use_now = self.options.use_now_if_no_marker_seen;
        self.partitions
            .values()
            .filter(|p| p.status.caught_up && p.retry_after.is_none())
            .filter_map(|p| {
                p.queue
                    .next_deadline()
                    .map(|due| due.saturating_sub(p.clock(use_now)))
            })
            .min()
            .map_or(MAX_SLEEP, |ms| Duration::from_millis(ms).min(MAX_SLEEP))
    }

    fn poll_markers(&mut self, first_wait: Duration) -> KafkaResult<()> {
        let mut wait = first_wait;
        for _ in 0..10_000 {
            let received = match self.consumer.poll(wait) {
                None => return Ok(()),
                Some(result) => result.map(|message| ReceivedRecord::from_message(&message)),
            };
            wait = Duration::ZERO;
            match received {
                Ok(record) => {
                    self.consumer.context().connected();
                    self.apply(&record);
                }
                Err(KafkaError::PartitionEOF(partition)) => {
                    // The assignment may have arrived in this same poll round.
                    self.handle_assignments();
                    // librdkafka emits it when a fetch reached the high watermark; the tracker
                    // reads one topic, so the partition number is enough.
                    if let Some(run) = self.partitions.get_mut(&partition)
                        && !run.status.caught_up
                    {
                        run.status.caught_up = true;
                        log::info!(
                            "{}-{partition} caught up: {} markers read, {} messages open",
                            self.options.markers_topic,
                            run.status.applied,
                            run.queue.len()
                        );
                    }
                }
                Err(e) => self.consumer.context().poll_error(e)?,
            }
        }
        Ok(())
    }

    fn handle_assignments(&mut self) {
        for event in self.consumer.context().take_events() {
            match event {
                RebalanceEvent::Assigned(partitions) => {
                    for (topic, partition) in partitions {
                        log::info!("assigned {topic}-{partition}: replaying markers");
                        self.partitions
                            .entry(partition)
                            .or_insert_with(|| MarkersPartition::new(partition));
                    }
                }
                RebalanceEvent::Revoked(partitions) => {
                    for (topic, partition) in partitions {
                        // Its new owner replays from the last commit, which never passes an
                        // open START: nothing is forgotten.
                        log::info!("revoked {topic}-{partition}");
                        self.partitions.remove(&partition);
                    }
                }
            }
        }
    }

    fn apply(&mut self, record: &ReceivedRecord) {
        let partition = record.partition;
        if !self.partitions.contains_key(&partition) {
            // The assignment may have arrived in this same poll round.
            self.handle_assignments();
        }
        // A record of a partition that is not assigned (any more) must not start a state whose
        // commit position would skip the open markers before it.
        let Some(run) = self.partitions.get_mut(&partition) else {
            log::debug!("ignored a marker of unassigned partition {partition}");
            return;
        };
        run.next_offset = record.offset + 1;
        run.status.applied += 1;
        run.applied_since_commit += 1;
        if let Ok(timestamp) = u64::try_from(record.timestamp_ms)
            && timestamp > 0
        {
            run.note_marker(timestamp);
        }
        let offset = u64::try_from(record.offset).unwrap_or(0);
        let decoded = record
            .value
            .as_deref()
            .ok_or_else(|| "no value".to_owned())
            .and_then(|value| decode_marker(value).map_err(|e| e.to_string()));
        let outcome =
            decoded.and_then(|marker| run.queue.apply(offset, marker).map_err(|e| e.to_string()));
        if let Err(e) = outcome {
            run.status.undecodable += 1;
            log::warn!(
                "{}-{partition}@{offset}: skipped a marker: {e}",
                self.options.markers_topic
            );
        }
    }

    fn status(&self) -> DaemonStatus<TrackerPartitionStatus> {
        let context = self.consumer.context();
        let markers = &self.options.markers_topic;
        let rows = self
            .partitions
            .values()
            .map(|run| TrackerPartitionStatus {
                open: run.queue.len(),
                broker: context.offsets(markers, run.status.partition),
                ..run.status.clone()
            })
            .collect();
        context.status(rows)
    }
}
