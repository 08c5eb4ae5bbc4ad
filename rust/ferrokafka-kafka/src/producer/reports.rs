//! What the engine reports back to the bindings: [`ProducerEvent`]s, the batch reports'
//! [`Acknowledgement`]s, what a tracked record's waiter learns ([`Written`]), and the counters
//! ([`ProducerStats`]).

use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;

use rdkafka::message::Message;

use super::AsyncProducer;
use super::pending::{POSITION_ONLY, Pending, Ticket};
use crate::error::KafkaIoError;
use crate::locks::lock;
use crate::record::ReceivedRecord;

/// Where a batch report's record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acknowledgement {
    /// The record's ticket.
    pub ticket: Ticket,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
}

/// Something the bindings report to Python: delivery results and instrumentation.
#[derive(Debug)]
pub enum ProducerEvent {
    /// A tracked record was written.
    Delivered {
        /// The record's ticket.
        ticket: Ticket,
        /// Where it landed.
        record: ReceivedRecord,
    },
    /// Records of batch reports ([`POSITION_ONLY`] tickets) were written: take where with
    /// [`AsyncProducer::take_acknowledged`]. Sent when the first of them arrives after a take,
    /// so a million acknowledgements cost a handful of events.
    Acknowledged,
    /// A record finally failed; it is handed back with the error.
    Failed {
        /// The record.
        pending: Box<Pending>,
        /// Why it failed.
        error: KafkaIoError,
    },
    /// Records dropped by the `drop_oldest` policy, handed back.
    Dropped {
        /// The dropped records, oldest first.
        pending: Vec<Box<Pending>>,
    },
    /// A delivery round handed records to librdkafka (`deliver_messages`).
    DeliverMessages {
        /// Records handed over in the round.
        message_count: usize,
        /// Records still buffered after it.
        queue_size: usize,
    },
    /// The last event: the producer shut down (lets a listener stop waiting at once).
    ShutDown,
    /// Nothing happened: ends a listener's wait at once ([`AsyncProducer::wake_listener`]).
    Wake,
    /// librdkafka reported a failed send that will be retried (`delivery_error`).
    DeliveryError {
        /// Topic of the record.
        topic: String,
        /// The error.
        error: KafkaIoError,
        /// Failures of this record so far.
        attempt: u32,
    },
}

/// Counters exposed by [`AsyncProducer::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Records accepted into the queue.
    pub enqueued: u64,
    /// Records confirmed written by the broker.
    pub delivered: u64,
    /// Records handed back after their final failure.
    pub failed: u64,
    /// Re-sends after a failure.
    pub retried: u64,
    /// Records dropped by `drop_oldest`.
    pub dropped: u64,
    /// Records refused because the queue was full.
    pub overflowed: u64,
    /// Delivery rounds run.
    pub deliveries: u64,
    /// Records buffered now.
    pub queue_size: u64,
    /// Bytes buffered now.
    pub queue_bytes: u64,
    /// Records handed to librdkafka and not yet settled.
    pub in_flight: u64,
    /// Records waiting to be handed to librdkafka again: after a failed send, or given back by
    /// its full queue. Every accepted record is delivered, failed, dropped, or in
    /// `queue_size + retry_queue_size + in_flight`.
    pub retry_queue_size: u64,
}

/// What the waiter of a tracked record learns when it was written.
#[derive(Debug)]
pub(super) enum Written {
    /// A batch report's record: where it landed.
    Position(Acknowledgement),
    /// Any other tracked record: a copy of it as written.
    Record(Ticket, ReceivedRecord),
}

impl Written {
    /// For the record with `ticket`, written as `message`; None if untracked.
    pub(super) fn of<M: Message>(ticket: Ticket, message: &M) -> Option<Self> {
        if ticket == 0 {
            None
        } else if ticket & POSITION_ONLY != 0 {
            Some(Written::Position(Acknowledgement {
                ticket,
                partition: message.partition(),
                offset: message.offset(),
            }))
        } else {
            Some(Written::Record(
                ticket,
                ReceivedRecord::from_message(message),
            ))
        }
    }
}

impl AsyncProducer {
    /// Takes the batch reports' records written since the last take, in the order they were
    /// written.
    pub fn take_acknowledged(&self) -> Vec<Acknowledgement> {
        std::mem::take(&mut *lock(&self.shared.acknowledged))
    }

    /// Takes the event receiver; the bindings drain it on a Python thread. Only the first call
    /// gets it.
    pub fn take_events(&self) -> Option<Receiver<ProducerEvent>> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ProducerStats {
        let state = self.shared.lock();
        ProducerStats {
            queue_size: state.buffer.len() as u64,
            queue_bytes: state.buffer.bytes() as u64,
            in_flight: self.shared.in_flight.load(Ordering::Acquire) as u64,
            retry_queue_size: (state.retries.len() + state.suspects.len()) as u64,
            delivered: self.shared.delivered.load(Ordering::Relaxed),
            ..state.stats
        }
    }
}
