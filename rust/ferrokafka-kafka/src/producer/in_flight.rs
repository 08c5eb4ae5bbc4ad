//! [`InFlight`]: what the AsyncProducer hands librdkafka with each record as its delivery
//! opaque, packed into the pointer-sized word itself.
//!
//! Why: a record in flight used to travel as its boxed `Pending`, so a million records queued
//! in librdkafka kept a million boxes alive, allocated on the producing thread and freed on
//! librdkafka's polling thread; the fresh pages they took were a sixth of the producer's CPU
//! (perf: the kernel zeroing pages for the allocator). Now the box is freed as soon as
//! librdkafka copied the record, and only this word travels. When a record must be sent
//! again or handed back, it is rebuilt from librdkafka's copy (topic, key, value, headers),
//! which the delivery report carries.
//!
//! librdkafka's report of a failed record carries no timestamp, so a record that names its own
//! timestamp (rare) still travels boxed, whole; the low bit of the word tells which it is.
//!
//! Packed layout (64-bit targets): bit 0 set, bits 1-16 the failed sends so far (saturating),
//! bit 17 whether the record named its partition, bits 18-63 the ticket. A rebuilt record names
//! a partition only if the original did: a record whose partition librdkafka chose is
//! partitioned again when re-sent.
//!
//! Ownership: every word handed to librdkafka is consumed exactly once: by [`InFlight::settle`]
//! or [`InFlight::into_pending`] when its report comes, or [`InFlight::reclaim`] when librdkafka
//! refused it.

use std::ffi::c_void;

use rdkafka::message::Message;
use rdkafka::util::IntoOpaque;

use super::pending::{Pending, Ticket};
use crate::record::{OutgoingRecord, header_list};

/// Tickets stay below 2^46 ([`super::pending::POSITION_ONLY`] is bit 45), which the
/// packed word holds.
const TICKET_SHIFT: u32 = 18;
const PACKED: usize = 1;
const FAILURES_SHIFT: u32 = 1;
const FAILURES_MASK: usize = 0xFFFF;
// A transaction's positions (at most one hand-off chunk of them) fit the failed-sends field.
const _: () = assert!(super::HANDOFF_CHUNK <= FAILURES_MASK);
const EXPLICIT_PARTITION: usize = 1 << 17;

/// A record's delivery opaque: packed ticket, failed sends and whether the partition was its
/// own, or (low bit clear) a boxed record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InFlight(usize);

impl InFlight {
    /// The opaque of `pending` as it is handed over now: packed, or a boxed copy of a record
    /// that names its timestamp.
    pub(crate) fn of(pending: &Pending) -> Self {
        Self::carrying(pending, pending.failures)
    }

    /// The opaque of `pending` sent as the `position`-th record of a transaction: the position
    /// travels where the failed sends do (the worker keeps those for the open transaction), so
    /// the transaction's reports, which librdkafka gives in an order of its own (an abort purges
    /// queued records before those in flight), can be put back in the order they were sent.
    pub(crate) fn in_transaction(pending: &Pending, position: u32) -> Self {
        Self::carrying(pending, position)
    }

    /// `pending` packed (or boxed) with `count` in the failed-sends field.
    fn carrying(pending: &Pending, count: u32) -> Self {
        if pending.record.timestamp_ms.is_some() {
            let boxed = Box::into_raw(Box::new(Pending {
                failures: count,
                ..pending.clone()
            }));
            debug_assert_eq!(boxed as usize & PACKED, 0, "a box is aligned");
            return InFlight(boxed as usize);
        }
        let failures = usize::try_from(count).map_or(FAILURES_MASK, |f| f.min(FAILURES_MASK));
        debug_assert!(pending.ticket < 1 << 46, "tickets stay below 2^46");
        let ticket = usize::try_from(pending.ticket).unwrap_or(0);
        let mut word = PACKED | (failures << FAILURES_SHIFT) | (ticket << TICKET_SHIFT);
        if pending.record.partition.is_some() {
            word |= EXPLICIT_PARTITION;
        }
        InFlight(word)
    }

    fn boxed(self) -> Option<Box<Pending>> {
        // SAFETY: a word with the low bit clear was made from `Box::into_raw` in `of`, and
        // each word is consumed once (module docs).
        (self.0 & PACKED == 0).then(|| unsafe { Box::from_raw(self.0 as *mut Pending) })
    }

