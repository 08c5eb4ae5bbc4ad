//! [`DeliveryTracker`], librdkafka's producer context: its delivery callback, on librdkafka's
//! polling thread, settles each record (delivered, sent again after a transient failure, or
//! handed back) or keeps its report for the open transaction.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, ProducerContext};

use super::in_flight::InFlight;
use super::isolation::refused_with_its_batch;
use super::options::DeliveryMode;
use super::reports::Written;
use super::round::RoundReport;
use super::state::Shared;
use crate::connection_failure::watch_connection;
use crate::error::KafkaIoError;
use crate::oauth::answer_token_refresh;
use crate::transaction_outcome::Witness;

/// librdkafka's delivery callback context: settles records and schedules retries.
pub(super) struct DeliveryTracker {
    pub(super) shared: Arc<Shared>,
}

impl ClientContext for DeliveryTracker {
    answer_token_refresh!(shared.tokens);
    watch_connection!(shared.watch);
}

impl DeliveryTracker {
    /// The error a failed record is handed back with: a record that timed out or was purged
    /// while librdkafka could not connect failed because of that.
    fn failure(&self, err: &KafkaError) -> KafkaIoError {
        use RDKafkaErrorCode as C;
        let unsent = matches!(
            err.rdkafka_error_code(),
            Some(C::MessageTimedOut | C::PurgeQueue | C::PurgeInflight)
        );
        match self.shared.watch.failure() {
            Some(failure) if unsent => failure.error("produce"),
            _ => KafkaIoError::from_rdkafka("produce", err.clone(), Duration::ZERO, None),
        }
    }
}

impl ProducerContext for DeliveryTracker {
    type DeliveryOpaque = InFlight;

    fn delivery(&self, result: &DeliveryResult<'_>, in_flight: Self::DeliveryOpaque) {
        let shared = &self.shared;
        if result.is_ok() {
            shared.watch.clear();
        }
        if shared.mode == DeliveryMode::Transactional {
            // The transaction decides: keep the record whole, in case it must be sent again.
            let message = match result {
                Ok(message) => message,
                Err((_, message)) => message,
            };
            let pending = in_flight.into_pending(message);
            let outcome = match result {
                Ok(message) => Ok(Written::of(pending.ticket, message)),
                // Purged by the worker's own abort (or a failed instance's purge): the record
                // did nothing wrong and goes again with the round, unless the producer stops.
                Err((err, _)) => Err((self.failure(err), is_transient(err) || is_purged(err))),
            };
            let mut round = shared.lock_round();
            if round.witness.is_none()
                && let Ok(message) = result
            {
                round.witness = Some(Witness::of(message));
            }
            round.reports.push(RoundReport { pending, outcome });
            drop(round);
            shared.round_reported.notify_all();
            return;
        }
        match result {
            Ok(message) => {
                shared.delivered.fetch_add(1, Ordering::Relaxed);
                if let Some(written) = Written::of(in_flight.settle(), message) {
                    shared.report_written(written);
                }
                shared.settle(1);
            }
            Err((err, message)) => {
                let pending = in_flight.into_pending(message);
                if shared.mode == DeliveryMode::Plain && refused_with_its_batch(err) {
                    shared.suspect(pending, self.failure(err));
                    return;
                }
                let transient = shared.mode == DeliveryMode::Plain && is_transient(err);
                let error = self.failure(err);
                shared.retry_or_fail(pending, error, transient, shared.options.retry_backoff);
            }
        }
    }
}

/// Whether sending the same record again may succeed: not for oversize or malformed records,
/// and not for records purged by shutdown.
fn is_transient(err: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    !matches!(
        err.rdkafka_error_code(),
        Some(
            C::MessageSizeTooLarge
                | C::InvalidMessageSize
                | C::InvalidMessage
                | C::InvalidRecord
                | C::TopicAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::InvalidTopic
                | C::PurgeQueue
                | C::PurgeInflight
                | C::Fatal
        )
    )
}

/// Whether librdkafka took the record back itself (a purge), rather than the broker refusing it.
fn is_purged(err: &KafkaError) -> bool {
    matches!(
        err.rdkafka_error_code(),
        Some(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight)
    )
}
