//! Acknowledged processing with redelivery (the KMQ pattern): [`QueueConsumer`] and
//! [`RedeliveryTracker`].
//!
//! A queue consumer reads the queue topic. Before it hands out a batch it writes one START marker
//! per message (message id = queue partition + offset, redelivery deadline, and the message's
//! key, value and headers) to the markers topic, waits until every marker is acknowledged, and
//! only then commits the queue offsets. `ack` writes an END marker, `keepalive` a KEEPALIVE with
//! a later deadline, and `nack` a KEEPALIVE whose deadline is now (redeliver at once).
//!
//! Invariants:
//! - Every marker of one queue message goes to markers partition
//!   [`markers_partition`]`(queue partition)`, so the tracker sees them in the order written.
//! - A message is committed on the queue topic only after its START is durable; a failed START
//!   write rewinds the consumer to the batch, so no message is lost between the two topics.
//! - The tracker redelivers nothing from a markers partition before it has read that partition
//!   to its end (a restart does not redeliver what was acknowledged after its last commit), and
//!   commits a markers partition only up to its smallest open START
//!   ([`MarkersQueue::smallest_open_marker_offset`]), so a restart never forgets an open message.
//! - A due message is re-produced to its original queue partition with the
//!   [`REDELIVERY_COUNT_HEADER`] incremented, or, once the count reached `max_redeliveries`,
//!   produced to the dead-letter topic (or, without one, logged at error level and counted as
//!   dropped); only when that write is acknowledged is its END written. A failed write is
//!   retried with exponential backoff. Delivery is at-least-once: a tracker killed between the
//!   re-produce and the END redelivers that message again after its restart.
//! - Tracker clock, per markers partition: the newest marker timestamp plus the monotonic time
//!   since that marker was read (immune to skew between hosts; a marker read late never sets it
//!   back, so it is the largest such sum over the markers read), or the wall clock when no marker
//!   was read for `use_now_if_no_marker_seen`.
//!
//! Threading: [`QueueConsumer`] methods are called from any thread. The consumer owns three
//! threads: the START prefetch and the commit thread (`start_prefetch.rs`: read, mark and
//! commit the next batches while the caller handles this one) and the keepalive
//! (`marker_writer.rs`). The tracker runs
//! on one daemon thread (`daemon::Daemon`);
//! librdkafka callbacks only record events. No Python runs here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrokafka_core::codec::marker_codec::{decode_marker, encode_marker};
use ferrokafka_core::markers::{Marker, MarkersQueue, MarkersQueueConfig, MessageId, Redelivery};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::ThreadedProducer;
use rdkafka::{Offset, TopicPartitionList};

use crate::client::Client;
use crate::config::{ClientRole, ClientSettings};
use crate::daemon::{
    Daemon, DaemonStatus, FlushTracker, GroupContext, RebalanceEvent, SHUTDOWN_BUDGET,
    commit_and_close, creation_error, flush_before, group_consumer_settings, now_ms,
    producer_settings, publish, require_group_id, send_all,
};
use crate::error::{KafkaIoError, KafkaResult};
pub use crate::marker_writer::markers_partition;
use crate::marker_writer::{KeepaliveThread, MarkerWriter, UpdateTracker, message_id, millis};
use crate::oauth::{self, TokenContext};
use crate::record::{HeaderList, OutgoingRecord, ReceivedRecord};
use crate::start_prefetch::{PrefetchSetup, StartAcks, StartPrefetch};
pub use crate::start_prefetch::{Refused, Taken};
use crate::statistics::BrokerOffsets;

/// Header carrying how many times a message was redelivered (decimal ASCII).
pub const REDELIVERY_COUNT_HEADER: &str = "ferrokafka_redelivery_count";
/// Dead-letter headers naming where the message was in the queue topic.
pub const ORIGINAL_TOPIC_HEADER: &str = "ferrokafka_original_topic";
/// See [`ORIGINAL_TOPIC_HEADER`].
pub const ORIGINAL_PARTITION_HEADER: &str = "ferrokafka_original_partition";
/// See [`ORIGINAL_TOPIC_HEADER`].
pub const ORIGINAL_OFFSET_HEADER: &str = "ferrokafka_original_offset";

