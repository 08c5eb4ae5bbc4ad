//! [`DeliveryWaiters`]: who waits for which tracked record of the AsyncProducer. A record of its
//! own has one waiter (`W`: in the bindings an `on_delivery` callback or a future), found by its
//! ticket; a record of a batch report ([`POSITION_ONLY`] ticket) fills its batch's
//! [`DeliveryReport`], handed out once complete (see `ferrokafka_core::delivery_report`).
//!
//! Threads: registered by the producing thread before the record can be delivered, settled by
//! whichever thread drains the engine's events (in the bindings a Python thread). Each table is
//! one map under its own mutex, held for one map operation (or one drained list of
//! acknowledgements), so queueing a tracked record and settling it cost no allocation beyond
//! the map's. Generic so that the bindings keep their Python objects here while the bookkeeping
//! stays in the engine, tested in Rust; the caller runs the waiters and recipients it gets back,
//! after the lock is released (they may produce again).

use std::sync::Mutex;

use ferrokafka_core::delivery_report::{DeliveryReport, DeliveryReports, Outcome};
use rustc_hash::FxHashMap;

use super::pending::{POSITION_ONLY, Ticket};
use super::reports::Acknowledgement;
use crate::locks::lock;

/// The waiter tables; see the module docs. `C` gets a batch's report, `E` is a failed record's
/// error.
#[derive(Debug)]
pub struct DeliveryWaiters<W, C, E> {
    /// Tickets are the engine's own counter, so a fast non-keyed hash is enough.
    records: Mutex<FxHashMap<Ticket, W>>,
    reports: Mutex<DeliveryReports<C, E>>,
}

impl<W, C, E> Default for DeliveryWaiters<W, C, E> {
    fn default() -> Self {
        DeliveryWaiters {
            records: Mutex::default(),
            reports: Mutex::new(DeliveryReports::default()),
        }
    }
}

/// Who a settled record's result goes to.
#[derive(Debug, PartialEq, Eq)]
pub enum Settled<W, C, E> {
    /// Nobody: an untracked record, or its waiter was forgotten.
    Nobody,
    /// The record's own waiter, taken, and the outcome it gets.
    Waiter(W, Outcome<E>),
    /// The record was part of a batch report: the report it completed, if it did.
    Batch(Option<DeliveryReport<C, E>>),
}

impl<W, C, E> DeliveryWaiters<W, C, E> {
    /// Registers the waiter of the record with `ticket` (from `AsyncProducer::ticket`).
    pub fn register(&self, ticket: Ticket, waiter: W) {
        lock(&self.records).insert(ticket, waiter);
    }

    /// Forgets the waiter of a record that was refused before being queued.
    pub fn forget(&self, ticket: Ticket) -> Option<W> {
        lock(&self.records).remove(&ticket)
    }

    /// Registers the report of a batch whose `size` records get tickets `first`, `first + 1`,
    /// ... (from `AsyncProducer::batch_tickets`); `recipient` gets it.
    pub fn register_batch(&self, first: Ticket, size: usize, recipient: C) {
        lock(&self.reports).open(first, size, recipient);
    }

    /// The call that registered the batch at `first` queued `accepted` of its records (and
    /// `raised` for the others): the report, if that completed it (see
    /// [`DeliveryReports::close`]).
    pub fn expect_batch(
        &self,
        first: Ticket,
        accepted: usize,
        raised: bool,
    ) -> Option<DeliveryReport<C, E>> {
        lock(&self.reports).close(first, accepted, raised)
    }

    /// The record with `ticket` settled with `outcome`: who gets it.
    pub fn settle(&self, ticket: Ticket, outcome: Outcome<E>) -> Settled<W, C, E> {
        if ticket == 0 {
            return Settled::Nobody;
        }
        if ticket & POSITION_ONLY != 0 {
            return Settled::Batch(lock(&self.reports).settle(ticket, outcome));
        }
        match self.forget(ticket) {
            Some(waiter) => Settled::Waiter(waiter, outcome),
            None => Settled::Nobody,
        }
    }

    /// Batch reports' records were written where `acknowledged` (from
    /// `AsyncProducer::take_acknowledged`) says: the reports that completed, under one lock.
    pub fn acknowledge(&self, acknowledged: Vec<Acknowledgement>) -> Vec<DeliveryReport<C, E>> {
        let mut reports = lock(&self.reports);
        acknowledged
            .into_iter()
            .filter_map(|a| reports.settle(a.ticket, Ok((a.partition, a.offset))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Waiters = DeliveryWaiters<&'static str, &'static str, &'static str>;

    #[test]
    fn a_records_ticket_finds_its_own_waiter_once() {
        let waiters = Waiters::default();
        waiters.register(7, "future");
        assert_eq!(
            waiters.settle(7, Err("boom")),
            Settled::Waiter("future", Err("boom"))
        );
        assert_eq!(waiters.settle(7, Ok((0, 1))), Settled::Nobody, "taken");
        assert_eq!(waiters.settle(0, Ok((0, 1))), Settled::Nobody, "untracked");
        waiters.register(8, "callback");
        assert_eq!(waiters.forget(8), Some("callback"));
        assert_eq!(
            waiters.settle(8, Ok((0, 1))),
            Settled::Nobody,
            "refused, forgotten"
        );
    }

    #[test]
    fn a_position_only_ticket_fills_its_batch_report_not_a_records_waiter() {
        let waiters = Waiters::default();
        let first = 40 | POSITION_ONLY;
        // A record waiter under the same number without the bit is another record.
        waiters.register(41, "record 41");
        waiters.register_batch(first, 3, "batch");
        assert_eq!(waiters.settle(first + 1, Err("boom")), Settled::Batch(None));
        let acknowledged = [first, first + 2].map(|ticket| Acknowledgement {
            ticket,
            partition: 1,
            offset: 5,
        });
        assert!(
            waiters.acknowledge(acknowledged.to_vec()).is_empty(),
            "not closed yet"
        );
        let report = waiters.expect_batch(first, 3, false).expect("complete");
        assert_eq!(report.recipient, "batch");
        assert_eq!(report.offsets, [5, -1, 5]);
        assert_eq!(report.errors, [(1, "boom")]);
        assert_eq!(waiters.forget(41), Some("record 41"), "untouched");
    }

    #[test]
    fn acknowledgements_hand_out_each_report_they_complete() {
        let waiters = Waiters::default();
        let (a, b) = (1 | POSITION_ONLY, 3 | POSITION_ONLY);
        waiters.register_batch(a, 2, "a");
        waiters.register_batch(b, 1, "b");
        assert_eq!(waiters.expect_batch(a, 2, false), None);
        assert_eq!(waiters.expect_batch(b, 1, false), None);
        let acknowledged = [b, a + 1, a].map(|ticket| Acknowledgement {
            ticket,
            partition: 0,
            offset: i64::try_from(ticket & !POSITION_ONLY).unwrap_or(-1),
        });
        let reports = waiters.acknowledge(acknowledged.to_vec());
        let done: Vec<_> = reports
            .iter()
            .map(|r| (r.recipient, &r.offsets[..]))
            .collect();
        assert_eq!(done, [("b", &[3][..]), ("a", &[1, 2][..])]);
    }
}
