//! [`ErrorPolicy`]: what a handler exception does to the batch it raised on.
//!
//! A consumer hands a partition's records to a handler as batches. When the handler raises, the
//! policy decides, from how often the batch was retried already and whether the partition is
//! closing (revoked, or the consumer stopping), what happens next ([`Decision`]):
//! - `commit`: the batch's offsets become committable as if it had been handled (the failure is
//!   only logged and reported);
//! - `dead_letter`: the batch is written to the dead-letter topic; its offsets become committable
//!   once the broker acknowledged the write, and the partition moves on meanwhile;
//! - `retry`: the handler gets the same batch again after a wait that starts at `retry_backoff`
//!   and doubles with each retry up to `max_retry_backoff`, at most `max_retries` times; the
//!   batch stays open meanwhile, so nothing from its first offset on is committed and, ordered by
//!   partition, the partition waits. Once the retries ran out it is dead-lettered when the policy
//!   names a dead-letter topic, else committed. A batch that would be retried while its
//!   partition is closing is abandoned instead: nothing of it is committed, so whoever owns the
//!   partition next reads it again.
//!
//! What each settlement does to the partition's [`PartitionProgress`] is
//! [`Settlement::apply`]; the caller does the rest (sleeping before a retry, the dead-letter
//! write, and marking the batch finished once that write is acknowledged).
//!
//! Invariants: a batch is handed to the handler at most `max_retries + 1` times; every wait lies
//! between `min(retry_backoff, max_retry_backoff)` and `max_retry_backoff` and never shrinks from
//! one retry to the next; a retried or dead-lettering batch stays open in the progress, so the
//! committable offset never passes it. No clock: the wait is a duration the caller sleeps.

use std::time::Duration;

use crate::PartitionProgress;

/// What a handler exception does to its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Acknowledge the batch anyway (logged and reported by the bindings).
    Commit,
    /// Hand the batch to the handler again after a backoff, at most `max_retries` times, while
    /// the partition waits; then dead-letter it (with a dead-letter topic) or commit it.
    Retry,
    /// Write the batch to the dead-letter topic, then acknowledge it.
    DeadLetter,
}

/// The error policy of a consumer; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorPolicy {
    /// What a handler exception does.
    pub on_error: OnError,
    /// Retries of one batch before it is dead-lettered or committed [3].
    pub max_retries: u32,
    /// Wait before the first retry; doubles with each retry [1 s].
    pub retry_backoff: Duration,
    /// Cap of the doubling wait [30 s].
    pub max_retry_backoff: Duration,
    /// Where failed batches are written (`DeadLetter`, and `Retry` once retries ran out).
    pub dead_letter_topic: Option<String>,
}

impl Default for ErrorPolicy {
    fn default() -> Self {
        ErrorPolicy {
            on_error: OnError::Commit,
            max_retries: 3,
            retry_backoff: Duration::from_secs(1),
            max_retry_backoff: Duration::from_secs(30),
            dead_letter_topic: None,
        }
    }
}

/// What happens to a batch whose handler raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Call the handler again with the same batch after this wait; the caller counts one more
    /// retry. The batch stays open in the partition's progress.
    Retry(Duration),
    /// The batch is done with, one way or another.
    Settle(Settlement),
}

/// How a failed batch is done with; [`Settlement::apply`] is what it does to the progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// Its offsets become committable now.
    Commit,
    /// Written to the dead-letter topic; its offsets become committable once the broker
    /// acknowledged the write.
    DeadLetter,
    /// Held back for good: nothing of it is committed, its records are read again.
    Abandon,
}

impl ErrorPolicy {
    /// What happens to a batch whose handler raised after `retries` retries of it (0 on its
    /// first failure), while its partition is `closing` (revoked or the consumer stopping) or not.
    pub fn decide(&self, retries: u32, closing: bool) -> Decision {
        if self.on_error == OnError::Retry && retries < self.max_retries {
            return if closing {
                Decision::Settle(Settlement::Abandon)
            } else {
                Decision::Retry(self.backoff(retries))
            };
        }
        Decision::Settle(if self.dead_letter_topic().is_some() {
            Settlement::DeadLetter
        } else {
            Settlement::Commit
        })
    }

    /// The wait before retry number `retry + 1` (counting from 0).
    fn backoff(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry);
        self.retry_backoff
            .saturating_mul(factor)
            .min(self.max_retry_backoff)
    }

    /// The topic failed batches are written to: `None` when this policy never dead-letters
    /// (`commit`, or `retry` without a topic; `dead_letter` needs one, which the consumer's
    /// options validation enforces).
    pub fn dead_letter_topic(&self) -> Option<&str> {
        match self.on_error {
            OnError::Commit => None,
            OnError::Retry | OnError::DeadLetter => self.dead_letter_topic.as_deref(),
        }
    }
}

