//! [`StartAcks`]: the START producer's context, counting each batch's unacknowledged STARTs.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};

use crate::oauth::{TokenRefresh, plain_client_context};

/// Counts the START markers of each batch still unacknowledged (the delivery opaque is the
/// batch number), so the prefetch thread can wait for one batch while the next one's travel.
pub(crate) struct StartAcks {
    batches: Mutex<HashMap<usize, BatchAcks>>,
    settled: Condvar,
    tokens: TokenRefresh,
}

#[derive(Default)]
struct BatchAcks {
    pending: usize,
    failure: Option<KafkaError>,
}

impl StartAcks {
    pub(crate) fn new(tokens: TokenRefresh) -> Self {
        StartAcks {
            batches: Mutex::new(HashMap::new()),
            settled: Condvar::new(),
            tokens,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<usize, BatchAcks>> {
        self.batches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `count` STARTs of `batch` are about to be handed to librdkafka.
    pub(super) fn expect(&self, batch: usize, count: usize) {
        self.lock().insert(
            batch,
            BatchAcks {
                pending: count,
                failure: None,
            },
        );
    }

    /// `batch` failed before librdkafka took all of it: settled at once with `failure` (the
    /// reports of what it took are ignored).
    pub(super) fn fail_now(&self, batch: usize, failure: KafkaError) {
        self.lock().insert(
            batch,
            BatchAcks {
                pending: 0,
                failure: Some(failure),
            },
        );
    }

    /// Stops counting `batch` (its late reports are ignored).
    pub(super) fn forget(&self, batch: usize) {
        self.lock().remove(&batch);
    }

    /// Whether every START of `batch` is reported (or it failed before librdkafka took all of
    /// it, or is not counted): [`Self::settled`] would answer at once.
    pub(super) fn is_settled(&self, batch: usize) -> bool {
        self.lock().get(&batch).is_none_or(|acks| acks.pending == 0)
    }

    /// Waits up to `timeout` until every START of `batch` is reported: `None` while some are
    /// not (still counted), else the first failure (no longer counted).
    pub(super) fn settled(
        &self,
        batch: usize,
        timeout: Duration,
    ) -> Option<Result<(), KafkaError>> {
        let (mut batches, _) = self
            .settled
            .wait_timeout_while(self.lock(), timeout, |b| {
                b.get(&batch).is_some_and(|acks| acks.pending > 0)
            })
            .unwrap_or_else(|p| p.into_inner());
        if batches.get(&batch).is_some_and(|acks| acks.pending > 0) {
            return None;
        }
        let acks = batches.remove(&batch).unwrap_or_default();
        Some(acks.failure.map_or(Ok(()), Err))
    }
}

plain_client_context!(StartAcks, tokens);

impl ProducerContext for StartAcks {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, batch: usize) {
        let mut batches = self.lock();
        let Some(acks) = batches.get_mut(&batch) else {
            return;
        };
        acks.pending = acks.pending.saturating_sub(1);
        if let Err((err, _)) = result {
            acks.failure.get_or_insert_with(|| err.clone());
        }
        // Waking the waiter for every report of a large batch would only make it contend.
        if acks.pending == 0 {
            self.settled.notify_all();
        }
    }
}