/// Longest the tracker waits in one poll, so stop requests and due messages are noticed quickly.
const MAX_SLEEP: Duration = Duration::from_millis(100);
/// First pause after a failed redelivery write; doubled per failure up to `max_backoff`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The redelivery count a message carries (0 when the header is missing or unreadable).
pub fn redelivery_count(headers: &[(String, Option<Vec<u8>>)]) -> u32 {
    headers
        .iter()
        .rev()
        .find(|(name, _)| name == REDELIVERY_COUNT_HEADER)
        .and_then(|(_, value)| value.as_deref())
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The dead letter of the queue message `id` of `queue_topic` (its key, value and headers):
/// to `topic`, with the redelivery `count` and the `ferrokafka_original_*` headers.
pub(crate) fn dead_letter(
    topic: &str,
    queue_topic: &str,
    id: MessageId,
    count: u32,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: &HeaderList,
) -> OutgoingRecord {
    let mut headers: HeaderList = headers
        .iter()
        .filter(|(name, _)| name != REDELIVERY_COUNT_HEADER)
        .cloned()
        .collect();
    headers.extend([
        (
            REDELIVERY_COUNT_HEADER.to_owned(),
            Some(count.to_string().into_bytes()),
        ),
        (
            ORIGINAL_TOPIC_HEADER.to_owned(),
            Some(queue_topic.as_bytes().to_vec()),
        ),
        (
            ORIGINAL_PARTITION_HEADER.to_owned(),
            Some(id.partition.to_string().into_bytes()),
        ),
        (
            ORIGINAL_OFFSET_HEADER.to_owned(),
            Some(id.offset.to_string().into_bytes()),
        ),
    ]);
    OutgoingRecord {
        topic: topic.to_owned(),
        partition: None,
        key,
        value,
        headers,
        timestamp_ms: None,
    }
}

// ---- queue consumer -------------------------------------------------------------------------

/// Settings of a [`QueueConsumer`] beyond librdkafka's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConsumerOptions {
    /// The queue topic to consume.
    pub queue_topic: String,
    /// The markers topic the tracker reads.
    pub markers_topic: String,
    /// Consumer group of the queue consumers.
    pub group_id: String,
    /// Time a handler has before its message is redelivered [60 s].
    pub redelivery_timeout: Duration,
    /// Deadline for writing a batch's START markers and for metadata requests [30 s].
    pub marker_timeout: Duration,
    /// Most messages read, marked and committed at once [500].
    pub max_batch_size: usize,
    /// Write a KEEPALIVE every half timeout for each message handed out and not yet acked or
    /// nacked, on the engine's keepalive thread [true].
    pub auto_keepalive: bool,
    /// Where a message goes whose START marker the markers topic refuses for good (too large
    /// for it); `None`: handed back to the caller by `fetch` [None].
    pub dead_letter_topic: Option<String>,
}

/// Counters of a [`QueueConsumer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueConsumerStats {
    /// Messages marked (START written, offsets committed): handed out or prefetched.
    pub received: u64,
    /// END markers sent by `ack`.
    pub acked: u64,
    /// Messages given up by `nack` (redelivered at once or after their deadline).
    pub nacked: u64,
    /// KEEPALIVE markers sent by `keepalive` and by the automatic keepalive.
    pub keepalives: u64,
    /// END or KEEPALIVE markers that librdkafka could not deliver.
    pub failed_markers: u64,
    /// Messages whose START marker the markers topic refused for good: dead-lettered or
    /// handed back, never handed out.
    pub refused: u64,
}

/// The consuming side of the KMQ pattern; see the module docs.
pub struct QueueConsumer {
    /// Declared first: dropped (stopped and joined) before the writer it shares.
    prefetch: StartPrefetch,
    writer: Arc<MarkerWriter>,
    /// Dropped (stopped and joined) with the consumer; `None` without automatic keepalive.
    _keepalive: Option<KeepaliveThread>,
    options: QueueConsumerOptions,
    acked: AtomicU64,
    nacked: AtomicU64,
}

