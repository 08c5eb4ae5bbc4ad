//! Targets the broker refused: a refusal is confirmed by sending the target alone, then the
//! schedule is copied to the dead-letter topic (when there is one) before its tombstone.

use ferrokafka_core::codec::envelope;
use ferrokafka_core::schedule::Dispatch;
use rdkafka::error::KafkaError;

use super::dispatcher::{DispatchResult, retry_all};
use super::records::{DispatchRecord, refused_for_good, source_of, tombstone_record};
use super::rounds::send_round;
use super::{ProxyPayload, SchedulerLoop};
use crate::record::OutgoingRecord;

/// Header of a dead-letter copy naming why the target refused it.
pub const DEAD_LETTER_REASON_HEADER: &str = "schedule_dead_letter_reason";

impl SchedulerLoop {
    /// The copy of a refused schedule for the dead-letter topic: the target message with the
    /// dispatch headers and the refusal reason, keyed by the proxy key.
    pub(super) fn dead_letter_record(
        &self,
        dead_letter_topic: &str,
        topic: &str,
        partition: i32,
        dispatch: &Dispatch<ProxyPayload>,
        reason: &str,
    ) -> OutgoingRecord {
        let proxy = &dispatch.payload;
        let mut headers = Vec::with_capacity(proxy.headers.len() + 5);
        envelope::visit_dispatch_headers(
            proxy.headers.iter(),
            &source_of(topic, partition, dispatch),
            |name, value| headers.push((name.to_owned(), Some(value.to_vec()))),
        );
        headers.push((
            DEAD_LETTER_REASON_HEADER.to_owned(),
            Some(reason.as_bytes().to_vec()),
        ));
        OutgoingRecord {
            topic: dead_letter_topic.to_owned(),
            partition: None,
            key: Some(dispatch.key.as_bytes().to_vec()),
            value: proxy.value.clone(),
            headers,
            timestamp_ms: None,
        }
    }

    /// What became of each schedule of a chunk whose targets round (`sent`) had failures: a
    /// refusal is confirmed by sending the target alone; tombstones follow acknowledged targets,
    /// dead-letter copies (then tombstones) follow refused ones. Synchronous: failures are rare.
    pub(super) fn settle_failed_targets(
        &self,
        topic: &str,
        partition: i32,
        due: &[Dispatch<ProxyPayload>],
        mut sent: Vec<Result<(), KafkaError>>,
    ) -> Vec<DispatchResult> {
        let timeout = self.round_timeout();
        // The targets were chosen when the chunk was sent, so their partition counts are known.
        let targets = match self.targets_of(topic, partition, due) {
            Ok(targets) => targets,
            Err(error) => return retry_all(due, Some(error)),
        };
        // The broker refuses a whole batch when it is too large, so a refusal counts only once
        // the target, sent alone, is refused again.
        for (target, result) in targets.iter().zip(sent.iter_mut()) {
            if result.as_ref().is_err_and(refused_for_good) {
                *result = send_round(&self.dispatcher, std::slice::from_ref(target), timeout)
                    .pop()
                    .unwrap_or(Ok(()));
            }
        }
        // Second round: tombstones of acknowledged targets, dead-letter copies of refused ones.
        let mut follow_ups = Vec::new();
        let mut follow_up_of = vec![None; due.len()];
        for (n, (dispatch, result)) in due.iter().zip(&sent).enumerate() {
            let record = match result {
                Ok(()) => Some(tombstone_record(topic, partition, dispatch)),
                Err(e) if refused_for_good(e) => {
                    self.options.dead_letter_topic.as_ref().map(|dlt| {
                        DispatchRecord::DeadLetter(self.dead_letter_record(
                            dlt,
                            topic,
                            partition,
                            dispatch,
                            &e.to_string(),
                        ))
                    })
                }
                Err(_) => None,
            };
            if let Some(record) = record {
                follow_up_of[n] = Some(follow_ups.len());
                follow_ups.push(record);
            }
        }
        let followed = send_round(&self.dispatcher, &follow_ups, timeout);
        // Third round: tombstones of dead-lettered schedules, once their copy is acknowledged.
        let mut tombstones = Vec::new();
        let mut tombstone_of = vec![None; due.len()];
        for (n, dispatch) in due.iter().enumerate() {
            let dead_lettered =
                sent[n].is_err() && follow_up_of[n].is_some_and(|i| followed[i].is_ok());
            if dead_lettered {
                tombstone_of[n] = Some(tombstones.len());
                tombstones.push(tombstone_record(topic, partition, dispatch));
            }
        }
        let entombed = send_round(&self.dispatcher, &tombstones, timeout);
        due.iter()
            .enumerate()
            .map(|(n, dispatch)| {
                let follow_up = follow_up_of[n].map(|i| &followed[i]);
                match (&sent[n], follow_up) {
                    (Ok(()), tombstone) => {
                        if let Some(Err(e)) = tombstone {
                            log::warn!(
                                "{topic}-{partition}@{}: target of {:?} dispatched but its tombstone was not written ({e}); a restart may dispatch it again",
                                dispatch.offset,
                                dispatch.key
                            );
                        }
                        DispatchResult::Dispatched
                    }
                    (Err(e), _) if !refused_for_good(e) => DispatchResult::Retry {
                        transient: Some(e.to_string()),
                    },
                    (Err(e), None) => DispatchResult::Failed(format!(
                        "{e} (no dead-letter topic; its proxy stays on the schedules topic)"
                    )),
                    (Err(e), Some(Ok(()))) => {
                        if let Some(Err(t)) = tombstone_of[n].map(|i| &entombed[i]) {
                            log::warn!(
                                "{topic}-{partition}@{}: tombstone of dead-lettered {:?} not written: {t}",
                                dispatch.offset,
                                dispatch.key
                            );
                        }
                        DispatchResult::Failed(format!("{e} (copied to the dead-letter topic)"))
                    }
                    (Err(e), Some(Err(d))) if refused_for_good(d) => DispatchResult::Failed(
                        format!("{e}; the dead-letter topic refused it too: {d}"),
                    ),
                    (Err(_), Some(Err(d))) => DispatchResult::Retry {
                        transient: Some(format!("dead-letter copy: {d}")),
                    },
                }
            })
            .collect()
    }
}