    /// Consumes the opaque of a delivered record; returns its ticket.
    pub(crate) fn settle(self) -> Ticket {
        match self.boxed() {
            Some(pending) => pending.ticket,
            None => (self.0 >> TICKET_SHIFT) as Ticket,
        }
    }

    /// Consumes the opaque of a record librdkafka refused (the caller still has the record).
    pub(crate) fn reclaim(self) {
        drop(self.boxed());
    }

    /// The record again (consuming the opaque): the boxed one, or rebuilt from librdkafka's
    /// copy in `message`.
    pub(crate) fn into_pending<M: Message>(self, message: &M) -> Box<Pending> {
        if let Some(pending) = self.boxed() {
            return pending;
        }
        let partition = message.partition();
        Box::new(Pending {
            record: OutgoingRecord {
                topic: message.topic().to_owned(),
                partition: (self.0 & EXPLICIT_PARTITION != 0 && partition >= 0)
                    .then_some(partition),
                key: message.key().map(<[u8]>::to_vec),
                value: message.payload().map(<[u8]>::to_vec),
                headers: header_list(message),
                timestamp_ms: None,
            },
            partition_key: None,
            ticket: (self.0 >> TICKET_SHIFT) as Ticket,
            failures: ((self.0 >> FAILURES_SHIFT) & FAILURES_MASK) as u32,
        })
    }
}

impl IntoOpaque for InFlight {
    fn into_ptr(self) -> *mut c_void {
        // A packed word is never dereferenced: librdkafka only hands it back.
        self.0 as *mut c_void
    }

    unsafe fn from_ptr(ptr: *mut c_void) -> Self {
        InFlight(ptr as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(ticket: Ticket, failures: u32, partition: Option<i32>, ts: Option<i64>) -> Pending {
        Pending {
            record: OutgoingRecord {
                topic: "t".to_owned(),
                partition,
                timestamp_ms: ts,
                ..OutgoingRecord::default()
            },
            partition_key: None,
            ticket,
            failures,
        }
    }

    /// What `into_pending` rebuilds from librdkafka's copy, from an owned message standing
    /// in for the report.
    fn reported(pending: &Pending) -> rdkafka::message::OwnedMessage {
        rdkafka::message::OwnedMessage::new(
            pending.record.value.clone(),
            pending.record.key.clone(),
            pending.record.topic.clone(),
            rdkafka::Timestamp::NotAvailable,
            pending.record.partition.unwrap_or(2),
            0,
            None,
        )
    }

    #[test]
    fn the_word_keeps_ticket_failures_and_whether_the_partition_was_named() {
        for (ticket, failures, partition) in [
            (0, 0, None),
            (1, 3, Some(2)),
            (1 << 45 | 12, 70_000, None),
            ((1 << 46) - 1, 0xFFFF, Some(0)),
        ] {
            let original = pending(ticket, failures, partition, None);
            // SAFETY: the pointer came from into_ptr.
            let word = unsafe { InFlight::from_ptr(InFlight::of(&original).into_ptr()) };
            assert_eq!(word.0 & PACKED, PACKED);
            let back = word.into_pending(&reported(&original));
            assert_eq!(back.ticket, ticket);
            assert_eq!(back.failures, failures.min(0xFFFF));
            assert_eq!(back.record.partition, partition);
            assert_eq!(InFlight::of(&original).settle(), ticket);
        }
    }

    #[test]
    fn a_record_that_names_its_timestamp_travels_whole() {
        let original = pending(7, 2, None, Some(1_600_000_000_000));
        let back = InFlight::of(&original).into_pending(&reported(&original));
        assert_eq!(back.record, original.record);
        assert_eq!((back.ticket, back.failures), (7, 2));
        assert_eq!(InFlight::of(&original).settle(), 7);
        InFlight::of(&original).reclaim();
    }

    #[test]
    fn a_transactions_record_carries_its_position_in_place_of_its_failures() {
        for timestamp in [None, Some(1_600_000_000_000)] {
            let original = pending(9, 4, None, timestamp);
            let back = InFlight::in_transaction(&original, 731).into_pending(&reported(&original));
            assert_eq!((back.ticket, back.failures), (9, 731));
            assert_eq!(back.record.timestamp_ms, timestamp);
        }
    }
}
