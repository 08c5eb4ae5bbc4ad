//! Transactional dispatch: the chunks due now, up to [`PIPELINE_SCHEDULES`] schedules, go out in
//! one transaction. Each chunk's targets are sent as soon as the chunk is taken, then every
//! chunk's tombstones, none waiting for an acknowledgement, so the broker acknowledges the first
//! chunks while the later ones are still being handed over; once every record is acknowledged,
//! one commit. (A producer has one transaction open at a time: the next begins once this one is
//! committed.) A transaction that fails is aborted, so a `read_committed` reader sees none of its
//! records, and its schedules are restored to be dispatched again: at once when they failed only
//! with the abort, after a backoff when their own records failed. A commit or abort librdkafka
//! cannot end (after an outage) hands over to a new instance first (`takeover`). A target
//! refused for good is confirmed alone, in a transaction of its own, and failed without holding
//! up the others.

use std::time::{Duration, Instant};

use ferrokafka_core::schedule::Dispatch;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;

use super::dispatcher::{DispatchResult, PIPELINE_SCHEDULES, all_dispatched, retry_all};
use super::records::{
    DispatchRecord, failed_with_its_transaction, refused_for_good, tombstone_record, tombstones_of,
};
use super::rounds::{RoundId, Rounds, send_round};
use super::takeover::Unanswered;
use super::{ProxyPayload, SchedulerLoop};
use crate::daemon::resume_in_slices;
use crate::transaction_step::{
    TransactionStep, may_take_over, transaction_step, transaction_timeout,
};

/// One partition's chunk in the open transaction; its targets sent as `targets`.
struct TransactionChunk {
    partition: (String, i32),
    due: Vec<Dispatch<ProxyPayload>>,
    targets: RoundId,
}

type SendResult = Result<(), KafkaError>;

/// How the records of a transaction ended.
enum Finished {
    /// Each chunk's results: committed, or aborted and sorted for what comes next.
    Settled(Vec<Vec<DispatchResult>>),
    Unanswered(Unanswered),
}

/// How a commit ended.
enum CommitEnd {
    Committed,
    NotCommitted(String),
    Unanswered(Unanswered),
}

/// Every chunk's schedules dispatched.
fn chunks_dispatched(chunks: &[TransactionChunk]) -> Vec<Vec<DispatchResult>> {
    chunks
        .iter()
        .map(|chunk| all_dispatched(&chunk.due))
        .collect()
}

/// Every chunk's schedules to be dispatched again, after a backoff for `error`.
fn chunks_again(chunks: &[TransactionChunk], error: &str) -> Vec<Vec<DispatchResult>> {
    chunks
        .iter()
        .map(|chunk| retry_all(&chunk.due, Some(error.to_owned())))
        .collect()
}

/// The first failure of a chunk's records that is not only its transaction's.
fn own_error<'a>(sent: &'a [SendResult], tombstones: &'a [SendResult]) -> Option<&'a KafkaError> {
    sent.iter()
        .chain(tombstones)
        .filter_map(|result| result.as_ref().err())
        .find(|error| !failed_with_its_transaction(error))
}

impl SchedulerLoop {
    /// Commits the open transaction within the dispatch timeout, cut by the daemon's stop (see
    /// [`Self::transaction_call`]). A commit cut short is finished by a new instance, which
    /// then reads whether it was taken (`takeover`), or, when the daemon stops, by the broker
    /// or the next owner's `init_transactions`; the transaction holds the tombstones with the
    /// targets, so either way no schedule reaches a `read_committed` reader twice.
    fn commit_transaction(&self) -> Result<(), KafkaError> {
        self.transaction_call(|slice| self.dispatcher.commit_transaction(slice))
    }

    /// Aborts the open transaction, as long as [`Self::commit_transaction`] may take. An abort
    /// that did not finish is finished by the new instance that takes over before the next
    /// transaction (`takeover`), or by the broker (the transaction times out);
    /// `read_committed` readers see none of its records either way.
    fn abort_transaction(&self) {
        if let Err(e) = self.transaction_call(|slice| self.dispatcher.abort_transaction(slice)) {
            // librdkafka refuses every later transaction until this one ends: see `takeover`.
            self.renewal_needed(&format!("abort_transaction: {e}"));
        }
    }

