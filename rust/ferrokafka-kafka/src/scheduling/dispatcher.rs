//! The dispatcher: due schedules taken in chunks, and the at-least-once pipeline that sends a
//! chunk's targets, then its tombstones once every target is acknowledged, and marks a
//! partition's schedules in the order they were sent.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferrokafka_core::schedule::Dispatch;
use rdkafka::producer::Producer;

use super::records::{
    DispatchRecord, refused_for_good, source_of, tombstone_record, tombstones_of,
};
use super::rounds::{RoundId, Rounds};
use super::{MAX_SLEEP, ProxyPayload, SchedulerLoop};
use crate::daemon::now_ms;
use crate::error::KafkaIoError;
use crate::partitioner::METADATA_TIMEOUT;

/// Schedules on their way at once (targets or tombstones sent, not yet acknowledged; at least one
/// chunk), at-least-once or in one transaction: enough that a second's worth of due schedules is
/// handed to the producer at once, well within librdkafka's default queue of 100,000 messages.
pub(super) const PIPELINE_SCHEDULES: usize = 25_000;

/// Sends of a tombstone (its target acknowledged) before its failure is only logged: a restart
/// may then dispatch that schedule again.
const TOMBSTONE_ATTEMPTS: u32 = 3;

/// Time a round waits beyond librdkafka's `message.timeout.ms` for the reports of its records.
const ROUND_GRACE: Duration = Duration::from_secs(5);

/// What became of one schedule of a dispatched chunk.
pub(super) enum DispatchResult {
    /// Target acknowledged (and its tombstone written or, rarely, logged as not written).
    Dispatched,
    /// Target refused for good; the reason, with where the schedule went.
    Failed(String),
    /// Not dispatched; retry, after a backoff pause when `transient` names the error.
    Retry { transient: Option<String> },
}

/// Every schedule of `due` dispatched.
pub(super) fn all_dispatched(due: &[Dispatch<ProxyPayload>]) -> Vec<DispatchResult> {
    due.iter().map(|_| DispatchResult::Dispatched).collect()
}

/// Every schedule of `due` to be retried, after a backoff when `transient` names an error.
pub(super) fn retry_all(
    due: &[Dispatch<ProxyPayload>],
    transient: Option<String>,
) -> Vec<DispatchResult> {
    due.iter()
        .map(|_| DispatchResult::Retry {
            transient: transient.clone(),
        })
        .collect()
}

/// An at-least-once chunk of one partition's schedules on its way. Its targets are sent
/// without waiting for the chunks before it; its tombstones only once every target of the chunk
/// was acknowledged (a chunk with a failed target is settled synchronously, see
/// `settle_failed_targets`).
pub(super) struct ChunkInFlight {
    partition: (String, i32),
    due: Vec<Dispatch<ProxyPayload>>,
    stage: ChunkStage,
}

enum ChunkStage {
    /// Targets sent; acknowledgements awaited.
    Targets(RoundId),
    /// Every target acknowledged; tombstones (of `due[of[i]]`) sent for the `attempt`th time.
    Tombstones {
        round: RoundId,
        of: Vec<usize>,
        attempt: u32,
    },
    /// The fate of every schedule is known; marked once the earlier chunks of its partition are.
    Settled(Vec<DispatchResult>),
}

impl SchedulerLoop {
    pub(super) fn dispatch_due(&mut self) {
        if self.transactional {
            self.dispatch_due_transactional();
        } else {
            self.start_due_chunks();
        }
    }

    /// Sends due chunks, one per partition in turn, while the pipeline has room (see
    /// [`ChunkInFlight`]); [`Self::settle_chunks`] moves them on as the broker answers.
    fn start_due_chunks(&mut self) {
        if self.pipeline_full() {
            return;
        }
        self.take_due_chunks(|daemon, partition, due| {
            let targets = match daemon.targets_of(&partition.0, partition.1, &due) {
                Ok(targets) => targets,
                Err(error) => return daemon.retry_later(&partition, due, error),
            };
            let round = Rounds::start(&daemon.dispatcher, &targets, daemon.round_timeout());
            daemon.in_flight.push_back(ChunkInFlight {
                partition,
                due,
                stage: ChunkStage::Targets(round),
            });
            !daemon.pipeline_full()
        });
    }