impl Settlement {
    /// Applies the settlement of the open batch starting at `first` to its partition's
    /// progress: committed, it is finished; abandoned, it is held back for good; dead-lettered,
    /// it stays open until the caller finishes it once the write is acknowledged.
    pub fn apply(self, progress: &mut PartitionProgress, first: i64) {
        match self {
            Settlement::Commit => {
                progress.finish(first);
            }
            Settlement::DeadLetter => {}
            Settlement::Abandon => {
                progress.abandon(first);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::{Decision, ErrorPolicy, OnError, Settlement};
    use crate::PartitionProgress;

    fn policy(on_error: OnError, dead_letter_topic: Option<&str>) -> ErrorPolicy {
        ErrorPolicy {
            on_error,
            dead_letter_topic: dead_letter_topic.map(str::to_owned),
            ..ErrorPolicy::default()
        }
    }

    fn retry_in(ms: u64) -> Decision {
        Decision::Retry(Duration::from_millis(ms))
    }

    const COMMIT: Decision = Decision::Settle(Settlement::Commit);
    const DEAD_LETTER: Decision = Decision::Settle(Settlement::DeadLetter);
    const ABANDON: Decision = Decision::Settle(Settlement::Abandon);

    #[test]
    fn retry_doubles_the_wait_then_dead_letters_or_commits() {
        let retry = ErrorPolicy {
            retry_backoff: Duration::from_millis(50),
            max_retry_backoff: Duration::from_millis(150),
            ..policy(OnError::Retry, Some("dead"))
        };
        let decisions: Vec<Decision> = (0..4).map(|n| retry.decide(n, false)).collect();
        assert_eq!(
            decisions,
            [retry_in(50), retry_in(100), retry_in(150), DEAD_LETTER]
        );
        let without_topic = ErrorPolicy {
            dead_letter_topic: None,
            ..retry
        };
        assert_eq!(without_topic.decide(3, false), COMMIT);
        assert_eq!(without_topic.decide(u32::MAX, false), COMMIT);
    }

    #[test]
    fn a_closing_partition_abandons_what_it_would_retry() {
        let retry = policy(OnError::Retry, None);
        assert_eq!(retry.decide(0, true), ABANDON);
        assert_eq!(retry.decide(2, true), ABANDON);
        assert_eq!(
            retry.decide(3, true),
            COMMIT,
            "retries ran out: settled as usual"
        );
        let dead_letter = policy(OnError::DeadLetter, Some("dead"));
        assert_eq!(dead_letter.decide(0, true), DEAD_LETTER);
    }

    #[test]
    fn commit_and_dead_letter_never_retry() {
        let commit = policy(OnError::Commit, Some("dead"));
        assert_eq!(commit.decide(0, false), COMMIT, "the topic is unused");
        assert_eq!(commit.dead_letter_topic(), None);
        let dead_letter = policy(OnError::DeadLetter, Some("dead"));
        assert_eq!(dead_letter.decide(0, false), DEAD_LETTER);
        assert_eq!(dead_letter.dead_letter_topic(), Some("dead"));
        let no_retries = ErrorPolicy {
            max_retries: 0,
            ..policy(OnError::Retry, Some("dead"))
        };
        assert_eq!(no_retries.decide(0, false), DEAD_LETTER);
    }

    #[test]
    fn the_wait_saturates_at_the_cap() {
        let retry = ErrorPolicy {
            retry_backoff: Duration::MAX,
            max_retries: u32::MAX,
            ..policy(OnError::Retry, None)
        };
        assert_eq!(retry.backoff(0), Duration::from_secs(30));
        assert_eq!(retry.backoff(u32::MAX - 1), Duration::from_secs(30));
    }

    #[test]
    fn a_settlement_finishes_holds_or_keeps_the_batch_open() {
        let mut progress = PartitionProgress::new();
        for first in [0, 2, 4] {
            progress.hand_out(first, first + 1);
        }
        Settlement::Commit.apply(&mut progress, 0);
        assert_eq!(progress.committable(None), Some(2));
        Settlement::DeadLetter.apply(&mut progress, 2);
        assert_eq!(progress.committable(None), Some(2), "open until written");
        Settlement::Abandon.apply(&mut progress, 4);
        progress.finish(2);
        assert_eq!(progress.committable(None), Some(4), "held back for good");
        assert_eq!(progress.open(), 0);
    }

    fn any_policy() -> impl Strategy<Value = ErrorPolicy> {
        let on_error = prop_oneof![
            Just(OnError::Commit),
            Just(OnError::Retry),
            Just(OnError::DeadLetter)
        ];
        (
            on_error,
            prop_oneof![3 => 0u32..6, 1 => 30u32..40],
            prop_oneof![3 => 0u64..2_000, 1 => Just(u64::MAX)],
            0u64..40_000,
            any::<bool>(),
        )
            .prop_map(|(on_error, max_retries, backoff, cap, topic)| ErrorPolicy {
                on_error,
                max_retries,
                retry_backoff: Duration::from_millis(backoff),
                max_retry_backoff: Duration::from_millis(cap),
                dead_letter_topic: topic.then(|| "dead".to_owned()),
            })
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// A batch of this many records is handed to the handler.
        HandOut(u8),
        /// The handler of batch `n` raised.
        Fail(usize),
        /// The handler of batch `n` returned.
        Handle(usize),
        /// The dead-letter write of batch `n` was acknowledged.
        Written(usize),
        /// The worker gave batch `n` up (stopping while it waited to retry).
        GiveUp(usize),
        /// The partition is being revoked or the consumer stops.
        Close,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1u8..4).prop_map(Op::HandOut),
            6 => (0usize..8).prop_map(Op::Fail),
            2 => (0usize..8).prop_map(Op::Handle),
            2 => (0usize..8).prop_map(Op::Written),
            1 => (0usize..8).prop_map(Op::GiveUp),
            1 => Just(Op::Close),
        ]
    }

    /// The model's view of one batch.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Batch {
        /// With its handler, after this many failures.
        Running(u32),
        /// Being written to the dead-letter topic.
        Writing,
        /// Committable.
        Done,
        /// Never committed.
        Held,
    }

