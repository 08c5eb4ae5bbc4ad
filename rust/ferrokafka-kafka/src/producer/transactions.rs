//! Transactional delivery: each delivery round is one transaction, following librdkafka's
//! transactional error model ([`TransactionStep`]): a retriable error calls the same operation
//! again, an abortable one aborts and the round is sent again (in order, in a new transaction),
//! a fatal one ends the instance (see `fatal`). A round's records count as delivered only once
//! its transaction committed.

use std::sync::atomic::Ordering;
use std::time::Instant;

use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;

use super::delivery::DeliveryTracker;
use super::handoff::Handoff;
use super::in_flight::InFlight;
use super::pending::Pending;
use super::reports::ProducerEvent;
use super::round::{OpenRound, RoundReport, round_records};
use super::{AsyncProducer, PURGE_WAIT, TRANSACTION_BACKOFF, TRANSACTION_STEP, WORKER_TICK};
use crate::error::KafkaIoError;
use crate::locks::wait_timeout;
use crate::polled_producer::PolledProducer;
use crate::transaction_outcome::{Witness, committed_after_all};
use crate::transaction_step::{TransactionStep, transaction_step};

/// How a transaction of the worker ended.
pub(super) enum RoundEnd {
    /// Committed: its records are delivered.
    Committed(Vec<RoundReport>),
    /// Aborted: its records are to be sent again (or handed back).
    Aborted(Vec<RoundReport>, KafkaIoError),
    /// The librdkafka instance failed fatally, or was given up. When the `transactional.id`
    /// is still ours (`renewable`), a new instance takes over: the transaction is read back
    /// through its `witness` (a commit may have reached the coordinator unanswered), and
    /// unless it committed the records are sent again; otherwise they are handed back.
    Fatal {
        reports: Vec<RoundReport>,
        error: KafkaIoError,
        renewable: bool,
        witness: Option<Witness>,
    },
    /// Shutdown's grace period ended first: its records are handed back.
    Stopped(Vec<Box<Pending>>),
}

impl AsyncProducer {
    /// Sends a batch in transactions of its own, again and again until each record is
    /// committed or handed back: an aborted transaction's records go again, in order, before
    /// anything newer.
    pub(super) fn hand_off_transactions(&self, mut batch: Vec<Box<Pending>>) {
        while !batch.is_empty() {
            let (reports, error) = match self.run_transaction(batch) {
                RoundEnd::Committed(reports) => {
                    self.settle_committed(reports);
                    return;
                }
                RoundEnd::Aborted(reports, error) => {
                    log::warn!(
                        "transaction of {} record(s) aborted, sending them again: {error}",
                        reports.len()
                    );
                    (reports, error)
                }
                RoundEnd::Fatal {
                    reports,
                    error,
                    renewable: true,
                    witness,
                } => match self.renew_producer() {
                    Ok(()) => {
                        let what = format!("its {} record(s)", reports.len());
                        let stopping = || self.stopping();
                        if witness.is_some_and(|witness| {
                            committed_after_all(&self.settings, &witness, &what, &stopping)
                        }) {
                            self.settle_committed(reports);
                            return;
                        }
                        log::warn!(
                            "the transactional producer failed ({error}); a new instance sends \
                             its {} record(s) again",
                            reports.len()
                        );
                        (reports, error)
                    }
                    Err(Some(fatal)) => {
                        self.fail_fatally(round_records(reports, Vec::new()), fatal);
                        return;
                    }
                    Err(None) => {
                        self.put_back(round_records(reports, Vec::new()));
                        return;
                    }
                },
                RoundEnd::Fatal { reports, error, .. } => {
                    self.fail_fatally(round_records(reports, Vec::new()), error);
                    return;
                }
                RoundEnd::Stopped(records) => {
                    self.put_back(records);
                    return;
                }
            };
            batch = self.settle_aborted(reports, &error);
            if !batch.is_empty() && !self.shared.options.retry_backoff.is_zero() {
                std::thread::sleep(self.shared.options.retry_backoff);
            }
        }
    }

