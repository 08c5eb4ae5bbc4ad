//! The scheduler's part of a process report: librdkafka's statistics of its group consumer,
//! with the schedules pending as each partition's lag.

use ferrokafka_core::tracking::{SourceSample, SourceTotals};

use super::PartitionStatus;
use crate::daemon::DaemonStatus;
use crate::report_sample::{GroupMember, pending_partition};

/// The sample of a scheduler that is `member`, as of `status`: schedules dispatched count as
/// messages, records skipped as errors.
pub(super) fn report_sample(
    member: &GroupMember,
    status: DaemonStatus<PartitionStatus>,
) -> SourceSample {
    let rows = &status.partitions;
    let totals = SourceTotals {
        messages: rows.iter().map(|row| row.dispatched).sum(),
        errors: rows.iter().map(|row| row.skipped).sum(),
        ..SourceTotals::default()
    };
    member.daemon_source(&status, totals, |row| {
        let broker = row.broker.as_ref();
        pending_partition(row.topic.clone(), row.partition, row.pending, None, broker)
    })
}
