//! The lags a consumer reports for a partition, also before its group's first commit.
//!
//! librdkafka knows no lag before the group's first commit; then, like Karafka Web's enricher
//! that fills it from the consumer's own position, the lag counts from where this consumer
//! began reading the partition (its first record, or librdkafka's fetch position). A commit the
//! broker confirmed after the latest statistics (every one a stopping consumer makes) is newer
//! than they are: the committed offset and the lag to it come from that commit. The end of the
//! partition is its last stable offset for a `read_committed` consumer (where known), else its
//! high watermark. A lag is never negative.
//!
//! Pure: the engine hands in its progress and librdkafka's statistics as it keeps them.

use crate::tracking::{PartitionSample, PartitionStatistics};

/// What the consumer engine knows of a partition beyond librdkafka's statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerProgress {
    /// The last offset the broker confirmed committed.
    pub committed: Option<i64>,
    /// Offset of the first record received since the assignment.
    pub first_received: Option<i64>,
    /// Next offset to commit: one past the last record of the last finished batch.
    pub position: Option<i64>,
}

/// `(lag, lag_stored, committed_offset)` where the consumer's progress knows better than
/// `statistics`; `None`: the statistics' figure stands.
fn lags_known_better(
    statistics: &PartitionStatistics,
    progress: ConsumerProgress,
    read_committed: bool,
) -> (Option<i64>, Option<i64>, Option<i64>) {
    let s = statistics;
    let end = if read_committed && s.ls_offset >= 0 {
        s.ls_offset
    } else {
        s.hi_offset
    };
    let (mut lag, mut lag_stored, mut committed_offset) = (None, None, None);
    if let Some(committed) = progress.committed
        && committed > s.committed_offset
    {
        committed_offset = Some(committed);
        lag = Some((end - committed).max(0));
    }
    let started = progress
        .first_received
        .or((s.next_offset >= 0).then_some(s.next_offset));
    if lag.is_none()
        && s.lag < 0
        && end >= 0
        && let Some(started) = started
    {
        lag = Some((end - started).max(0));
    }
    if s.lag_stored < 0
        && end >= 0
        && let Some(stored) = progress.position.or(started)
    {
        lag_stored = Some((end - stored).max(0));
    }
    (lag, lag_stored, committed_offset)
}

impl PartitionSample {
    /// A consumer's partition for a process report: librdkafka's `statistics` of it (`None`
    /// before the first arrived), whether load control holds it `paused`, and the lags and
    /// committed offset the consumer's own `progress` knows better (see the module docs).
    pub fn of_consumer(
        topic: String,
        partition: u32,
        paused: bool,
        statistics: Option<PartitionStatistics>,
        progress: ConsumerProgress,
        read_committed: bool,
    ) -> Self {
        let (lag, lag_stored, committed_offset) =
            statistics.as_ref().map_or((None, None, None), |s| {
                lags_known_better(s, progress, read_committed)
            });
        PartitionSample {
            topic,
            partition,
            lag,
            lag_stored,
            committed_offset,
            fetch_state: None,
            paused,
            statistics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition of 10 records (high watermark 10) that librdkafka knows no lag of yet.
    fn before_first_commit() -> PartitionStatistics {
        PartitionStatistics {
            hi_offset: 10,
            ls_offset: 8,
            ..PartitionStatistics::default()
        }
    }

    /// A consumer that received its first record at `offset`, and committed nothing.
    fn received_from(offset: i64) -> ConsumerProgress {
        ConsumerProgress {
            first_received: Some(offset),
            ..ConsumerProgress::default()
        }
    }

    fn sample(
        statistics: Option<PartitionStatistics>,
        progress: ConsumerProgress,
        read_committed: bool,
    ) -> PartitionSample {
        PartitionSample::of_consumer(
            "orders".into(),
            0,
            false,
            statistics,
            progress,
            read_committed,
        )
    }

    #[test]
    fn before_the_first_commit_the_lag_counts_from_the_first_record_received() {
        let progress = received_from(4);
        let got = sample(Some(before_first_commit()), progress, false);
        assert_eq!(
            (got.lag, got.lag_stored, got.committed_offset),
            (Some(6), Some(6), None)
        );
        // read_committed: the end is the last stable offset.
        let got = sample(Some(before_first_commit()), progress, true);
        assert_eq!((got.lag, got.lag_stored), (Some(4), Some(4)));
    }

    #[test]
    fn without_a_record_yet_the_lag_counts_from_librdkafkas_fetch_position() {
        let statistics = PartitionStatistics {
            next_offset: 7,
            ..before_first_commit()
        };
        let got = sample(Some(statistics), ConsumerProgress::default(), false);
        assert_eq!((got.lag, got.lag_stored), (Some(3), Some(3)));
        // Neither a record nor a fetch position: nothing is known, nothing is made up.
        let got = sample(
            Some(before_first_commit()),
            ConsumerProgress::default(),
            false,
        );
        assert_eq!((got.lag, got.lag_stored), (None, None));
    }

    #[test]
    fn the_stored_lag_counts_from_the_consumers_position() {
        let progress = ConsumerProgress {
            position: Some(9),
            ..received_from(4)
        };
        let got = sample(Some(before_first_commit()), progress, false);
        assert_eq!((got.lag, got.lag_stored), (Some(6), Some(1)));
    }

    #[test]
    fn a_commit_newer_than_the_statistics_sets_the_committed_offset_and_its_lag() {
        let statistics = PartitionStatistics {
            lag: 5,
            lag_stored: 5,
            committed_offset: 5,
            ..before_first_commit()
        };
        let progress = ConsumerProgress {
            committed: Some(9),
            first_received: Some(0),
            position: Some(9),
        };
        let got = sample(Some(statistics.clone()), progress, false);
        assert_eq!(
            (got.lag, got.lag_stored, got.committed_offset),
            (Some(1), None, Some(9))
        );
        // A commit the statistics already saw changes nothing: librdkafka's figures stand.
        let seen = ConsumerProgress {
            committed: Some(5),
            ..progress
        };
        let got = sample(Some(statistics), seen, false);
        assert_eq!(
            (got.lag, got.lag_stored, got.committed_offset),
            (None, None, None)
        );
    }

    #[test]
    fn a_lag_is_never_negative_and_an_unknown_end_leaves_it_unknown() {
        let progress = received_from(12);
        let got = sample(Some(before_first_commit()), progress, false);
        assert_eq!(got.lag, Some(0));
        let no_end = PartitionStatistics::default();
        let got = sample(Some(no_end), progress, false);
        assert_eq!((got.lag, got.lag_stored), (None, None));
    }

    #[test]
    fn without_statistics_the_sample_only_says_whether_it_is_paused() {
        let progress = ConsumerProgress {
            committed: Some(3),
            first_received: Some(0),
            position: Some(3),
        };
        let got = PartitionSample::of_consumer("orders".into(), 2, true, None, progress, true);
        assert_eq!(
            (got.lag, got.lag_stored, got.committed_offset),
            (None, None, None)
        );
        assert!(got.paused && got.statistics.is_none());
    }
}
