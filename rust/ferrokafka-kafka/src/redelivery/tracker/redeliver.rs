//! Redelivery: due messages re-produced to their queue partition (or dead-lettered past
//! `max_redeliveries`), then their END markers; a failed write retried with backoff.

use std::sync::atomic::Ordering;
use std::time::Instant;

use ferrokafka_core::codec::marker_codec::encode_marker;
use ferrokafka_core::markers::{Marker, MessageId, Redelivery};

use super::{FIRST_BACKOFF, Tracker};
use crate::daemon::send_all;
use crate::error::{KafkaIoError, KafkaResult};
use crate::headers::REDELIVERY_COUNT_HEADER;
use crate::record::{HeaderList, OutgoingRecord};
use crate::redelivery::headers::{dead_letter, redelivery_count};

impl Tracker {
    /// Redelivers every due message of every caught-up partition not backing off.
    pub(super) fn redeliver_due(&mut self) {
        let use_now = self.options.use_now_if_no_marker_seen;
        let keys: Vec<i32> = self.partitions.keys().copied().collect();
        for partition in keys {
            // A stopping tracker writes nothing new: the next one redelivers what is due.
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let Some(run) = self.partitions.get_mut(&partition) else {
                continue;
            };
            if !run.status.caught_up || run.retry_after.is_some_and(|t| Instant::now() < t) {
                continue;
            }
            run.retry_after = None;
            let mut due = std::mem::take(&mut run.retry);
            due.extend(run.queue.markers_to_redeliver(run.clock(use_now)));
            let ends = std::mem::take(&mut run.ends_to_write);
            if due.is_empty() && ends.is_empty() {
                continue;
            }
            let outcome = self.write_redeliveries(partition, due, ends);
            let Some(run) = self.partitions.get_mut(&partition) else {
                continue;
            };
            match outcome {
                Ok(()) => run.backoff = FIRST_BACKOFF,
                Err(KafkaIoError::Closed(_)) => log::warn!(
                    "redelivery from {}-{partition} cut short by the stop: the next tracker \
                     of the group redelivers its messages",
                    self.options.markers_topic
                ),
                Err(e) => {
                    log::error!(
                        "redelivery from {}-{partition} failed, retrying in {:?}: {e}",
                        self.options.markers_topic,
                        run.backoff
                    );
                    run.retry_after = Some(Instant::now() + run.backoff);
                    run.backoff = (run.backoff * 2).min(self.options.max_backoff);
                }
            }
        }
    }

    /// Writes the redeliveries (or dead letters), then their END markers together with `ends`
    /// left over from an earlier failure. On failure, what must be written again is put back
    /// into the partition's retry lists.
    fn write_redeliveries(
        &mut self,
        markers_partition: i32,
        due: Vec<Redelivery>,
        mut ends: Vec<MessageId>,
    ) -> KafkaResult<()> {
        let timeout = self.options.produce_timeout;
        let mut records = Vec::with_capacity(due.len());
        let (mut redelivered, mut dead_lettered, mut dropped) = (0, 0, 0);
        for item in &due {
            match self.redelivery_record(item) {
                Some((record, dead)) => {
                    records.push(record);
                    if dead {
                        dead_lettered += 1;
                    } else {
                        redelivered += 1;
                    }
                }
                None => dropped += 1,
            }
        }
        if let Err(e) = send_all(&self.producer, &records, timeout, &self.stop) {
            if let Some(run) = self.partitions.get_mut(&markers_partition) {
                run.retry = due;
                run.ends_to_write = ends;
            }
            return Err(e);
        }
        ends.extend(due.iter().map(|item| item.message_id));
        let end_records: Vec<OutgoingRecord> = ends
            .iter()
            .map(|&message_id| OutgoingRecord {
                topic: self.options.markers_topic.clone(),
                partition: Some(markers_partition),
                value: Some(encode_marker(&Marker::End { message_id })),
                ..OutgoingRecord::default()
            })
            .collect();
        let ended = send_all(&self.producer, &end_records, timeout, &self.stop);
        if let Some(run) = self.partitions.get_mut(&markers_partition) {
            run.status.redelivered += redelivered;
            run.status.dead_lettered += dead_lettered;
            run.status.dropped += dropped;
            if ended.is_err() {
                run.ends_to_write = ends;
            }
        }
        ended
    }

    /// The record that redelivers `item` and whether it is a dead letter; `None` when it is
    /// past `max_redeliveries` and there is no dead-letter topic (logged).
    fn redelivery_record(&self, item: &Redelivery) -> Option<(OutgoingRecord, bool)> {
        let payload = &item.payload;
        let count = redelivery_count(&payload.headers);
        if count < self.options.max_redeliveries {
            let mut headers: HeaderList = payload
                .headers
                .iter()
                .filter(|(name, _)| name != REDELIVERY_COUNT_HEADER)
                .cloned()
                .collect();
            headers.push((
                REDELIVERY_COUNT_HEADER.to_owned(),
                Some((count + 1).to_string().into_bytes()),
            ));
            let record = OutgoingRecord {
                topic: self.options.queue_topic.clone(),
                partition: Some(i32::try_from(item.message_id.partition).unwrap_or(0)),
                key: payload.key.clone(),
                value: payload.value.clone(),
                headers,
                timestamp_ms: None,
            };
            return Some((record, false));
        }
        let Some(topic) = &self.options.dead_letter_topic else {
            log::error!(
                "{}-{}@{}: redelivered {count} times, no dead_letter_topic: dropped \
                 (key {:?}, {} value bytes)",
                self.options.queue_topic,
                item.message_id.partition,
                item.message_id.offset,
                payload.key.as_deref().map(String::from_utf8_lossy),
                payload.value.as_ref().map_or(0, Vec::len)
            );
            return None;
        };
        let record = dead_letter(
            topic,
            &self.options.queue_topic,
            item.message_id,
            count,
            payload.key.clone(),
            payload.value.clone(),
            &payload.headers,
        );
        Some((record, true))
    }
}