    /// Sends `batch` in one transaction and commits it, following librdkafka's transactional
    /// error model: a retriable error calls the same operation again, an abortable one aborts,
    /// a fatal one ends the instance.
    fn run_transaction(&self, batch: Vec<Box<Pending>>) -> RoundEnd {
        let producer = self.producer();
        let started = Instant::now();
        loop {
            let Err(e) = producer.begin_transaction() else {
                break;
            };
            if self.stopping() {
                return RoundEnd::Stopped(batch);
            }
            match transaction_step(&e) {
                TransactionStep::Retry if self.wedged(started) => {
                    return self.end_wedged(&producer, started, 0, batch, e, "begin_transaction");
                }
                TransactionStep::Retry => std::thread::sleep(TRANSACTION_BACKOFF),
                // The previous transaction failed after it ended (a late delivery failure).
                TransactionStep::Abort => {
                    log::warn!("begin_transaction failed, aborting first: {e}");
                    if let Err(e) = self.abort_transaction(&producer, started) {
                        return self.end_fatally(
                            &producer,
                            started,
                            0,
                            batch,
                            e,
                            "abort_transaction",
                        );
                    }
                }
                TransactionStep::Fatal => {
                    return self.end_fatally(&producer, started, 0, batch, e, "begin_transaction");
                }
            }
        }
        *self.shared.lock_round() = OpenRound {
            reports: Vec::with_capacity(batch.len()),
            failures: batch.iter().map(|p| p.failures).collect(),
            witness: None,
        };
        let mut records = batch.into_iter();
        let mut handed = 0;
        let mut unsent = Vec::new();
        let mut position = 0;
        while let Some(pending) = records.next() {
            // A record's position indexes `failures`: it counts records left out too.
            let this = position;
            position += 1;
            let Some(pending) = self.with_partition(&producer, pending) else {
                continue;
            };
            let in_flight = InFlight::in_transaction(&pending, this);
            match self.send(&producer, pending, in_flight, true) {
                Handoff::Sent => handed += 1,
                Handoff::Refused => {}
                Handoff::Unsent(pending) => {
                    unsent.push(pending);
                    unsent.extend(records.by_ref());
                }
            }
        }
        let mut abort_reason = None;
        if unsent.is_empty() {
            loop {
                let Err(e) = producer.commit_transaction(TRANSACTION_STEP) else {
                    return RoundEnd::Committed(self.take_round(handed));
                };
                match transaction_step(&e) {
                    TransactionStep::Retry if self.wedged(started) && !self.stopping() => {
                        return self.end_wedged(
                            &producer,
                            started,
                            handed,
                            unsent,
                            e,
                            "commit_transaction",
                        );
                    }
                    // The commit goes on in librdkafka; calling it again resumes it.
                    TransactionStep::Retry if !self.stopping() => {
                        std::thread::sleep(TRANSACTION_BACKOFF);
                    }
                    TransactionStep::Retry => break,
                    TransactionStep::Abort => {
                        abort_reason = Some(KafkaIoError::from_rdkafka(
                            "commit_transaction",
                            e,
                            TRANSACTION_STEP,
                            None,
                        ));
                        break;
                    }
                    TransactionStep::Fatal => {
                        return self.end_fatally(
                            &producer,
                            started,
                            handed,
                            unsent,
                            e,
                            "commit_transaction",
                        );
                    }
                }
            }
        }
        match self.abort_transaction(&producer, started) {
            Err(e) if !self.stopping() => {
                self.end_fatally(&producer, started, handed, unsent, e, "abort_transaction")
            }
            _ if self.stopping() || !unsent.is_empty() => {
                RoundEnd::Stopped(round_records(self.take_round(handed), unsent))
            }
            _ => RoundEnd::Aborted(
                self.take_round(handed),
                abort_reason.unwrap_or(KafkaIoError::Closed("the transaction")),
            ),
        }
    }

    /// Aborts the open transaction (open since `started`), calling abort again after retriable
    /// failures until a shutdown or until the instance is [wedged](Self::wedged); any other
    /// failure is returned (librdkafka: the instance is then unusable).
    fn abort_transaction(
        &self,
        producer: &PolledProducer<DeliveryTracker>,
        started: Instant,
    ) -> Result<(), KafkaError> {
        loop {
            let Err(e) = producer.abort_transaction(TRANSACTION_STEP) else {
                return Ok(());
            };
            match transaction_step(&e) {
                TransactionStep::Retry if !self.stopping() && !self.wedged(started) => {
                    std::thread::sleep(TRANSACTION_BACKOFF);
                }
                _ => return Err(e),
            }
        }
    }

