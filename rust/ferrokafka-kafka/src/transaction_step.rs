//! librdkafka's transactional error model, read once for every engine that runs transactions
//! (the `AsyncProducer`'s worker, the scheduler's dispatch): what a failed transactional call
//! asks of its caller, and whether a new instance may take over from one that failed.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::config::ClientSettings;

/// What librdkafka's transactional error model asks of the caller after a transactional call
/// failed (rd_kafka_error_is_retriable / txn_requires_abort / is_fatal).
pub(crate) enum TransactionStep {
    /// Call the same operation again (e.g. commit after a commit that timed out).
    Retry,
    /// Abort the transaction, then send its records again in a new one.
    Abort,
    /// The librdkafka instance is unusable.
    Fatal,
}

pub(crate) fn transaction_step(err: &KafkaError) -> TransactionStep {
    match err {
        KafkaError::Transaction(rd) if rd.is_fatal() => TransactionStep::Fatal,
        KafkaError::Transaction(rd) if rd.txn_requires_abort() => TransactionStep::Abort,
        KafkaError::Transaction(rd) if rd.is_retriable() => TransactionStep::Retry,
        // rust-rdkafka flushes before calling librdkafka's commit, whose own flush would return
        // this timeout as a retriable error of the commit.
        KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut) => TransactionStep::Retry,
        // librdkafka: treat an error that is neither retriable, abortable nor fatal as fatal.
        _ => TransactionStep::Fatal,
    }
}

/// Whether a new instance may take over after a fatal error of a transaction open for `age`.
/// Not when the producer may not use its `transactional.id`, nor when another instance fenced
/// it (a new one would fence the rightful owner in turn); but a coordinator also bumps the
/// epoch when it aborts a transaction older than `transaction.timeout.ms` (an outage), which
/// librdkafka reports as the same fencing: a transaction at least that old explains it.
pub(crate) fn may_take_over(
    err: &KafkaError,
    age: Duration,
    transaction_timeout: Duration,
) -> bool {
    use RDKafkaErrorCode as C;
    match err.rdkafka_error_code() {
        Some(C::TransactionalIdAuthorizationFailed | C::ClusterAuthorizationFailed) => false,
        Some(C::Fenced | C::ProducerFenced | C::InvalidProducerEpoch) => age >= transaction_timeout,
        _ => true,
    }
}

/// librdkafka's default `transaction.timeout.ms`.
const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 60_000;

/// The `transaction.timeout.ms` of `settings`: the coordinator aborts a transaction open longer.
pub(crate) fn transaction_timeout(settings: &ClientSettings) -> Duration {
    Duration::from_millis(
        settings
            .get("transaction.timeout.ms")
            .and_then(|ms| ms.trim().parse().ok())
            .unwrap_or(DEFAULT_TRANSACTION_TIMEOUT_MS),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new instance takes over unless the `transactional.id` is no longer ours: not
    /// authorized, or fenced while the transaction was too young for the coordinator to have
    /// aborted it (another producer took over).
    #[test]
    fn a_new_instance_takes_over_only_while_the_transactional_id_is_ours() {
        use RDKafkaErrorCode as C;
        let timeout = Duration::from_secs(10);
        let (young, old) = (Duration::from_secs(1), Duration::from_secs(11));
        let error = KafkaError::MessageProduction;
        for code in [C::Fenced, C::ProducerFenced, C::InvalidProducerEpoch] {
            assert!(!may_take_over(&error(code), young, timeout), "{code:?}");
            assert!(may_take_over(&error(code), old, timeout), "{code:?}");
        }
        for code in [
            C::TransactionalIdAuthorizationFailed,
            C::ClusterAuthorizationFailed,
        ] {
            assert!(!may_take_over(&error(code), old, timeout), "{code:?}");
        }
        assert!(may_take_over(
            &error(C::InvalidTransactionalState),
            young,
            timeout
        ));
    }
}
