//! What becomes of a dispatched batch: acknowledged, it goes to the commit thread; refused for
//! size, each START is written alone and a message refused alone is dead-lettered or handed
//! back; failed, it and the batches behind it are rewound and the error handed to `take`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Instant;

use rdkafka::Offset;
use rdkafka::consumer::Consumer;
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;

use super::{ALONE, Dispatched, POLL_SLICE, Prefetcher, Refused, SETTLE_POLL, STOP_GRACE};
use crate::daemon::{RoomWait, enqueue_with};
use crate::error::{KafkaIoError, KafkaResult};
use crate::record::ReceivedRecord;
use crate::redelivery::headers::{dead_letter, redelivery_count};
use crate::redelivery::marker_writer::message_id;

impl Prefetcher {
    /// Waits for the STARTs counted as `number` (a batch, or [`ALONE`]): up to the marker
    /// timeout, and once the consumer is closing up to [`STOP_GRACE`] after that. Given up,
    /// they are no longer counted.
    fn wait_for_starts(&self, number: usize, operation: &str) -> KafkaResult<()> {
        let timeout = self.marker_timeout;
        let deadline = Instant::now() + timeout;
        loop {
            let end = self
                .stop_seen()
                .map_or(deadline, |since| deadline.min(since + STOP_GRACE));
            let slice = end
                .saturating_duration_since(Instant::now())
                .min(POLL_SLICE);
            match self.acks().settled(number, slice) {
                Some(Ok(())) => return Ok(()),
                Some(Err(e)) => {
                    return Err(KafkaIoError::from_rdkafka(operation, e, timeout, None));
                }
                None if Instant::now() >= end => {
                    self.acks().forget(number);
                    return Err(KafkaIoError::timed_out(operation, timeout, None));
                }
                None => {}
            }
        }
    }

    /// Waits for the START markers of the first travelling batch and hands it to the commit
    /// thread. On failure every batch polled after it is given up too, and all are read again.
    pub(super) fn confirm_first(&self, travelling: &mut VecDeque<Dispatched>) {
        let Some(batch) = travelling.pop_front() else {
            return;
        };
        match self.wait_for_starts(batch.number, "write START markers") {
            // The commit thread ends only after this thread: the send cannot fail.
            Ok(()) => drop(self.to_commit.send(batch)),
            Err(e) if refused_for_good(&e) => self.write_alone(batch, travelling),
            Err(e) => self.fail_from(batch.records, travelling, e),
        }
    }

    /// Gives up `records` and every batch travelling behind them (see [`Self::fail`]).
    fn fail_from(
        &self,
        mut records: Vec<ReceivedRecord>,
        travelling: &mut VecDeque<Dispatched>,
        error: KafkaIoError,
    ) {
        for later in travelling.drain(..) {
            self.acks().forget(later.number);
            records.extend(later.records);
        }
        self.fail(&records, error);
    }

    /// A batch the markers topic refused for size: once the STARTs in flight are settled (so
    /// that each START below travels alone in its produce request), writes each START of the
    /// batch alone. A message whose START is refused alone is refused for good (see
    /// [`Self::refuse`]); the batch goes on to the commit without it. Any other failure gives up
    /// the rest of the batch and the batches behind it, as in [`Self::confirm_first`].
    fn write_alone(&self, batch: Dispatched, travelling: &mut VecDeque<Dispatched>) {
        if let Err(e) = self.settle_starts() {
            return self.fail_from(batch.records, travelling, e);
        }
        let mut passed = Dispatched {
            number: batch.number,
            records: Vec::with_capacity(batch.records.len()),
            set_at: Instant::now(),
            passed: Vec::new(),
            handed_back: Vec::new(),
            passed_to: Vec::new(),
        };
        let mut rest = batch.records.into_iter();
        while let Some(record) = rest.next() {
            let written = self
                .dispatch(ALONE, std::slice::from_ref(&record))
                .map_err(|e| {
                    self.acks().forget(ALONE);
                    self.start_error(e)
                })
                .and_then(|()| self.wait_for_starts(ALONE, "write START markers"));
            let failure = match written {
                Ok(()) => {
                    passed.records.push(record);
                    continue;
                }
                Err(e) if refused_for_good(&e) => {
                    let position = (record.partition, record.offset);
                    match self.refuse(record, e) {
                        Ok(handed_back) => {
                            passed.passed.push(position);
                            passed.handed_back.extend(handed_back);
                            continue;
                        }
                        Err(failure) => failure,
                    }
                }
                Err(e) => (record, e),
            };
            let (record, error) = failure;
            drop(self.to_commit.send(passed));
            let failed: Vec<ReceivedRecord> = std::iter::once(record).chain(rest).collect();
            return self.fail_from(failed, travelling, error);
        }
        drop(self.to_commit.send(passed));
    }