    /// Runs a transaction call of librdkafka (`call(timeout)`) for up to the dispatch timeout,
    /// and `STOP_GRACE` once the daemon is asked to stop: librdkafka waits the whole timeout of
    /// one call for a broker that vanished, so the call is made in slices and made again after
    /// each error librdkafka calls retriable ([`transaction_step`]), as it asks of a commit or
    /// abort that timed out.
    fn transaction_call(
        &self,
        call: impl FnMut(Duration) -> Result<(), KafkaError>,
    ) -> Result<(), KafkaError> {
        resume_in_slices(
            self.dispatcher
                .context()
                .stop_bound(self.options.dispatch_timeout),
            call,
            |e| matches!(transaction_step(e), TransactionStep::Retry),
        )
    }

    /// Commits the open transaction, begun at `began`: committed; not committed (aborted, or
    /// left to the next owner when the daemon stops); or not answered, to be taken over.
    fn commit_open(&self, began: Instant) -> CommitEnd {
        let Err(e) = self.commit_transaction() else {
            return CommitEnd::Committed;
        };
        let error = format!("commit_transaction: {e}");
        // An abortable failure: the coordinator did not commit. Nor when another producer of
        // the `transactional.id` fenced this one: a new instance would fence it in turn.
        if matches!(transaction_step(&e), TransactionStep::Abort)
            || !may_take_over(
                &e,
                began.elapsed(),
                transaction_timeout(&self.dispatch_settings),
            )
        {
            self.abort_transaction();
            return CommitEnd::NotCommitted(error);
        }
        // Stopping: the next owner of the partitions reads what was committed.
        if self.dispatcher.context().stopping() {
            return CommitEnd::NotCommitted(error);
        }
        CommitEnd::Unanswered(Unanswered {
            witness: self.dispatcher.context().take_witness(),
            error,
        })
    }

    /// Dispatches everything due, one transaction after the other (see the module docs).
    pub(super) fn dispatch_due_transactional(&mut self) {
        loop {
            if !self.ready_to_begin() {
                return;
            }
            let started = Instant::now();
            let mut chunks: Vec<TransactionChunk> = Vec::new();
            let mut schedules = 0;
            let mut begin_failed = false;
            self.take_due_chunks(|daemon, partition, due| {
                let targets = match daemon.targets_of(&partition.0, partition.1, &due) {
                    Ok(targets) => targets,
                    Err(error) => return daemon.retry_later(&partition, due, error),
                };
                if chunks.is_empty() {
                    if let Err(e) = daemon.dispatcher.begin_transaction() {
                        if matches!(transaction_step(&e), TransactionStep::Fatal) {
                            daemon.renewal_needed(&format!("begin_transaction: {e}"));
                        }
                        // This partition waits out a backoff; the others try again in turn.
                        daemon.retry_later(&partition, due, format!("begin_transaction: {e}"));
                        begin_failed = true;
                        return false;
                    }
                    daemon.dispatcher.context().take_witness();
                }
                let targets = Rounds::start(&daemon.dispatcher, &targets, daemon.round_timeout());
                schedules += due.len();
                chunks.push(TransactionChunk {
                    partition,
                    due,
                    targets,
                });
                schedules < PIPELINE_SCHEDULES
            });
            if chunks.is_empty() {
                if begin_failed {
                    continue;
                }
                return;
            }
            let targets_sent = started.elapsed();
            let tombstones: Vec<RoundId> = chunks
                .iter()
                .map(|chunk| {
                    let (topic, partition) = (&chunk.partition.0, chunk.partition.1);
                    let records = tombstones_of(topic, partition, &chunk.due);
                    Rounds::start(&self.dispatcher, &records, self.round_timeout())
                })
                .collect();
            let sent = started.elapsed();
            let results = match self.finish_chunks(&chunks, &tombstones, started) {
                Finished::Settled(results) => results,
                Finished::Unanswered(unanswered) => {
                    match self.take_over_unanswered(unanswered, schedules) {
                        Ok(()) => chunks_dispatched(&chunks),
                        Err(error) => chunks_again(&chunks, &error),
                    }
                }
            };
            log::debug!(
                "transaction of {schedules} schedules in {} chunks: targets handed over after {targets_sent:?}, tombstones after {sent:?}, settled after {:?}",
                chunks.len(),
                started.elapsed()
            );
            for (chunk, results) in chunks.into_iter().zip(results) {
                self.settle(&chunk.partition, chunk.due, results);
            }
        }
    }

