//! Loading: the replay of the schedules topic into each partition's tracker. Records are decoded
//! in place, rebalances create and drop partition runs, and the partition end (or a record
//! written after Karafka's grace) marks a partition loaded; a record with a newer schema blocks
//! its partition.

use std::collections::BTreeMap;
use std::time::Duration;

use ferrokafka_core::CoreError;
use ferrokafka_core::codec::envelope::{self, ProxyRecord, validate_stored_epoch};
use ferrokafka_core::codec::state::TrackerState;
use ferrokafka_core::schedule::{ScheduleRecord, ScheduleTracker, TrackerConfig};
use rdkafka::TopicPartitionList;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers as _, Message};

use super::{Backoff, PartitionRun, ProxyPayload, SchedulerLoop};
use crate::daemon::{RebalanceEvent, at_partition_end, now_ms};
use crate::error::KafkaResult;
use crate::packed_headers::PackedHeaders;

/// Records applied between two loading-progress log lines.
const PROGRESS_EVERY: u64 = 100_000;

impl SchedulerLoop {
    /// Applies records until none is waiting (or a bounded number, to keep dispatching); an
    /// error that ends the daemon (see [`GroupContext::poll_error`]).
    pub(super) fn poll_records(&mut self, first_wait: Duration) -> KafkaResult<()> {
        let mut wait = first_wait;
        for _ in 0..10_000 {
            let Some(polled) = self.consumer.poll(wait) else {
                return Ok(());
            };
            wait = Duration::ZERO;
            match polled {
                Ok(message) => {
                    self.consumer.context().connected();
                    let horizon_ms =
                        u64::try_from(self.options.horizon.as_millis()).unwrap_or(u64::MAX);
                    // Read in place: only a schedule's payload and headers are copied out.
                    let newer_schema = apply(&mut self.runs, horizon_ms, &message);
                    drop(message);
                    if let Some((topic, partition)) = newer_schema {
                        let mut paused = TopicPartitionList::new();
                        let _ = paused.add_partition(&topic, partition);
                        if let Err(e) = self.consumer.pause(&paused) {
                            log::warn!("pause {topic}-{partition}: {e}");
                        }
                    }
                }
                Err(KafkaError::PartitionEOF(partition)) => self.reached_end(partition),
                Err(e) => self.consumer.context().poll_error(e)?,
            }
        }
        Ok(())
    }

    pub(super) fn handle_assignments(&mut self) {
        let events = self.consumer.context().take_events();
        for event in events {
            match event {
                RebalanceEvent::Assigned(partitions) => {
                    for (topic, partition) in partitions {
                        log::info!("assigned {topic}-{partition}: loading schedules");
                        let earlier = self.earlier_counts.remove(&(topic.clone(), partition));
                        let run = self.run_for(&topic, partition);
                        if let Some(earlier) = earlier {
                            run.tracker.add_earlier(earlier);
                        }
                    }
                }
                RebalanceEvent::Revoked(partitions) => {
                    for key in partitions {
                        log::info!("revoked {}-{}: dropping its schedules", key.0, key.1);
                        if let Some(run) = self.runs.remove(&key) {
                            self.earlier_counts.insert(key, run.tracker.counts());
                        }
                    }
                }
            }
        }
    }

    fn run_for(&mut self, topic: &str, partition: i32) -> &mut PartitionRun {
        let horizon_ms = u64::try_from(self.options.horizon.as_millis()).unwrap_or(u64::MAX);
        run_for(&mut self.runs, horizon_ms, topic, partition)
    }

    fn reached_end(&mut self, partition: i32) {
        // The assignment may have arrived in this same poll round: its run must exist first.
        self.handle_assignments();
        for ((topic, p), run) in &mut self.runs {
            if *p != partition
                || run.tracker.state() != TrackerState::Loading
                || run.blocked.is_some()
            {
                continue;
            }
            // The end-of-partition event does not name the topic: the loading run of this
            // partition number that reached its end is the one.
            let at_end = at_partition_end(&self.consumer, topic, *p, run.next_offset);
            if at_end == Some(true) {
                let _ = run.tracker.mark_loaded();
                log::info!(
                    "loaded {topic}-{p}: {} records read, {} schedules pending",
                    run.applied,
                    run.tracker.len()
                );
                run.last_report = None;
            }
        }
    }
}

/// Why a schedules record cannot be applied.
#[derive(Debug)]
pub(super) enum RecordProblem {
    /// Malformed or foreign: counted and skipped.
    Bad(String),
    /// Written with a newer schema: the partition stops until the daemon is upgraded.
    NewerSchema(String),
}

impl std::fmt::Display for RecordProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordProblem::Bad(reason) | RecordProblem::NewerSchema(reason) => f.write_str(reason),
        }
    }
}