    /// The model of the policy: the list of waits a batch goes through, written out by doubling
    /// one step at a time, then where it ends up.
    fn waits(policy: &ErrorPolicy) -> Vec<Duration> {
        let mut waits = Vec::new();
        if policy.on_error == OnError::Retry {
            let mut wait = policy.retry_backoff.min(policy.max_retry_backoff);
            for _ in 0..policy.max_retries.min(64) {
                waits.push(wait);
                wait = wait.saturating_mul(2).min(policy.max_retry_backoff);
            }
        }
        waits
    }

    fn end(policy: &ErrorPolicy) -> Settlement {
        let writes = match policy.on_error {
            OnError::Commit => false,
            OnError::DeadLetter => true,
            OnError::Retry => policy.dead_letter_topic.is_some(),
        };
        if writes && policy.dead_letter_topic.is_some() {
            Settlement::DeadLetter
        } else {
            Settlement::Commit
        }
    }

    proptest! {
        #[test]
        fn matches_a_list_of_waits(policy in any_policy(), ops in prop::collection::vec(op(), 0..80)) {
            let waits = waits(&policy);
            let end = end(&policy);
            let mut progress = PartitionProgress::new();
            // (first offset, state); batches are contiguous, in hand-out order.
            let mut batches: Vec<(i64, Batch)> = Vec::new();
            let mut next = 0i64;
            let mut closing = false;
            let mut last_committable = None;
            for op in ops {
                match op {
                    Op::HandOut(n) => {
                        if closing {
                            continue;
                        }
                        let last = next + i64::from(n) - 1;
                        prop_assert!(progress.hand_out(next, last));
                        batches.push((next, Batch::Running(0)));
                        next = last + 1;
                    }
                    Op::Fail(i) => {
                        let Some((first, Batch::Running(failures))) = batches.get(i).copied() else {
                            continue;
                        };
                        let expected = match waits.get(failures as usize) {
                            Some(_) if closing => Decision::Settle(Settlement::Abandon),
                            Some(&wait) => Decision::Retry(wait),
                            None => Decision::Settle(end),
                        };
                        let decision = policy.decide(failures, closing);
                        prop_assert_eq!(decision, expected);
                        batches[i].1 = match decision {
                            Decision::Retry(wait) => {
                                prop_assert!(wait <= policy.max_retry_backoff);
                                Batch::Running(failures + 1)
                            }
                            Decision::Settle(settlement) => {
                                settlement.apply(&mut progress, first);
                                match settlement {
                                    Settlement::Commit => Batch::Done,
                                    Settlement::DeadLetter => Batch::Writing,
                                    Settlement::Abandon => Batch::Held,
                                }
                            }
                        };
                    }
                    Op::Handle(i) | Op::Written(i) | Op::GiveUp(i) => {
                        let Some(&(first, state)) = batches.get(i) else { continue };
                        batches[i].1 = match (&op, state) {
                            (Op::Handle(_), Batch::Running(_)) | (Op::Written(_), Batch::Writing) => {
                                prop_assert!(progress.finish(first));
                                Batch::Done
                            }
                            (Op::GiveUp(_), Batch::Running(_)) => {
                                prop_assert!(progress.abandon(first));
                                Batch::Held
                            }
                            _ => continue,
                        };
                    }
                    Op::Close => closing = true,
                }
                // Committable: up to the first batch not done, if any batch was handed out.
                let first_not_done = batches
                    .iter()
                    .find(|(_, state)| *state != Batch::Done)
                    .map_or(next, |(first, _)| *first);
                let expected = (first_not_done > 0).then_some(first_not_done);
                let actual = progress.committable(None);
                prop_assert_eq!(actual, expected);
                prop_assert!(actual >= last_committable);
                last_committable = actual;
                let running = batches
                    .iter()
                    .filter(|(_, state)| matches!(state, Batch::Running(_) | Batch::Writing))
                    .count();
                prop_assert_eq!(progress.open(), running);
            }
        }
    }
}
