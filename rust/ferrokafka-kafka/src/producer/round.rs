//! The open transaction's delivery reports ([`OpenRound`]), kept by the delivery callback until
//! the worker settles the transaction by its commit or abort.

use super::pending::Pending;
use super::reports::Written;
use crate::error::KafkaIoError;
use crate::transaction_outcome::Witness;

/// The open transaction: its records' reports as librdkafka gives them, the failed sends of
/// its records by position (their in-flight words carry the position instead), and where the
/// first record reported written landed (what a commit left unanswered is checked by).
#[derive(Default)]
pub(super) struct OpenRound {
    pub(super) reports: Vec<RoundReport>,
    pub(super) failures: Vec<u32>,
    pub(super) witness: Option<Witness>,
}

/// A record's report within the open transaction.
pub(super) struct RoundReport {
    pub(super) pending: Box<Pending>,
    /// Where it was written (copied only for a record whose result the caller wants), or why
    /// it failed and whether sending it again may succeed.
    pub(super) outcome: Result<Option<Written>, (KafkaIoError, bool)>,
}

impl RoundReport {
    /// A record of a failed round that never reached librdkafka: it fails with the round.
    pub(super) fn not_sent(pending: Box<Pending>) -> Self {
        RoundReport {
            pending,
            outcome: Ok(None),
        }
    }
}

/// The records of an ended transaction, then those never handed over, to hand back in order.
pub(super) fn round_records(
    reports: Vec<RoundReport>,
    unsent: Vec<Box<Pending>>,
) -> Vec<Box<Pending>> {
    reports
        .into_iter()
        .map(|r| r.pending)
        .chain(unsent)
        .collect()
}