    /// Waits for every record of the open transaction, then commits it; or, as soon as a
    /// record failed (librdkafka then sends nothing more of the transaction), aborts it and
    /// tells what to do with each chunk's schedules.
    fn finish_chunks(
        &mut self,
        chunks: &[TransactionChunk],
        tombstones: &[RoundId],
        began: Instant,
    ) -> Finished {
        let rounds = self.dispatcher.context();
        let timeout = self.round_timeout();
        let started = Instant::now();
        let ids: Vec<RoundId> = chunks
            .iter()
            .map(|chunk| chunk.targets)
            .chain(tombstones.iter().copied())
            .collect();
        if rounds.all_acknowledged(&ids, timeout) {
            let acknowledged = started.elapsed();
            for id in ids {
                rounds.wait_for(id, timeout);
            }
            let committed = self.commit_open(began);
            log::debug!(
                "records acknowledged after {acknowledged:?}, transaction ended after {:?}",
                started.elapsed()
            );
            return match committed {
                CommitEnd::Committed => Finished::Settled(chunks_dispatched(chunks)),
                CommitEnd::NotCommitted(error) => Finished::Settled(chunks_again(chunks, &error)),
                CommitEnd::Unanswered(unanswered) => Finished::Unanswered(unanswered),
            };
        }
        // The abort purges what is still queued, so every round is done right after it.
        self.abort_transaction();
        let outcomes: Vec<(Vec<SendResult>, Vec<SendResult>)> = chunks
            .iter()
            .zip(tombstones)
            .map(|(chunk, tombstones)| {
                (
                    rounds.wait_for(chunk.targets, timeout),
                    rounds.wait_for(*tombstones, timeout),
                )
            })
            .collect();
        // When no record failed on its own (the transaction timed out, or failed as a whole),
        // every chunk waits out a backoff, so that the next try is not at once.
        let doomed = if outcomes
            .iter()
            .any(|(sent, tombstones)| own_error(sent, tombstones).is_some())
        {
            None
        } else {
            Some(
                outcomes
                    .iter()
                    .flat_map(|(sent, tombstones)| sent.iter().chain(tombstones))
                    .find_map(|result| result.as_ref().err())
                    .map_or_else(
                        || format!("transaction not acknowledged within {timeout:?}"),
                        |e| format!("transaction aborted: {e}"),
                    ),
            )
        };
        let results = chunks
            .iter()
            .zip(outcomes)
            .map(|(chunk, (sent, tombstones))| {
                if sent
                    .iter()
                    .any(|result| result.as_ref().is_err_and(refused_for_good))
                {
                    return self.settle_refused(&chunk.partition, &chunk.due, &sent);
                }
                // None: the chunk failed only with a transaction another chunk doomed; it is
                // sent again at once.
                let error = own_error(&sent, &tombstones).map(ToString::to_string);
                retry_all(&chunk.due, error.or_else(|| doomed.clone()))
            })
            .collect();
        Finished::Settled(results)
    }