/// Decodes a schedules-topic record into the tracker's terms, reading it in place: a tombstone
/// or cancel copies nothing, a schedule copies its payload and headers.
pub(super) fn decode_message<M: Message>(
    message: &M,
) -> Result<(&str, ScheduleRecord<ProxyPayload>), RecordProblem> {
    let key = message
        .key()
        .and_then(|k| std::str::from_utf8(k).ok())
        .filter(|k| !k.is_empty())
        .ok_or_else(|| RecordProblem::Bad("missing or non-UTF-8 key".to_owned()))?;
    let headers: Vec<(&str, &[u8])> = message
        .headers()
        .map(|headers| {
            headers
                .iter()
                .map(|header| (header.key, header.value.unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let parsed = envelope::parse_proxy_headers(&headers).map_err(|e| match e {
        CoreError::UnsupportedVersion { .. } => RecordProblem::NewerSchema(e.to_string()),
        e => RecordProblem::Bad(e.to_string()),
    })?;
    let decoded = match parsed {
        ProxyRecord::Schedule { epoch_secs, target } => {
            envelope::require_target_elsewhere(&target.topic, message.topic())
                .map_err(|e| RecordProblem::Bad(e.to_string()))?;
            ScheduleRecord::Schedule {
                epoch_secs,
                payload: ProxyPayload {
                    value: message.payload().map(<[u8]>::to_vec),
                    headers: PackedHeaders::pack(&headers),
                    target,
                },
            }
        }
        ProxyRecord::Cancel => ScheduleRecord::Cancel,
        ProxyRecord::Tombstone { source_offset } => ScheduleRecord::Tombstone { source_offset },
    };
    Ok((key, decoded))
}

/// The run of `topic`/`partition`, created (loading) when the partition is new.
fn run_for<'a>(
    runs: &'a mut BTreeMap<(String, i32), PartitionRun>,
    horizon_ms: u64,
    topic: &str,
    partition: i32,
) -> &'a mut PartitionRun {
    runs.entry((topic.to_owned(), partition))
        .or_insert_with(|| {
            let mut tracker = ScheduleTracker::new(TrackerConfig { horizon_ms }, now_ms());
            // A fresh tracker always accepts the move to loading.
            let _ = tracker.mark_loading();
            PartitionRun {
                tracker,
                next_offset: 0,
                stored_offset: -1,
                applied: 0,
                last_report: None,
                state_report_failing: None,
                dispatch_backoff: Backoff::default(),
                blocked: None,
                unread: Vec::new(),
                read_back_backoff: Backoff::default(),
            }
        })
}

/// Applies one schedules-topic record to its partition's run. Returns the partition to pause
/// when the record has a newer schema (the partition then stops until the daemon is upgraded).
fn apply<M: Message>(
    runs: &mut BTreeMap<(String, i32), PartitionRun>,
    horizon_ms: u64,
    message: &M,
) -> Option<(String, i32)> {
    let (topic, partition) = (message.topic(), message.partition());
    let decoded = decode_message(message).and_then(|(key, decoded)| {
        check_epoch(&decoded, now_ms())?;
        Ok((key, decoded))
    });
    let run = run_for(runs, horizon_ms, topic, partition);
    if run.blocked.is_some() {
        // Fetched before the pause took effect; read again after an upgrade.
        return None;
    }
    let offset = u64::try_from(message.offset()).unwrap_or(0);
    if let Err(RecordProblem::NewerSchema(reason)) = &decoded {
        log::error!(
            "{topic}-{partition}@{offset}: {reason}; partition stopped (nothing applied or \
             dispatched from here) until this daemon is upgraded, as Karafka does"
        );
        run.blocked = Some(reason.clone());
        return Some((topic.to_owned(), partition));
    }
    run.next_offset = message.offset() + 1;
    run.applied += 1;
    if run.tracker.state() == TrackerState::Loading && run.applied % PROGRESS_EVERY == 0 {
        log::info!("loading {topic}-{partition}: {} records read", run.applied);
    }
    match decoded {
        Ok((key, decoded)) => {
            if let Err(e) = run.tracker.apply(offset, key, decoded) {
                log::warn!("{topic}-{partition}@{offset}: skipped: {e}");
                run.tracker.record_skipped(offset);
            }
        }
        Err(e) => {
            log::warn!("{topic}-{partition}@{offset}: skipped a bad schedules record: {e}");
            run.tracker.record_skipped(offset);
        }
    }
    let written_ms = message
        .timestamp()
        .to_millis()
        .and_then(|ms| u64::try_from(ms).ok())
        .unwrap_or(0);
    if run.tracker.state() == TrackerState::Loading && run.tracker.loaded_by_record_time(written_ms)
    {
        log::info!(
            "loaded {topic}-{partition}: records written after the load started reached \
             ({} read, {} schedules pending; the partition end was not reached)",
            run.applied,
            run.tracker.len()
        );
        run.last_report = None;
    }
    None
}

/// Karafka's read-side epoch bounds (see `validate_stored_epoch`) applied to a decoded schedule.
fn check_epoch(decoded: &ScheduleRecord<ProxyPayload>, now_ms: u64) -> Result<(), RecordProblem> {
    if let ScheduleRecord::Schedule { epoch_secs, .. } = decoded {
        let now_secs = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
        validate_stored_epoch(*epoch_secs, now_secs)
            .map_err(|e| RecordProblem::Bad(e.to_string()))?;
    }
    Ok(())
}