    /// Takes due chunks of `flush_batch_size / 2` schedules, one partition's in turn, and hands
    /// each to `take` as soon as it is taken (so the first goes out before the last is taken),
    /// until nothing is due or `take` answers that there is no room for another.
    pub(super) fn take_due_chunks(
        &mut self,
        mut take: impl FnMut(&mut Self, (String, i32), Vec<Dispatch<ProxyPayload>>) -> bool,
    ) {
        let per_chunk = self.options.flush_batch_size / 2;
        let keys: Vec<(String, i32)> = self.runs.keys().cloned().collect();
        let mut taken = true;
        while taken {
            taken = false;
            for key in &keys {
                let Some(due) = self.take_due(key, per_chunk) else {
                    continue;
                };
                if !take(self, key.clone(), due) {
                    return;
                }
                taken = true;
            }
        }
    }

    /// How long a round waits for its delivery reports: librdkafka's own `message.timeout.ms`
    /// (the dispatch timeout by default) plus [`ROUND_GRACE`] for its report to arrive.
    pub(super) fn round_timeout(&self) -> Duration {
        self.options.dispatch_timeout + ROUND_GRACE
    }

    pub(super) fn pipeline_full(&self) -> bool {
        let on_the_way: usize = self.in_flight.iter().map(|chunk| chunk.due.len()).sum();
        on_the_way >= PIPELINE_SCHEDULES
    }

    /// Up to `max` schedules of `key`'s partition due now, unless the partition is blocked or
    /// waits out a backoff.
    fn take_due(&mut self, key: &(String, i32), max: usize) -> Option<Vec<Dispatch<ProxyPayload>>> {
        let run = self.runs.get_mut(key)?;
        if run.dispatch_backoff.waiting() || run.blocked.is_some() {
            return None;
        }
        let due = run.tracker.due(now_ms(), max);
        (!due.is_empty()).then_some(due)
    }

