//! The redelivery tracker's part of a process report: librdkafka's statistics of its markers
//! consumer, with the messages handed out and not yet acknowledged as each partition's lag.

use ferrokafka_core::tracking::{SourceSample, SourceTotals};

use crate::daemon::DaemonStatus;
use crate::redelivery::TrackerPartitionStatus;
use crate::report_sample::{GroupMember, pending_partition};

/// The sample of a tracker that is `member`, reading `markers_topic`, as of `status`: markers
/// read count as messages, undecodable ones as errors, redeliveries as retries, and messages
/// dead-lettered or dropped as dead.
pub(super) fn report_sample(
    member: &GroupMember,
    markers_topic: &str,
    status: DaemonStatus<TrackerPartitionStatus>,
) -> SourceSample {
    let rows = &status.partitions;
    let totals = SourceTotals {
        messages: rows.iter().map(|row| row.applied).sum(),
        errors: rows.iter().map(|row| row.undecodable).sum(),
        retries: rows.iter().map(|row| row.redelivered).sum(),
        dead: rows.iter().map(|row| row.dead_lettered + row.dropped).sum(),
        ..SourceTotals::default()
    };
    member.daemon_source(&status, totals, |row| {
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