    /// Waits until librdkafka holds none of the STARTs sent (up to the marker timeout, less
    /// once the consumer is closing); their reports are counted as they come.
    fn settle_starts(&self) -> KafkaResult<()> {
        let deadline = Instant::now() + self.marker_timeout;
        while self.starts.producer().in_flight_count() > 0 {
            let closing = self
                .stop_seen()
                .is_some_and(|since| since.elapsed() >= STOP_GRACE);
            if closing || Instant::now() >= deadline {
                return Err(KafkaIoError::timed_out(
                    "write START markers",
                    self.marker_timeout,
                    None,
                ));
            }
            std::thread::sleep(SETTLE_POLL);
        }
        Ok(())
    }

    /// A message whose START the markers topic refused alone: copied to the dead-letter topic
    /// (when that write fails, the message and that error come back as a failure) or, without
    /// one, handed back (returned); logged and counted either way. Its position is committed
    /// with its batch.
    // The record travels back on failure; a rare path, not worth a box.
    #[allow(clippy::result_large_err)]
    fn refuse(
        &self,
        record: ReceivedRecord,
        error: KafkaIoError,
    ) -> Result<Option<Refused>, (ReceivedRecord, KafkaIoError)> {
        let place = format!(
            "{}-{}@{}",
            self.queue_topic, record.partition, record.offset
        );
        let Some(topic) = &self.dead_letter_topic else {
            log::error!(
                "{place}: its START marker was refused for good ({error}): handed back to \
                 the caller, not handed out, never redelivered"
            );
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(Refused { record, error }));
        };
        let letter = dead_letter(
            topic,
            &self.queue_topic,
            message_id(record.partition, record.offset),
            redelivery_count(&record.headers),
            record.key.clone(),
            record.value.clone(),
            &record.headers,
        );
        self.acks().expect(ALONE, 1);
        let room = RoomWait::until(Instant::now() + self.marker_timeout);
        let written = enqueue_with(self.starts.producer(), &letter, ALONE, room)
            .map_err(|e| {
                self.acks().forget(ALONE);
                KafkaIoError::from_rdkafka("write dead letter", e, self.marker_timeout, None)
            })
            .and_then(|()| self.wait_for_starts(ALONE, "write dead letter"));
        match written {
            Ok(()) => {
                log::error!(
                    "{place}: its START marker was refused for good ({error}): \
                     dead-lettered to {topic}"
                );
                self.refused.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
            Err(e) => Err((record, e)),
        }
    }

    /// Rewinds the consumer to failed records and hands the error to the next `take` (a
    /// closing consumer rewinds nothing: the next reader starts from the committed offsets).
    pub(super) fn fail(&self, records: &[ReceivedRecord], error: KafkaIoError) {
        if self.stop_seen().is_none() {
            self.rewind(records);
        }
        let mut state = self.handoff.lock();
        state.ahead = state.ahead.saturating_sub(records.len());
        state.error = Some(error);
        self.handoff.changed.notify_all();
    }

    /// Seeks back to the first record of each partition of a batch whose markers failed.
    fn rewind(&self, records: &[ReceivedRecord]) {
        let mut first: BTreeMap<i32, i64> = BTreeMap::new();
        for record in records {
            let slot = first.entry(record.partition).or_insert(record.offset);
            *slot = (*slot).min(record.offset);
        }
        for (partition, offset) in first {
            if let Err(e) = self.consumer.seek(
                &self.queue_topic,
                partition,
                Offset::Offset(offset),
                self.marker_timeout,
            ) {
                log::error!(
                    "cannot rewind {}-{partition} to {offset}: {e}",
                    self.queue_topic
                );
            }
        }
    }
}

/// Whether the markers topic refused a START for good: it is too large, for the topic or for
/// this client, and would be refused again on every read.
fn refused_for_good(error: &KafkaIoError) -> bool {
    matches!(error, KafkaIoError::Broker { code, .. }
        if *code == RDKafkaErrorCode::MessageSizeTooLarge as i32)
}
