//! The scheduler's part of a process report: librdkafka's statistics of its group consumer,
//! with the schedules pending as each partition's lag.

use ferrokafka_core::tracking::SourceSample;

use super::PartitionStatus;
use crate::daemon::DaemonStatus;
use crate::report_sample::{DaemonCounts, GroupMember, pending_partition};

/// The sample of a scheduler that is `member`, as of `status`: schedules dispatched count as
/// messages, records skipped as errors.
pub(super) fn report_sample(
    member: &GroupMember,
    status: DaemonStatus<PartitionStatus>,
) -> SourceSample {
    let counts = |row: &PartitionStatus| DaemonCounts {
        messages: row.dispatched,
        errors: row.skipped,
        ..DaemonCounts::default()
    };
    member.daemon_source(&status, counts, |row| {
        let broker = row.broker.as_ref();
        pending_partition(row.topic.clone(), row.partition, row.pending, None, broker)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::settings_of;

    #[test]
    fn dispatched_schedules_are_messages_skipped_records_errors_and_pending_ones_the_lag() {
        let row = |partition, pending, dispatched, skipped| PartitionStatus {
            topic: "schedules".to_owned(),
            partition,
            state: "loaded",
            pending,
            dispatched,
            skipped,
            failed: 7,
            applied: 1000,
            broker: None,
        };
        let status = DaemonStatus {
            partitions: vec![row(0, 3, 40, 1), row(1, 5, 2, 0)],
            ..DaemonStatus::default()
        };
        let member = GroupMember::new("schedulers", &settings_of(&[("bootstrap.servers", "b:1")]));
        let sample = report_sample(&member, status);
        let totals = &sample.totals;
        assert_eq!(
            (totals.messages, totals.errors, totals.retries, totals.dead),
            (42, 1, 0, 0)
        );
        let lags: Vec<_> = sample
            .partitions
            .iter()
            .map(|p| (p.partition, p.lag))
            .collect();
        assert_eq!(lags, [(0, Some(3)), (1, Some(5))]);
    }
}