    /// The target records of `due`; the error (for a retry after a backoff) when a target's
    /// partition key has no partition yet: its topic's partition count was never learnt, and
    /// librdkafka would place it anywhere.
    pub(super) fn targets_of<'a>(
        &self,
        topic: &'a str,
        partition: i32,
        due: &'a [Dispatch<ProxyPayload>],
    ) -> Result<Vec<DispatchRecord<'a>>, String> {
        due.iter()
            .map(|dispatch| self.target_record(topic, partition, dispatch))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())
    }

    /// Puts back `due`, which could not be sent (`error`): this partition waits out a backoff.
    /// Returns true, what a [`Self::take_due_chunks`] callback answers for the other partitions
    /// to go on, so that its callers say it in one line.
    pub(super) fn retry_later(
        &mut self,
        partition: &(String, i32),
        due: Vec<Dispatch<ProxyPayload>>,
        error: String,
    ) -> bool {
        let results = retry_all(&due, Some(error));
        self.settle(partition, due, results);
        true
    }

    /// Moves on every chunk whose round the broker answered: acknowledged targets get their
    /// tombstones, failed tombstones are sent again, failed targets are settled at once. A
    /// chunk's schedules are marked once it and every earlier chunk of its partition settled,
    /// so a partition's marks follow dispatch order.
    pub(super) fn settle_chunks(&mut self) {
        if self.in_flight.is_empty() {
            return;
        }
        let mut chunks = std::mem::take(&mut self.in_flight);
        for chunk in &mut chunks {
            self.advance_chunk(chunk);
        }
        let mut unsettled: HashSet<(String, i32)> = HashSet::new();
        for chunk in chunks {
            match chunk.stage {
                ChunkStage::Settled(results) if !unsettled.contains(&chunk.partition) => {
                    self.settle(&chunk.partition, chunk.due, results);
                }
                _ => {
                    unsettled.insert(chunk.partition.clone());
                    self.in_flight.push_back(chunk);
                }
            }
        }
    }

    fn advance_chunk(&self, chunk: &mut ChunkInFlight) {
        let rounds = self.dispatcher.context();
        let timeout = self.round_timeout();
        let (topic, partition) = (&chunk.partition.0, chunk.partition.1);
        match &chunk.stage {
            ChunkStage::Targets(round) => {
                let Some(sent) = rounds.take_finished(*round) else {
                    return;
                };
                if sent.iter().all(Result::is_ok) {
                    let records = tombstones_of(topic, partition, &chunk.due);
                    chunk.stage = ChunkStage::Tombstones {
                        round: Rounds::start(&self.dispatcher, &records, timeout),
                        of: (0..records.len()).collect(),
                        attempt: 1,
                    };
                } else {
                    chunk.stage = ChunkStage::Settled(
                        self.settle_failed_targets(topic, partition, &chunk.due, sent),
                    );
                }
            }
            ChunkStage::Tombstones { round, of, attempt } => {
                let Some(results) = rounds.take_finished(*round) else {
                    return;
                };
                let (mut again, mut again_of) = (Vec::new(), Vec::new());
                for (&n, result) in of.iter().zip(results) {
                    let Err(e) = result else { continue };
                    let dispatch = &chunk.due[n];
                    if *attempt < TOMBSTONE_ATTEMPTS && !refused_for_good(&e) {
                        again.push(tombstone_record(topic, partition, dispatch));
                        again_of.push(n);
                    } else {
                        log::warn!(
                            "{topic}-{partition}@{}: target of {:?} dispatched but its tombstone was not written ({e}); a restart may dispatch it again",
                            dispatch.offset,
                            dispatch.key
                        );
                    }
                }
                chunk.stage = if again.is_empty() {
                    ChunkStage::Settled(all_dispatched(&chunk.due))
                } else {
                    ChunkStage::Tombstones {
                        round: Rounds::start(&self.dispatcher, &again, timeout),
                        of: again_of,
                        attempt: attempt + 1,
                    }
                };
            }
            ChunkStage::Settled(_) => {}
        }
    }

    /// Applies what became of a chunk's schedules to its partition's tracker (nothing when the
    /// partition was revoked meanwhile). Returns false when a transient failure put some back:
    /// the partition then waits out a backoff, counted once per failure, not once per chunk.
    pub(super) fn settle(
        &mut self,
        key: &(String, i32),
        due: Vec<Dispatch<ProxyPayload>>,
        results: Vec<DispatchResult>,
    ) -> bool {
        let Some(run) = self.runs.get_mut(key) else {
            return false;
        };
        let mut transient = None;
        let mut retried = 0;
        for (dispatch, result) in due.into_iter().zip(results) {
            match result {
                DispatchResult::Dispatched => {
                    run.tracker.mark_dispatched(&dispatch.key, dispatch.offset);
                }
                DispatchResult::Failed(reason) => {
                    log::error!(
                        "{}-{}@{}: schedule {:?} failed for good: {reason}",
                        key.0,
                        key.1,
                        dispatch.offset,
                        dispatch.key
                    );
                    run.tracker.mark_failed(&dispatch.key, dispatch.offset);
                }
                DispatchResult::Retry { transient: error } => {
                    transient = transient.or(error);
                    retried += 1;
                    let _ = run.tracker.restore(dispatch);
                }
            }
        }
        match transient {
            Some(error) => {
                if !run.dispatch_backoff.waiting() {
                    let pause = run.dispatch_backoff.failed();
                    if self.stop.load(Ordering::Acquire) {
                        // The stop ended the dispatch (librdkafka's purge, an abort): not a
                        // fault; the schedules stay in the partition for its next owner.
                        log::debug!(
                            "dispatch of {retried} schedules from {}-{} ended by the stop: {error}",
                            key.0,
                            key.1,
                        );
                    } else {
                        log::error!(
                            "dispatch of {retried} schedules from {}-{} failed, retrying in {pause:?}: {error}",
                            key.0,
                            key.1,
                        );
                    }
                }
                false
            }
            None => {
                run.dispatch_backoff.succeeded();
                true
            }
        }
    }

    /// The target record of `dispatch`, from the schedules partition `topic`/`partition`.
    fn target_record<'a>(
        &self,
        topic: &'a str,
        partition: i32,
        dispatch: &'a Dispatch<ProxyPayload>,
    ) -> Result<DispatchRecord<'a>, KafkaIoError> {
        let target = &dispatch.payload.target;
        let target_partition = match (target.partition, &target.partition_key) {
            (Some(partition), _) => Some(partition),
            (None, Some(partition_key)) => self.partitions.partition_for(
                self.dispatcher.client(),
                &target.topic,
                partition_key.as_bytes(),
                METADATA_TIMEOUT,
            )?,
            (None, None) => None,
        };
        Ok(DispatchRecord::Target {
            source: source_of(topic, partition, dispatch),
            dispatch,
            partition: target_partition,
        })
    }

    /// Lets the chunks on their way settle until `deadline`, so acknowledged targets get their
    /// tombstones before the daemon stops.
    pub(super) fn drain_pipeline(&mut self, deadline: Instant) {
        while !self.in_flight.is_empty() && Instant::now() < deadline {
            self.dispatcher.context().wait_for_progress(MAX_SLEEP);
            self.settle_chunks();
        }
        if !self.in_flight.is_empty() {
            let schedules: usize = self.in_flight.iter().map(|chunk| chunk.due.len()).sum();
            log::warn!(
                "stopping with {schedules} schedules not confirmed dispatched; a restart may dispatch them again"
            );
        }
    }
}
