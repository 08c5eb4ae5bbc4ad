//! What every engine's part of a process report shares: who the engine is in the report (its
//! group, its static member id and its `max.poll.interval.ms`, read from its settings once)
//! and the frame of its [`SourceSample`]. Each engine fills the frame from its own figures in
//! its own room: `consumer/report_sample.rs`, `scheduling/report_sample.rs`,
//! `redelivery/tracker/report_sample.rs`.

use ferrokafka_core::tracking::{PartitionSample, SourceSample, SourceTotals};

use std::time::Duration;

use crate::config::ClientSettings;
use crate::daemon::DaemonStatus;
use crate::statistics::{BrokerOffsets, GroupStatistics};

/// librdkafka's default `max.poll.interval.ms`.
const DEFAULT_MAX_POLL_INTERVAL_MS: u64 = 300_000;

/// Who an engine is in a process report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GroupMember {
    /// The consumer group the report lists the engine under.
    group: String,
    /// `group.instance.id` of a static member.
    instance_id: Option<String>,
    /// `max.poll.interval.ms` (librdkafka's default unless set; librdkafka itself refuses a
    /// value that is not a number).
    poll_interval: u64,
}

impl GroupMember {
    /// The member of `group` that a client with `settings` is.
    pub(crate) fn new(group: &str, settings: &ClientSettings) -> Self {
        GroupMember {
            group: group.to_owned(),
            instance_id: settings.get("group.instance.id").map(str::to_owned),
            poll_interval: settings
                .get("max.poll.interval.ms")
                .and_then(|value| value.trim().parse().ok())
                .unwrap_or(DEFAULT_MAX_POLL_INTERVAL_MS),
        }
    }

    /// `max.poll.interval.ms`: how long a handler may run before it is said to overrun.
    pub(crate) fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval)
    }

    /// A source of one listener with a worker per partition (at least one), none of them
    /// busy: the engine sets what it knows beyond that.
    pub(crate) fn source(
        &self,
        group: Option<&GroupStatistics>,
        transfer_rates: Option<(u64, u64)>,
        partitions: Vec<PartitionSample>,
        totals: SourceTotals,
    ) -> SourceSample {
        let (bytes_received, bytes_sent) = transfer_rates.unzip();
        SourceSample {
            consumer_group: self.group.clone(),
            subscription_group: None,
            instance_id: self.instance_id.clone(),
            group_state: group.map(GroupStatistics::sample),
            poll_age: 0.0,
            poll_interval: self.poll_interval,
            listeners: 1,
            workers: partitions.len().max(1) as u64,
            busy: 0,
            enqueued: 0,
            totals,
            bytes_received,
            bytes_sent,
            partitions,
            jobs: Vec::new(),
        }
    }

    /// A daemon's source as of `status`: its group's state and transfer rates, the `counts`
    /// of every partition's row summed, and each row as `partition` samples it (see
    /// [`pending_partition`]).
    pub(crate) fn daemon_source<P>(
        &self,
        status: &DaemonStatus<P>,
        counts: impl Fn(&P) -> DaemonCounts,
        partition: impl Fn(&P) -> PartitionSample,
    ) -> SourceSample {
        let rows = &status.partitions;
        let mut totals = SourceTotals::default();
        for row in rows {
            let row = counts(row);
            totals.messages += row.messages;
            totals.errors += row.errors;
            totals.retries += row.retries;
            totals.dead += row.dead;
        }
        self.source(
            status.group.as_ref(),
            status.transfer_rates,
            rows.iter().map(partition).collect(),
            totals,
        )
    }
}

/// What one partition's row of a daemon counts toward its source's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DaemonCounts {
    /// Records the daemon did its work for (dispatched, or applied).
    pub messages: u64,
    /// Records it could not read.
    pub errors: u64,
    /// Work done again (redeliveries).
    pub retries: u64,
    /// Records given up: dead-lettered or dropped.
    pub dead: u64,
}

/// A partition number as reports write it; assigned partitions are never negative.
pub(crate) fn reported_partition(partition: i32) -> u32 {
    u32::try_from(partition).unwrap_or_default()
}

/// A daemon's partition: librdkafka's statistics of it (`broker`), with the work the daemon
/// has pending there as both its lags (Karafka Web still computes the pace from the offsets).
pub(crate) fn pending_partition(
    topic: String,
    partition: i32,
    pending: usize,
    committed_offset: Option<i64>,
    broker: Option<&BrokerOffsets>,
) -> PartitionSample {
    let pending = i64::try_from(pending).unwrap_or(i64::MAX);
    PartitionSample {
        topic,
        partition: reported_partition(partition),
        lag: Some(pending),
        lag_stored: Some(pending),
        committed_offset,
        fetch_state: None,
        paused: false,
        statistics: broker.map(BrokerOffsets::statistics),
    }
}
