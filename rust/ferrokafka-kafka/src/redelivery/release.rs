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
//!   headers unchanged (its redelivery count too), and only once every copy is acknowledged are
//!   their END markers written. A kill between the two leaves the message to the tracker as
//!   well: delivered twice, never lost (at-least-once).
//! - A release that fails (the broker away, the timeout over) writes no END: the messages stay
//!   open and the tracker redelivers them after their deadline, with their count raised, as
//!   before there was a release. Copies that did land by then are delivered twice. It is logged
//!   at WARNING with the count.
//! - Only messages still in flight are released: one acked or nacked meanwhile is left alone.
//! - The copies join the end of their partition, behind what was produced meanwhile: a queue
//!   promises no order between messages.
//!
//! Threading: called by the closing thread after the prefetch threads stopped. The producer is
//! created only when there is something to release, and dropped when done. No Python runs here.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use ferrokafka_core::markers::{Marker, MessageId};

use super::marker_writer::{MarkerWriter, message_id};
use crate::config::ClientSettings;
use crate::daemon::{send_all, synchronous_producer};
use crate::error::KafkaResult;
use crate::record::{OutgoingRecord, ReceivedRecord};

/// Re-produces the in-flight `records` of `queue_topic` and then writes their END markers, all
/// before `deadline`. On failure (logged), nothing is ended.
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
    let outcome = put_back(settings, &copies, deadline)
        .and_then(|()| writer.finish(&ids, |message_id| Some(Marker::End { message_id })));
    match outcome {
        Ok(()) => {
            log::info!(
                "QueueConsumer closing: {} messages it marked and never handed out put back on \
                 {queue_topic}, their redelivery count unchanged",
                ids.len()
            );
        }
        Err(e) => {
            log::warn!(
                "QueueConsumer closing: {} messages it marked and never handed out could not be \
                 put back on {queue_topic} ({e}); the tracker redelivers them after their \
                 deadline, counting a redelivery",
                ids.len()
            );
        }
    }
}

/// Produces `copies` and waits for every acknowledgement until `deadline`.
fn put_back(
    settings: &ClientSettings,
    copies: &[OutgoingRecord],
    deadline: Instant,
) -> KafkaResult<()> {
    let producer = synchronous_producer(settings, "create the producer that puts messages back")?;
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    send_all(&producer, copies, left, &AtomicBool::new(false))
}
