//! librdkafka's transactional error model, read once for every engine that runs transactions
//! (the `AsyncProducer`'s worker, the scheduler's dispatch): what a failed transactional call
//! asks of its caller.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

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