impl std::fmt::Debug for QueueConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueConsumer")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl QueueConsumer {
    /// Creates the clients and subscribes to the queue, waiting for no broker: the markers
    /// topic's partition count is read by the prefetch thread (see `start_prefetch.rs`).
    pub fn new(settings: ClientSettings, options: QueueConsumerOptions) -> KafkaResult<Self> {
        settings.bootstrap()?;
        if options.queue_topic.is_empty() || options.markers_topic.is_empty() {
            return Err(KafkaIoError::InvalidArgument(
                "queue_topic and markers_topic must be non-empty".to_owned(),
            ));
        }
        require_group_id(&options.group_id)?;
        if options.queue_topic == options.markers_topic {
            return Err(KafkaIoError::InvalidArgument(
                "queue_topic and markers_topic must differ".to_owned(),
            ));
        }
        if options.dead_letter_topic.as_deref() == Some("") {
            return Err(KafkaIoError::InvalidArgument(
                "dead_letter_topic must be None or a non-empty topic name".to_owned(),
            ));
        }
        let mut consumer_settings = settings.clone();
        consumer_settings.set("group.id", options.group_id.as_str());
        consumer_settings.set("enable.auto.commit", "false");
        consumer_settings.set_default("auto.offset.reset", "earliest");
        let consumer: BaseConsumer<TokenContext> = oauth::create(
            &consumer_settings
                .for_role(ClientRole::Consumer)
                .to_client_config(),
            TokenContext::new(settings.token_refresh()),
        )
        .map_err(creation_error("create queue consumer"))?;
        let metadata = Client::new(settings.clone())?;
        consumer
            .subscribe(&[options.queue_topic.as_str()])
            .map_err(creation_error("subscribe to the queue topic"))?;
        let mut producer_settings = settings.for_role(ClientRole::Producer);
        producer_settings.remove("transactional.id");
        // Markers of one message must stay in order: retries may not reorder them.
        producer_settings.set_default("enable.idempotence", "true");
        let mut start_settings = producer_settings.clone();
        // START markers are written synchronously per batch: linger only adds latency.
        start_settings.set_default("linger.ms", "1");
        let starts = oauth::create(
            &start_settings.to_client_config(),
            StartAcks::new(settings.token_refresh()),
        )
        .map_err(creation_error("create markers producer"))?;
        // END and KEEPALIVE markers are not waited for: a longer linger packs more of them into
        // one produce request.
        producer_settings.set_default("linger.ms", "5");
        // Only failures are reported (and counted); `flush` asks librdkafka what is left.
        producer_settings.set("delivery.report.only.error", "true");
        let updates = oauth::create(
            &producer_settings.to_client_config(),
            UpdateTracker::new(settings.token_refresh()),
        )
        .map_err(creation_error("create markers producer"))?;
        let writer = Arc::new(MarkerWriter::new(
            updates,
            options.markers_topic.clone(),
            options.redelivery_timeout,
            options.marker_timeout,
        )?);
        let keepalive = if options.auto_keepalive {
            Some(KeepaliveThread::spawn(Arc::clone(&writer))?)
        } else {
            None
        };
        let prefetch = StartPrefetch::spawn(PrefetchSetup {
            consumer,
            starts,
            writer: Arc::clone(&writer),
            metadata,
            queue_topic: options.queue_topic.clone(),
            dead_letter_topic: options.dead_letter_topic.clone(),
            max_batch_size: options.max_batch_size,
            marker_timeout: options.marker_timeout,
        })?;
        Ok(QueueConsumer {
            prefetch,
            writer,
            _keepalive: keepalive,
            options,
            acked: AtomicU64::new(0),
            nacked: AtomicU64::new(0),
        })
    }

    /// Waits up to `wait` for messages and returns at most `max` of them (none when nothing
    /// came), after their START markers are acknowledged and their offsets committed; or a
    /// message handed back because its START was refused for good. The first call starts the
    /// prefetch: the next batch is marked while the caller handles this one.
    pub fn fetch(&self, max: usize, wait: Duration) -> KafkaResult<Taken> {
        self.prefetch.take(max, wait)
    }

    /// Processing of the message at `partition`/`offset` finished: writes its END marker.
    pub fn ack(&self, partition: i32, offset: i64) -> KafkaResult<()> {
        self.ack_many(&[(partition, offset)])
    }

    /// Processing of the messages at `partition`/`offset` finished: writes their END markers.
    pub fn ack_many(&self, messages: &[(i32, i64)]) -> KafkaResult<()> {
        let ids: Vec<MessageId> = messages.iter().map(|&(p, o)| message_id(p, o)).collect();
        let outcome = self
            .writer
            .finish(&ids, |message_id| Some(Marker::End { message_id }));
        if outcome.is_ok() {
            self.acked.fetch_add(ids.len() as u64, Ordering::Relaxed);
        }
        outcome
    }

    /// Processing continues: moves the redelivery deadline to now + the redelivery timeout.
    pub fn keepalive(&self, partition: i32, offset: i64) -> KafkaResult<()> {
        self.writer.keepalive(message_id(partition, offset))
    }

    /// Processing failed. `now`: the deadline moves to now, so the tracker redelivers the
    /// message at once. Otherwise (kafka-mq-go's Interrupt) only its keepalive stops, so it is
    /// redelivered when its current deadline passes, at most one redelivery timeout from now.
    /// Either way it counts as a redelivery (dead-lettered after `max_redeliveries`).
    pub fn nack(&self, partition: i32, offset: i64, now: bool) -> KafkaResult<()> {
        let id = message_id(partition, offset);
        self.writer.finish(&[id], |message_id| {
            now.then(|| Marker::KeepAlive {
                message_id,
                deadline: now_ms(),
            })
        })?;
        self.nacked.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Waits up to `timeout` until every END/KEEPALIVE marker written so far is acknowledged.
    pub fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        self.writer.flush(timeout)
    }

    /// Before a close: waits up to `timeout` for the markers, then logs how many were not
    /// written (their messages are redelivered after their deadline). Dropping the consumer
    /// afterwards takes about a second more (see `start_prefetch.rs`) and librdkafka's close.
    pub fn finish_markers(&self, timeout: Duration) {
        if self.writer.flush(timeout).is_err() {
            log::warn!(
                "QueueConsumer closing: {} END/KEEPALIVE markers of {} not written within {:.1} s; \
                 their messages are redelivered after their deadline",
                self.writer.unwritten(),
                self.options.markers_topic,
                timeout.as_secs_f64()
            );
        }
    }

    /// The counters.
    pub fn stats(&self) -> QueueConsumerStats {
        QueueConsumerStats {
            received: self.prefetch.received(),
            acked: self.acked.load(Ordering::Relaxed),
            nacked: self.nacked.load(Ordering::Relaxed),
            keepalives: self.writer.keepalives(),
            failed_markers: self.writer.failed(),
            refused: self.prefetch.refused(),
        }
    }
}