    /// Whether a transaction open since `started` has waited on retriable failures so long
    /// that this instance will not finish it: past `transaction.timeout.ms` the coordinator has
    /// aborted it (unless its commit had reached the coordinator), yet librdkafka can go on
    /// answering "timed out, call again" for ever after an outage (a request to the
    /// coordinator that never leaves its queue). A new instance then takes over.
    fn wedged(&self, started: Instant) -> bool {
        started.elapsed() >= self.transaction_timeout + TRANSACTION_STEP
    }

    /// Ends a [wedged](Self::wedged) transaction as a renewable fatal error: a new instance
    /// sends its records again.
    fn end_wedged(
        &self,
        producer: &PolledProducer<DeliveryTracker>,
        started: Instant,
        handed: usize,
        unsent: Vec<Box<Pending>>,
        err: KafkaError,
        operation: &str,
    ) -> RoundEnd {
        log::warn!(
            "{operation} still unanswered {:.0} s after the transaction began (longer than \
             transaction.timeout.ms, {:.0} s): a new producer instance takes over, reads \
             whether the coordinator took the transaction all the same, and sends its records \
             again if it did not; the last answer: {err}",
            started.elapsed().as_secs_f64(),
            self.transaction_timeout.as_secs_f64()
        );
        self.end_fatally(producer, started, handed, unsent, err, operation)
    }

    /// Waits (at most `PURGE_WAIT`) for the reports of the `handed` records of the open
    /// transaction; returns them in the order the records were sent, with their failed sends.
    pub(super) fn take_round(&self, handed: usize) -> Vec<RoundReport> {
        self.take_round_and_witness(handed).0
    }

    /// [`take_round`](Self::take_round), and where its first record reported written landed.
    pub(super) fn take_round_and_witness(
        &self,
        handed: usize,
    ) -> (Vec<RoundReport>, Option<Witness>) {
        let deadline = Instant::now() + PURGE_WAIT;
        let mut round = self.shared.lock_round();
        while round.reports.len() < handed && Instant::now() < deadline {
            round = wait_timeout(&self.shared.round_reported, round, WORKER_TICK);
        }
        let OpenRound {
            mut reports,
            failures,
            witness,
        } = std::mem::take(&mut *round);
        drop(round);
        // Said with the lock released: the delivery callback waits for it meanwhile.
        if reports.len() < handed {
            log::error!(
                "{} of {handed} record(s) of a transaction were never reported by librdkafka",
                handed - reports.len()
            );
        }
        // The failed-sends field carries each record's position (InFlight::in_transaction); a
        // round holds at most a hand-off chunk, so no position saturates.
        reports.sort_by_key(|report| report.pending.failures);
        for report in &mut reports {
            let position = report.pending.failures as usize;
            report.pending.failures = failures.get(position).copied().unwrap_or(0);
        }
        (reports, witness)
    }

    /// Publishes a committed transaction's records as delivered.
    fn settle_committed(&self, reports: Vec<RoundReport>) {
        let count = reports.len();
        let mut failed = Vec::new();
        for report in reports {
            match report.outcome {
                Ok(event) => {
                    self.shared.delivered.fetch_add(1, Ordering::Relaxed);
                    if let Some(written) = event {
                        self.shared.report_written(written);
                    }
                }
                // librdkafka refuses to commit a transaction with a failed record; should one
                // appear all the same, it is handed back rather than counted as delivered.
                Err((error, _)) => failed.push((report.pending, error)),
            }
        }
        let failures = failed.len();
        self.shared.fail(failed);
        self.shared.settle(count - failures);
    }

    /// Sorts an aborted transaction's records: those that cannot succeed or have used up their
    /// retries are handed back; the others are returned, in order, to be sent again.
    fn settle_aborted(&self, reports: Vec<RoundReport>, error: &KafkaIoError) -> Vec<Box<Pending>> {
        let mut again = Vec::with_capacity(reports.len());
        let mut failed = Vec::new();
        let mut retried = 0;
        for RoundReport {
            mut pending,
            outcome,
        } in reports
        {
            pending.failures += 1;
            let (reason, transient) = match outcome {
                Ok(_) => (error.clone(), true),
                Err((reason, transient)) => (reason, transient),
            };
            if transient && self.shared.may_retry(pending.failures) {
                retried += 1;
                again.push(pending);
            } else {
                failed.push((pending, reason));
            }
        }
        self.shared.lock().stats.retried += retried;
        if let Some(first) = again.first() {
            self.shared.emit(ProducerEvent::DeliveryError {
                topic: first.record.topic.clone(),
                error: error.clone(),
                attempt: first.failures,
            });
        }
        self.shared.fail(failed);
        again
    }
}
