//! Transactional dispatch: one transaction per chunk holding its targets and their tombstones,
//! committed before the next chunk.

use std::time::Instant;

use ferrokafka_core::schedule::Dispatch;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;

use super::dispatcher::DispatchResult;
use super::records::{DispatchRecord, refused_for_good, tombstone_record};
use super::rounds::send_round;
use super::{ProxyPayload, SchedulerLoop};

impl SchedulerLoop {
    /// One transaction per chunk, each committed before the next is sent.
    pub(super) fn dispatch_due_transactional(&mut self) {
        let per_chunk = self.options.flush_batch_size / 2;
        let keys: Vec<(String, i32)> = self.runs.keys().cloned().collect();
        for key in keys {
            while let Some(due) = self.take_due(&key, per_chunk) {
                let started = Instant::now();
                let results = self.flush_chunk_transactional(&key, &due);
                log::debug!(
                    "{}-{}: {} schedules handled in {:?}",
                    key.0,
                    key.1,
                    due.len(),
                    started.elapsed()
                );
                if !self.settle(&key, due, results) {
                    break;
                }
            }
        }
    }

    /// Dispatches `due` in one transaction: targets and tombstones are sent together (the
    /// transaction commits a tombstone only with its target), then committed.
    fn flush_chunk_transactional(
        &self,
        (topic, partition): &(String, i32),
        due: &[Dispatch<ProxyPayload>],
    ) -> Vec<DispatchResult> {
        let (topic, partition) = (topic.as_str(), *partition);
        let retry_all = |error: String| {
            due.iter()
                .map(|_| DispatchResult::Retry {
                    transient: Some(error.clone()),
                })
                .collect()
        };
        let mut records = self.targets_of(topic, partition, due);
        records.extend(
            due.iter()
                .map(|dispatch| tombstone_record(topic, partition, dispatch)),
        );
        let mut sent = match self.in_transaction(&records) {
            Ok(sent) => sent,
            Err(error) => return retry_all(error),
        };
        if sent.iter().all(Result::is_ok) {
            return match self.finish_transaction(&[]) {
                Ok(()) => due.iter().map(|_| DispatchResult::Dispatched).collect(),
                Err(error) => retry_all(error),
            };
        }
        // What became of the tombstones does not matter: the transaction is aborted below.
        sent.truncate(due.len());
        records.truncate(due.len());
        let targets = &records;
        // A failed record makes the whole transaction abortable.
        let _ = self
            .dispatcher
            .abort_transaction(self.options.dispatch_timeout);
        if !sent
            .iter()
            .any(|result| result.as_ref().is_err_and(refused_for_good))
        {
            let error = sent
                .iter()
                .find_map(|r| r.as_ref().err())
                .map(ToString::to_string);
            return retry_all(error.unwrap_or_default());
        }
        // Settle the refused ones (dead-letter copy and tombstone in a transaction of their own)
        // and retry the rest at once: they failed only with the aborted transaction.
        let mut settled = Vec::new();
        for ((dispatch, target), result) in due.iter().zip(targets).zip(&sent) {
            if !result.as_ref().is_err_and(refused_for_good) {
                settled.push(DispatchResult::Retry { transient: None });
                continue;
            }
            // The broker refuses a whole batch when it is too large: confirm the refusal with
            // the target alone.
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
                    settled.push(match self.finish_transaction(&[tombstone]) {
                        Ok(()) => DispatchResult::Dispatched,
                        Err(error) => DispatchResult::Retry {
                            transient: Some(error),
                        },
                    });
                    continue;
                }
                Err(e) => {
                    let _ = self
                        .dispatcher
                        .abort_transaction(self.options.dispatch_timeout);
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
                    match self.in_transaction(&records).and_then(|sent| {
                        match sent.into_iter().find_map(Result::err) {
                            None => self.finish_transaction(&[]),
                            Some(d) => {
                                let _ = self
                                    .dispatcher
                                    .abort_transaction(self.options.dispatch_timeout);
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
    fn in_transaction(
        &self,
        records: &[DispatchRecord<'_>],
    ) -> Result<Vec<Result<(), KafkaError>>, String> {
        self.dispatcher
            .begin_transaction()
            .map_err(|e| format!("begin_transaction: {e}"))?;
        Ok(send_round(&self.dispatcher, records, self.round_timeout()))
    }

    /// Sends `records` in the open transaction and commits it (aborts it on any failure).
    fn finish_transaction(&self, records: &[DispatchRecord<'_>]) -> Result<(), String> {
        let timeout = self.options.dispatch_timeout;
        let sent = send_round(&self.dispatcher, records, self.round_timeout());
        let committed = match sent.into_iter().find_map(Result::err) {
            Some(e) => Err(format!("dispatch: {e}")),
            None => self
                .dispatcher
                .commit_transaction(timeout)
                .map_err(|e| format!("commit_transaction: {e}")),
        };
        if committed.is_err() {
            let _ = self.dispatcher.abort_transaction(timeout);
        }
        committed
    }
}
