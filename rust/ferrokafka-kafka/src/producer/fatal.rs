//! A fatal error of the transactional producer: a new librdkafka instance with the same
//! `transactional.id` takes over while the id is still ours (`may_take_over`); otherwise every
//! record is handed back and the error is raised by every later call.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rdkafka::error::KafkaError;
use rdkafka::producer::{Producer, PurgeConfig};

use super::delivery::DeliveryTracker;
use super::pending::Pending;
use super::round::RoundReport;
use super::transactions::RoundEnd;
use super::{AsyncProducer, TRANSACTION_BACKOFF, TRANSACTION_STEP, create_producer};
use crate::error::KafkaIoError;
use crate::polled_producer::PolledProducer;
use crate::transaction_step::{TransactionStep, may_take_over, transaction_step};

/// The error a fatal transactional failure is handed back and raised with: fatal, also when
/// librdkafka set none of its flags.
fn fatal_error(operation: &str, err: KafkaError) -> KafkaIoError {
    match KafkaIoError::from_rdkafka(operation, err, TRANSACTION_STEP, None) {
        KafkaIoError::Broker {
            operation,
            code,
            name,
            message,
            ..
        } => KafkaIoError::Broker {
            operation,
            code,
            name,
            message,
            retriable: false,
            fatal: true,
        },
        other => other,
    }
}

impl AsyncProducer {
    /// Ends a transaction whose `operation` failed fatally: purges what librdkafka still holds
    /// and takes back the reports of the `handed` records, then those never handed over, and
    /// where the first record reported written landed (a commit may have been taken).
    pub(super) fn end_fatally(
        &self,
        producer: &PolledProducer<DeliveryTracker>,
        started: Instant,
        handed: usize,
        unsent: Vec<Box<Pending>>,
        err: KafkaError,
        operation: &str,
    ) -> RoundEnd {
        producer.purge(PurgeConfig::default().queue().inflight());
        let (mut reports, witness) = if handed > 0 {
            self.take_round_and_witness(handed)
        } else {
            (Vec::new(), None)
        };
        reports.extend(unsent.into_iter().map(RoundReport::not_sent));
        RoundEnd::Fatal {
            reports,
            renewable: may_take_over(&err, started.elapsed(), self.transaction_timeout),
            error: fatal_error(operation, err),
            witness,
        }
    }

    /// Replaces the librdkafka instance after a fatal error that left the `transactional.id`
    /// ours (librdkafka: a fatal error ends the instance; e.g. INVALID_TXN_STATE when an abort
    /// after an outage reaches a coordinator that never saw the transaction). The new
    /// instance's init_transactions bumps the producer epoch, which aborts whatever the old one
    /// left open, so none of its records can be committed any more. `Err(None)` when a
    /// shutdown came first, `Err(Some(error))` when no new instance can take over.
    pub(super) fn renew_producer(&self) -> Result<(), Option<KafkaIoError>> {
        let producer = create_producer(&self.settings, &self.shared).map_err(Some)?;
        loop {
            let Err(e) = producer.init_transactions(TRANSACTION_STEP) else {
                break;
            };
            match transaction_step(&e) {
                _ if self.stopping() => return Err(None),
                TransactionStep::Retry => std::thread::sleep(TRANSACTION_BACKOFF),
                _ => return Err(Some(fatal_error("init_transactions", e))),
            }
        }
        let replaced = std::mem::replace(
            &mut *self.producer.write().unwrap_or_else(|p| p.into_inner()),
            Arc::new(producer),
        );
        // Dropped outside the lock: librdkafka's teardown takes a while.
        drop(replaced);
        Ok(())
    }

    /// Hands back `records` (in flight) and everything buffered with a fatal error, which every
    /// later call raises.
    pub(super) fn fail_fatally(&self, records: Vec<Box<Pending>>, error: KafkaIoError) {
        log::error!("the producer failed fatally and stops: {error}");
        let mut state = self.shared.lock();
        state.fatal = Some(error.clone());
        let mut buffered: Vec<Box<Pending>> = state.retries.drain(..).map(|(_, p)| p).collect();
        buffered.extend(state.suspects.drain(..).map(|(p, _)| p));
        buffered.extend(state.buffer.drain_chunk(usize::MAX));
        self.shared
            .in_flight
            .fetch_add(buffered.len(), Ordering::AcqRel);
        drop(state);
        self.shared.fail(
            records
                .into_iter()
                .chain(buffered)
                .map(|p| (p, error.clone())),
        );
        self.shared.progress.notify_all();
    }
}
