//! The daemons' group consumer: its settings, its context (rebalance recording, refused
//! connections, librdkafka's statistics) and the end-of-partition check.

use std::ffi::CString;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::DaemonStatus;
use crate::config::{ClientRole, ClientSettings};
use crate::connection_failure::{ConnectionWatch, watch_connection};
use crate::error::{KafkaIoError, KafkaResult};
use crate::oauth::{TokenRefresh, answer_token_refresh};
use crate::statistics::{BrokerOffsets, KeptStatistics};
use crate::undecodable::undecodable_error;

/// Refuses an empty `group.id`, which librdkafka would only report as a consumer without a
/// queue ("rdkafka consumer queue not available").
pub(crate) fn require_group_id(group_id: &str) -> KafkaResult<()> {
    if group_id.is_empty() {
        return Err(KafkaIoError::InvalidArgument(
            "group_id must be a non-empty consumer group name".to_owned(),
        ));
    }
    if group_id.contains('\0') {
        return Err(KafkaIoError::InvalidArgument(format!(
            "group_id {group_id:?} contains a NUL byte"
        )));
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

/// Default statistics interval of the daemons' group consumers: the interval at which a
/// `Consumer` with a default tracking reporter gets them.
const DAEMON_STATISTICS_INTERVAL_MS: &str = "5000";

/// Default group session timeout of the daemons: how long a dead daemon's partitions wait before
/// another daemon takes them (a restart with the same `group.instance.id` takes them back at once).
const DAEMON_SESSION_TIMEOUT_MS: &str = "10000";

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
        let place = format!("a partition {} reads", self.daemon);
        if let Some(explained) = undecodable_error("poll", &place, &error) {
            // Fetched again and again until the setting is raised: said with the way out.
            log::error!("{} consumer: {explained}", self.daemon);
            return Ok(());
        }
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

    watch_connection!(watch);
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

/// Whether the consumer has read `topic`/`partition` to the end its last fetch saw: its position
/// (which, unlike the last record's offset, steps over transaction markers) or `next_offset`
/// reached the high watermark that fetch brought. Asked at a partition-end event, whose fetch
/// set that watermark, so nothing is asked of the broker: a watermark request waits behind the
/// consumer's next fetch, which the broker holds up to `fetch.wait.max.ms` (500 ms) when nothing
/// is new, and loading partitions one check after the other took half a second each. `None`
/// while the position or the watermark is unknown (a partition not fetched yet).
pub(crate) fn at_partition_end<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
    next_offset: i64,
) -> Option<bool> {
    let position = consumer
        .position()
        .ok()?
        .find_partition(topic, partition)
        .and_then(|e| e.offset().to_raw())
        .unwrap_or(-1);
    let high = last_fetched_high_watermark(consumer, topic, partition)?;
    Some(position >= high || next_offset >= high)
}

/// The high watermark of `topic`/`partition` as the consumer's last fetch of it reported, without
/// a request; `None` before any fetch.
fn last_fetched_high_watermark<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let topic = CString::new(topic).ok()?;
    let (mut low, mut high) = (-1_i64, -1_i64);
    // SAFETY: a live handle, a NUL-terminated topic name and two writable offsets; librdkafka
    // only reads its cache.
    let err = unsafe {
        rdsys::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}