    /// The schedules of a chunk some of whose targets were refused for good (`sent`: each
    /// target's result in the aborted transaction).
    fn settle_refused(
        &mut self,
        (topic, partition): &(String, i32),
        due: &[Dispatch<ProxyPayload>],
        sent: &[SendResult],
    ) -> Vec<DispatchResult> {
        let (topic, partition) = (topic.as_str(), *partition);
        // The targets were chosen when the chunk was sent, so their partition counts are known.
        let targets = match self.targets_of(topic, partition, due) {
            Ok(targets) => targets,
            Err(error) => return retry_all(due, Some(error)),
        };
        // Settle the refused ones (dead-letter copy and tombstone in a transaction of their own)
        // and retry the rest at once: they failed only with the aborted transaction.
        let mut settled = Vec::new();
        for ((dispatch, target), result) in due.iter().zip(&targets).zip(sent) {
            if !result.as_ref().is_err_and(refused_for_good) {
                settled.push(DispatchResult::Retry { transient: None });
                continue;
            }
            // The broker refuses a whole batch when it is too large: confirm the refusal with
            // the target alone.
            let began = Instant::now();
            let alone = match self.in_transaction(std::slice::from_ref(target)) {
                Ok(mut sent) => sent.pop().unwrap_or(Ok(())),
                Err(error) => {
                    settled.push(DispatchResult::Retry {
                        transient: Some(error),
                    });
                    continue;
                }
            };
            let e = match alone {
                Ok(()) => {
                    let tombstone = tombstone_record(topic, partition, dispatch);
                    settled.push(match self.finish_transaction(&[tombstone], began) {
                        Ok(()) => DispatchResult::Dispatched,
                        Err(error) => DispatchResult::Retry {
                            transient: Some(error),
                        },
                    });
                    continue;
                }
                Err(e) => {
                    self.abort_transaction();
                    if !refused_for_good(&e) {
                        settled.push(DispatchResult::Retry {
                            transient: Some(e.to_string()),
                        });
                        continue;
                    }
                    e
                }
            };
            settled.push(match &self.options.dead_letter_topic {
                None => DispatchResult::Failed(format!(
                    "{e} (no dead-letter topic; its proxy stays on the schedules topic)"
                )),
                Some(dlt) => {
                    let reason = e.to_string();
                    let records = [
                        DispatchRecord::DeadLetter(
                            self.dead_letter_record(dlt, topic, partition, dispatch, &reason),
                        ),
                        tombstone_record(topic, partition, dispatch),
                    ];
                    let began = Instant::now();
                    match self.in_transaction(&records).and_then(|sent| {
                        match sent.into_iter().find_map(Result::err) {
                            None => self.finish_transaction(&[], began),
                            Some(d) => {
                                self.abort_transaction();
                                Err(format!("dead-letter copy: {d}"))
                            }
                        }
                    }) {
                        Ok(()) => {
                            DispatchResult::Failed(format!("{e} (copied to the dead-letter topic)"))
                        }
                        Err(error) => DispatchResult::Retry {
                            transient: Some(error),
                        },
                    }
                }
            });
        }
        settled
    }

    /// Begins a transaction and sends `records` in it; the per-record results.
    fn in_transaction(&self, records: &[DispatchRecord<'_>]) -> Result<Vec<SendResult>, String> {
        if self.renewal_due.get().is_some() {
            return Err("a new dispatch producer instance is to take over first".to_owned());
        }
        self.dispatcher
            .begin_transaction()
            .map_err(|e| format!("begin_transaction: {e}"))?;
        self.dispatcher.context().take_witness();
        Ok(send_round(&self.dispatcher, records, self.round_timeout()))
    }

    /// Sends `records` in the open transaction (begun at `began`) and commits it (aborts it
    /// on any failure); a commit that went unanswered is taken over, as a chunk's is.
    fn finish_transaction(
        &mut self,
        records: &[DispatchRecord<'_>],
        began: Instant,
    ) -> Result<(), String> {
        let sent = send_round(&self.dispatcher, records, self.round_timeout());
        if let Some(e) = sent.into_iter().find_map(Result::err) {
            self.abort_transaction();
            return Err(format!("dispatch: {e}"));
        }
        match self.commit_open(began) {
            CommitEnd::Committed => Ok(()),
            CommitEnd::NotCommitted(error) => Err(error),
            CommitEnd::Unanswered(unanswered) => self.take_over_unanswered(unanswered, 1),
        }
    }
}