// ---- tracker --------------------------------------------------------------------------------

/// Settings of a [`RedeliveryTracker`] beyond librdkafka's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedeliveryOptions {
    /// Where redelivered messages go.
    pub queue_topic: String,
    /// The markers topic to track.
    pub markers_topic: String,
    /// Consumer group of the trackers of this markers topic.
    pub group_id: String,
    /// Redeliveries before a message is dead-lettered [3].
    pub max_redeliveries: u32,
    /// Where messages go after `max_redeliveries`; `None` logs, counts and drops them.
    pub dead_letter_topic: Option<String>,
    /// Fall back to the wall clock when no marker was read for this long [60 s].
    pub use_now_if_no_marker_seen: Duration,
    /// Commit after this many markers of a partition [1000] ...
    pub num_offsets_per_commit: u64,
    /// ... or after this long [5 s], and on stop.
    pub commit_interval: Duration,
    /// Longest pause between retries of a failed redelivery write [30 s].
    pub max_backoff: Duration,
    /// Deadline of one synchronous redelivery write [30 s].
    pub produce_timeout: Duration,
}

impl Default for RedeliveryOptions {
    fn default() -> Self {
        RedeliveryOptions {
            queue_topic: String::new(),
            markers_topic: String::new(),
            group_id: "ferrokafka-redelivery".to_owned(),
            max_redeliveries: 3,
            dead_letter_topic: None,
            use_now_if_no_marker_seen: Duration::from_secs(60),
            num_offsets_per_commit: 1000,
            commit_interval: Duration::from_secs(5),
            max_backoff: Duration::from_secs(30),
            produce_timeout: Duration::from_secs(30),
        }
    }
}

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
        if options.queue_topic.is_empty() || options.markers_topic.is_empty() {
            return Err(KafkaIoError::InvalidArgument(
                "queue_topic and markers_topic must be non-empty".to_owned(),
            ));
        }
        require_group_id(&options.group_id)?;
        if options.dead_letter_topic.as_deref() == Some("") {
            return Err(KafkaIoError::InvalidArgument(
                "dead_letter_topic must be None or a non-empty topic name".to_owned(),
            ));
        }
        if options.num_offsets_per_commit == 0 {
            return Err(KafkaIoError::InvalidArgument(
                "num_offsets_per_commit must be >= 1".to_owned(),
            ));
        }
        let daemon = Tracker::new(settings, options)?;
        Daemon::spawn("ferrokafka-redelivery", move |stop, status| {
            daemon.run(stop, status)
        })
    }
}

