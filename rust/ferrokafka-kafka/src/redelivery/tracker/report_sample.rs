//! The redelivery tracker's part of a process report: librdkafka's statistics of its markers
//! consumer, with the messages handed out and not yet acknowledged as each partition's lag.

use ferrokafka_core::tracking::SourceSample;

use crate::daemon::DaemonStatus;
use crate::redelivery::TrackerPartitionStatus;
use crate::report_sample::{DaemonCounts, GroupMember, pending_partition};

/// The sample of a tracker that is `member`, reading `markers_topic`, as of `status`: markers
/// read count as messages, undecodable ones as errors, redeliveries as retries, and messages
/// dead-lettered or dropped as dead.
pub(super) fn report_sample(
    member: &GroupMember,
    markers_topic: &str,
    status: DaemonStatus<TrackerPartitionStatus>,
) -> SourceSample {
    let counts = |row: &TrackerPartitionStatus| DaemonCounts {
        messages: row.applied,
        errors: row.undecodable,
        retries: row.redelivered,
        dead: row.dead_lettered + row.dropped,
    };
    member.daemon_source(&status, counts, |row| {
        let committed = row.committed.map(|o| i64::try_from(o).unwrap_or(i64::MAX));
        let broker = row.broker.as_ref();
        pending_partition(
            markers_topic.to_owned(),
            row.partition,
            row.open,
            committed,
            broker,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::settings_of;

    #[test]
    fn every_partitions_counts_add_up_to_the_trackers_totals_and_open_messages_are_its_lag() {
        let row = |partition, applied, redelivered, dead_lettered, dropped, undecodable| {
            TrackerPartitionStatus {
                partition,
                open: 2,
                applied,
                redelivered,
                dead_lettered,
                dropped,
                undecodable,
                ..TrackerPartitionStatus::default()
            }
        };
        let status = DaemonStatus {
            partitions: vec![row(0, 10, 1, 2, 3, 4), row(1, 100, 10, 20, 30, 40)],
            ..DaemonStatus::default()
        };
        let member = GroupMember::new("trackers", &settings_of(&[("bootstrap.servers", "b:1")]));
        let sample = report_sample(&member, "jobs-markers", status);
        let totals = &sample.totals;
        assert_eq!(
            (totals.messages, totals.retries, totals.dead, totals.errors),
            (110, 11, 55, 44)
        );
        assert_eq!(sample.consumer_group, "trackers");
        let lags: Vec<_> = sample
            .partitions
            .iter()
            .map(|p| (p.topic.as_str(), p.partition, p.lag))
            .collect();
        assert_eq!(
            lags,
            [("jobs-markers", 0, Some(2)), ("jobs-markers", 1, Some(2))]
        );
    }
}
