//! Putting back what a closing queue consumer marked and never handed out.
//!
//! To keep its speed a queue consumer marks messages before anybody asks for them: the START
//! prefetch holds whole batches ready (START durable, queue offset committed), and the Python
//! side holds the rest of a fetched batch. Left open at a close, each would come back only after
//! its deadline, with its redelivery count raised for a handling that never happened, so a queue
//! with `max_redeliveries=0` dead-lettered them unseen.
//!
//! Invariants:
//! - A released message is re-produced to its own queue partition with its key, value and
//!   headers unchanged (its redelivery count too), and only a message whose copy was
//!   acknowledged gets its END marker. A kill between the two leaves the message to the tracker
//!   as well: delivered twice, never lost (at-least-once).
//! - Each copy counts on its own: when the close's time runs out (the broker away, a short
//!   timeout for many messages), those acknowledged by then are ended and the others stay open,
//!   to be redelivered by the tracker after their deadline with their count raised, as before
//!   there was a release (logged at WARNING with the count). A copy acknowledged after that is
//!   delivered twice.
//! - Only messages still in flight are released: one acked or nacked meanwhile is left alone.
//! - The copies join the end of their partition, behind what was produced meanwhile: a queue
//!   promises no order between messages.
//!
//! Threading: called by the closing thread after the prefetch threads stopped. The producer is
//! created only when there is something to release, and dropped when done; its delivery
//! reports arrive on its polling thread. No Python runs here.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use ferrokafka_core::markers::{Marker, MessageId};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext};

use super::marker_writer::{MarkerWriter, message_id};
use crate::config::ClientSettings;
use crate::daemon::{RoomWait, enqueue_with, synchronous_producer};
use crate::locks::wait_timeout;
use crate::oauth::{TokenRefresh, plain_client_context};
use crate::record::{OutgoingRecord, ReceivedRecord};

/// Re-produces the in-flight `records` of `queue_topic`, then writes the END markers of those
/// whose copy was acknowledged before `deadline`; the others stay open (logged).
pub(super) fn release(
    settings: &ClientSettings,
    writer: &MarkerWriter,
    queue_topic: &str,
    records: Vec<ReceivedRecord>,
    deadline: Instant,
) {
    let records: Vec<ReceivedRecord> = records
        .into_iter()
        .filter(|r| writer.is_in_flight(message_id(r.partition, r.offset)))
        .collect();
    if records.is_empty() {
        return;
    }
    let ids: Vec<MessageId> = records
        .iter()
        .map(|r| message_id(r.partition, r.offset))
        .collect();
    let copies: Vec<OutgoingRecord> = records
        .into_iter()
        .map(|r| OutgoingRecord {
            topic: queue_topic.to_owned(),
            partition: Some(r.partition),
            key: r.key,
            value: r.value,
            headers: r.headers,
            timestamp_ms: None,
        })
        .collect();
    let (written, failure) = put_back(settings, &copies, deadline);
    let put: Vec<MessageId> = written.iter().map(|&index| ids[index]).collect();
    let ended = writer.finish(&put, |message_id| Some(Marker::End { message_id }));
    let left_open = ids.len() - put.len();
    match (ended, failure) {
        (Ok(()), None) => log::info!(
            "QueueConsumer closing: {} messages it marked and never handed out put back on \
             {queue_topic}, their redelivery count unchanged",
            put.len()
        ),
        (Ok(()), Some(failure)) => log::warn!(
            "QueueConsumer closing: {} of {} messages it marked and never handed out put back \
             on {queue_topic}; the other {left_open} could not be ({failure}): the tracker \
             redelivers them after their deadline, counting a redelivery",
            put.len(),
            ids.len()
        ),
        (Err(e), _) => log::warn!(
            "QueueConsumer closing: {} messages it marked and never handed out were put back on \
             {queue_topic} but not ended ({e}): the tracker redelivers them too, so they come \
             twice",
            put.len()
        ),
    }
}

/// Produces `copies` and waits until `deadline` for their acknowledgements; returns the
/// indexes of those acknowledged, and why the others were not when some were not.
fn put_back(
    settings: &ClientSettings,
    copies: &[OutgoingRecord],
    deadline: Instant,
) -> (Vec<usize>, Option<String>) {
    let producer = match synchronous_producer(
        settings,
        PutBackAcks::new(settings.token_refresh()),
        "create the producer that puts messages back",
    ) {
        Ok(producer) => producer,
        Err(e) => return (Vec::new(), Some(e.to_string())),
    };
    let acks = producer.context();
    let mut refused = None;
    for (index, copy) in copies.iter().enumerate() {
        // Counted before the send: the delivery report may arrive before `enqueue` returns.
        acks.lock().pending += 1;
        if let Err(e) = enqueue_with(&producer, copy, index, RoomWait::until(deadline)) {
            acks.lock().pending -= 1;
            refused = Some(e);
            break;
        }
    }
    let mut state = acks.lock();
    while state.pending > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        state = wait_timeout(&acks.settled, state, left);
    }
    let written = std::mem::take(&mut state.written);
    let failure = (written.len() < copies.len()).then(|| match state.failure.take().or(refused) {
        Some(e) => e.to_string(),
        None => format!(
            "{} copies not acknowledged within the close's timeout",
            copies.len() - written.len()
        ),
    });
    (written, failure)
}

/// The put-back producer's context: which copies were acknowledged.
struct PutBackAcks {
    state: Mutex<PutBackState>,
    settled: Condvar,
    tokens: TokenRefresh,
}

#[derive(Default)]
struct PutBackState {
    /// Copies handed to librdkafka and not yet reported.
    pending: usize,
    /// Indexes of the copies acknowledged.
    written: Vec<usize>,
    /// The first delivery failure.
    failure: Option<KafkaError>,
}

impl PutBackAcks {
    fn new(tokens: TokenRefresh) -> Self {
        PutBackAcks {
            state: Mutex::new(PutBackState::default()),
            settled: Condvar::new(),
            tokens,
        }
    }

    fn lock(&self) -> MutexGuard<'_, PutBackState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

plain_client_context!(PutBackAcks, tokens);

impl ProducerContext for PutBackAcks {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        let mut state = self.lock();
        state.pending = state.pending.saturating_sub(1);
        match result {
            Ok(_) => state.written.push(index),
            Err((e, _)) => {
                state.failure.get_or_insert_with(|| e.clone());
            }
        }
        if state.pending == 0 {
            self.settled.notify_all();
        }
    }
}