struct Tracker {
    consumer: BaseConsumer<GroupContext>,
    producer: ThreadedProducer<FlushTracker>,
    options: RedeliveryOptions,
    partitions: BTreeMap<i32, MarkersPartition>,
}

impl Tracker {
    fn new(settings: ClientSettings, options: RedeliveryOptions) -> KafkaResult<Self> {
        settings.bootstrap()?;
        // The tracker's state is the markers after the committed offset, not the whole topic.
        let consumer: BaseConsumer<GroupContext> = oauth::create(
            &group_consumer_settings(&settings, &options.group_id).to_client_config(),
            GroupContext::new("redelivery tracker", &settings, false),
        )
        .map_err(creation_error("create markers consumer"))?;
        consumer
            .subscribe(&[options.markers_topic.as_str()])
            .map_err(creation_error("subscribe to the markers topic"))?;
        let mut producer_settings = producer_settings(&settings);
        producer_settings.remove("transactional.id");
        producer_settings.set_default("enable.idempotence", "true");
        // Writes are synchronous: a long linger would only add to the redelivery lateness.
        producer_settings.set_default("linger.ms", "1");
        let producer = oauth::create(
            &producer_settings.to_client_config(),
            FlushTracker::new(settings.token_refresh()),
        )
        .map_err(creation_error("create redelivery producer"))?;
        Ok(Tracker {
            consumer,
            producer,
            options,
            partitions: BTreeMap::new(),
        })
    }

