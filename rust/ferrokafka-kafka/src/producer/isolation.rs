//! Records a broker refused with their batch, sent again in halves until each refusal rests on
//! the records that caused it (plain mode only).
//!
//! Why: the broker judges a produce request's batch as a whole. One keyless record on a
//! compacted topic fails every record of its batch, and librdkafka reports each of them with
//! that record's error (it names the neighbours only when two or more records were invalid:
//! `rd_kafka_dr_msgq0` gives a single record error's code to the whole batch); a batch over the
//! topic's `max.message.bytes` fails whole too. The good neighbours were handed back as
//! refused. Java's producer splits a batch refused as too large and sends the halves again;
//! this does that for both refusals.
//!
//! How: the delivery callback keeps such records as suspects (`State::suspects`) instead of
//! handing them back. The worker takes them with the hand-off lock held, so no other record
//! reaches librdkafka meanwhile; it first waits until librdkafka holds none of ours (a record
//! queued beside a half would share its request), then sends the first half and waits for its
//! reports, then the second. What a half's request refused comes back as suspects and is split
//! in turn; a record refused when sent alone is handed back with its refusal. Each group is
//! smaller than the one it came from, so the search ends: about two round trips per halving,
//! 20 for one bad record among a thousand. A shutdown puts what is left back for the
//! shutdown to hand back.
//!
//! Not for idempotent or transactional producers: sending the good neighbours again would put
//! them behind newer records of their partition, which those modes promise not to do, so they
//! hand the refused batch back as before (README, "What holds when the broker goes away").

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::AsyncProducer;
use super::pending::Pending;
use crate::error::KafkaIoError;

/// How long one wait for librdkafka's reports lasts before the worker looks for a shutdown.
const REPORT_WAIT_SLICE: Duration = Duration::from_millis(100);

/// Whether the broker refused `err`'s record for its batch, which may have been another
/// record's fault: a record that failed validation, or a batch over the topic's size limit.
pub(super) fn refused_with_its_batch(err: &KafkaError) -> bool {
    matches!(
        err.rdkafka_error_code(),
        Some(RDKafkaErrorCode::InvalidRecord | RDKafkaErrorCode::MessageSizeTooLarge)
    )
}

/// A suspect and what the broker said when it refused the batch it was in.
pub(super) type Suspect = (Box<Pending>, KafkaIoError);

impl AsyncProducer {
    /// Sends `suspects` again in halves until every refused record was refused alone (handed
    /// back) and the others were delivered. Called by the worker, holding the hand-off lock,
    /// with the suspects counted in flight.
    pub(super) fn isolate(&self, suspects: Vec<Suspect>) {
        if let Some((_, error)) = suspects.first() {
            log::info!(
                "{} record(s) refused with their batch ({error}): sending them again in halves \
                 to tell the refused records from their neighbours",
                suspects.len()
            );
        }
        let mut groups = VecDeque::from([suspects]);
        while let Some(mut group) = groups.pop_front() {
            // What librdkafka still holds (and any records it refuses meanwhile) comes first.
            if !self.wait_for_reports() {
                return self.leave_suspects(groups.into_iter().flatten().chain(group));
            }
            group.extend(self.shared.take_suspects(&mut self.shared.lock()));
            let second = group.split_off(group.len() / 2);
            let mut halves = [group, second].into_iter().filter(|half| !half.is_empty());
            while let Some(half) = halves.next() {
                let alone = half.len() == 1;
                self.shared.lock().stats.retried += half.len() as u64;
                self.hand_off(half.into_iter().map(|(pending, _)| pending).collect(), true);
                if !self.wait_for_reports() {
                    // The half not sent yet goes back with the groups still to split.
                    return self
                        .leave_suspects(halves.flatten().chain(groups.into_iter().flatten()));
                }
                let refused = self.shared.take_suspects(&mut self.shared.lock());
                if alone {
                    let refused = refused.into_iter();
                    self.shared
                        .fail(refused.map(|(pending, error)| (pending, error.refused_alone())));
                } else if !refused.is_empty() {
                    groups.push_back(refused);
                }
            }
        }
    }

    /// Waits until librdkafka holds none of this producer's records (each reported); false
    /// when a shutdown's grace period ended first.
    fn wait_for_reports(&self) -> bool {
        let producer = self.producer();
        while !producer.flush_until(Instant::now() + REPORT_WAIT_SLICE) {
            if self.stopping() {
                return false;
            }
        }
        true
    }

    /// Puts suspects not sent again back for the shutdown, which hands them back.
    fn leave_suspects(&self, suspects: impl IntoIterator<Item = Suspect>) {
        let mut state = self.shared.lock();
        let before = state.suspects.len();
        state.suspects.extend(suspects);
        let count = state.suspects.len() - before;
        self.shared.put_back_from_flight(&state, count);
    }
}