    /// Runs until `stop` is set, or until the consumer's connection is refused before it ever
    /// worked (see [`GroupContext::poll_error`]).
    fn run(
        mut self,
        stop: &AtomicBool,
        status: &Mutex<DaemonStatus<TrackerPartitionStatus>>,
    ) -> KafkaResult<()> {
        log::info!(
            "redelivery tracker started for {} (markers {}, group {})",
            self.options.queue_topic,
            self.options.markers_topic,
            self.options.group_id
        );
        while !stop.load(Ordering::Acquire) {
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

    /// Redelivers every due message of every caught-up partition not backing off.
    fn redeliver_due(&mut self) {
        let use_now = self.options.use_now_if_no_marker_seen;
        let keys: Vec<i32> = self.partitions.keys().copied().collect();
        for partition in keys {
            let Some(run) = self.partitions.get_mut(&partition) else {
                continue;
            };
            if !run.status.caught_up || run.retry_after.is_some_and(|t| Instant::now() < t) {
                continue;
            }
            run.retry_after = None;
            let mut due = std::mem::take(&mut run.retry);
            due.extend(run.queue.markers_to_redeliver(run.clock(use_now)));
            let ends = std::mem::take(&mut run.ends_to_write);
            if due.is_empty() && ends.is_empty() {
                continue;
            }
            let outcome = self.write_redeliveries(partition, due, ends);
            let Some(run) = self.partitions.get_mut(&partition) else {
                continue;
            };
            match outcome {
                Ok(()) => run.backoff = FIRST_BACKOFF,
                Err(e) => {
                    log::error!(
                        "redelivery from {}-{partition} failed, retrying in {:?}: {e}",
                        self.options.markers_topic,
                        run.backoff
                    );
                    run.retry_after = Some(Instant::now() + run.backoff);
                    run.backoff = (run.backoff * 2).min(self.options.max_backoff);
                }
            }
        }
    }

    /// Writes the redeliveries (or dead letters), then their END markers together with `ends`
    /// left over from an earlier failure. On failure, what must be written again is put back
    /// into the partition's retry lists.
    fn write_redeliveries(
        &mut self,
        markers_partition: i32,
        due: Vec<Redelivery>,
        mut ends: Vec<MessageId>,
    ) -> KafkaResult<()> {
        let timeout = self.options.produce_timeout;
        let mut records = Vec::with_capacity(due.len());
        let (mut redelivered, mut dead_lettered, mut dropped) = (0, 0, 0);
        for item in &due {
            match self.redelivery_record(item) {
                Some((record, dead)) => {
                    records.push(record);
                    if dead {
                        dead_lettered += 1;
                    } else {
                        redelivered += 1;
                    }
                }
                None => dropped += 1,
            }
        }
        if let Err(e) = send_all(&self.producer, &records, timeout) {
            if let Some(run) = self.partitions.get_mut(&markers_partition) {
                run.retry = due;
                run.ends_to_write = ends;
            }
            return Err(e);
        }
        ends.extend(due.iter().map(|item| item.message_id));
        let end_records: Vec<OutgoingRecord> = ends
            .iter()
            .map(|&message_id| OutgoingRecord {
                topic: self.options.markers_topic.clone(),
                partition: Some(markers_partition),
                value: Some(encode_marker(&Marker::End { message_id })),
                ..OutgoingRecord::default()
            })
            .collect();
        let ended = send_all(&self.producer, &end_records, timeout);
        if let Some(run) = self.partitions.get_mut(&markers_partition) {
            run.status.redelivered += redelivered;
            run.status.dead_lettered += dead_lettered;
            run.status.dropped += dropped;
            if ended.is_err() {
                run.ends_to_write = ends;
            }
        }
        ended
    }

    /// The record that redelivers `item` and whether it is a dead letter; `None` when it is
    /// past `max_redeliveries` and there is no dead-letter topic (logged).
    fn redelivery_record(&self, item: &Redelivery) -> Option<(OutgoingRecord, bool)> {
        let payload = &item.payload;
        let count = redelivery_count(&payload.headers);
        if count < self.options.max_redeliveries {
            let mut headers: HeaderList = payload
                .headers
                .iter()
                .filter(|(name, _)| name != REDELIVERY_COUNT_HEADER)
                .cloned()
                .collect();
            headers.push((
                REDELIVERY_COUNT_HEADER.to_owned(),
                Some((count + 1).to_string().into_bytes()),
            ));
            let record = OutgoingRecord {
                topic: self.options.queue_topic.clone(),
                partition: Some(i32::try_from(item.message_id.partition).unwrap_or(0)),
                key: payload.key.clone(),
                value: payload.value.clone(),
                headers,
                timestamp_ms: None,
            };
            return Some((record, false));
        }
        let Some(topic) = &self.options.dead_letter_topic else {
            log::error!(
                "{}-{}@{}: redelivered {count} times, no dead_letter_topic: dropped \
                 (key {:?}, {} value bytes)",
                self.options.queue_topic,
                item.message_id.partition,
                item.message_id.offset,
                payload.key.as_deref().map(String::from_utf8_lossy),
                payload.value.as_ref().map_or(0, Vec::len)
            );
            return None;
        };
        let record = dead_letter(
            topic,
            &self.options.queue_topic,
            item.message_id,
            count,
            payload.key.clone(),
            payload.value.clone(),
            &payload.headers,
        );
        Some((record, true))
    }

    /// Commits (asynchronously) each partition up to its smallest open START, when enough
    /// markers were read or the interval passed.
    fn commit(&mut self) {
        let (offsets, committed) = self.commit_positions(false);
        if committed.is_empty() {
            return;
        }
        if let Err(e) = self.consumer.commit(&offsets, CommitMode::Async) {
            log::warn!("markers offsets not committed: {e}");
            return;
        }
        self.note_committed(committed);
    }

    /// The offsets to commit (each partition's smallest open START, when due or `all`) and the
    /// (partition, position) pairs they stand for.
    fn commit_positions(&self, all: bool) -> (TopicPartitionList, Vec<(i32, u64)>) {
        let mut offsets = TopicPartitionList::new();
        let mut committed = Vec::new();
        for (partition, run) in &self.partitions {
            let Some(position) = run.queue.smallest_open_marker_offset() else {
                continue;
            };
            let due = all
                || run.applied_since_commit >= self.options.num_offsets_per_commit
                || run.last_commit.elapsed() >= self.options.commit_interval;
            if !due || run.status.committed == Some(position) {
                continue;
            }
            let Ok(offset) = i64::try_from(position) else {
                continue;
            };
            if offsets
                .add_partition_offset(
                    &self.options.markers_topic,
                    *partition,
                    Offset::Offset(offset),
                )
                .is_ok()
            {
                committed.push((*partition, position));
            }
        }
        (offsets, committed)
    }

    fn note_committed(&mut self, committed: Vec<(i32, u64)>) {
        for (partition, position) in committed {
            if let Some(run) = self.partitions.get_mut(&partition) {
                run.status.committed = Some(position);
                run.applied_since_commit = 0;
                run.last_commit = Instant::now();
            }
        }
    }

    /// Stops within [`SHUTDOWN_BUDGET`] (and the close's grace) whatever the broker does:
    /// redeliveries on their way are flushed, then every partition's position is committed
    /// and the group left; the status is published with what the commit confirmed.
    fn shutdown(self, status: &Mutex<DaemonStatus<TrackerPartitionStatus>>) {
        let deadline = Instant::now() + SHUTDOWN_BUDGET;
        flush_before(
            &self.producer,
            deadline,
            "redelivery tracker",
            "redelivered message(s)",
        );
        let (offsets, committed) = self.commit_positions(true);
        let mut status_now = self.status();
        let Tracker { consumer, .. } = self;
        let final_commit = move |consumer: &BaseConsumer<GroupContext>| {
            if offsets.count() == 0 {
                return Ok(());
            }
            consumer.commit(&offsets, CommitMode::Sync)
        };
        match commit_and_close(consumer, final_commit, deadline, "redelivery tracker") {
            Some(Ok(())) => {
                for (partition, position) in committed {
                    let rows = &mut status_now.partitions;
                    if let Some(row) = rows.iter_mut().find(|row| row.partition == partition) {
                        row.committed = Some(position);
                    }
                }
            }
            Some(Err(e)) => log::warn!("markers offsets not committed: {e}"),
            None => {}
        }
        publish(status, status_now);
        log::info!("redelivery tracker stopped");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redelivery_count_reads_the_last_header_and_defaults_to_zero() {
        let header = |v: &str| {
            (
                REDELIVERY_COUNT_HEADER.to_owned(),
                Some(v.as_bytes().to_vec()),
            )
        };
        assert_eq!(redelivery_count(&[]), 0);
        assert_eq!(redelivery_count(&[header("1"), header("2")]), 2);
        assert_eq!(redelivery_count(&[header("x")]), 0);
    }
}
