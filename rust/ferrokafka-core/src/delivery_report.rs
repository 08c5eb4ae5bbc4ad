//! [`DeliveryReports`]: the delivery reports of batches being filled, one per call that queued a
//! batch of records and wants a single report of where each landed (`produce_many(...,
//! on_delivery=...)`).
//!
//! A batch's records have consecutive ids `first`, `first + 1`, ... (the producer's tickets) and
//! are settled one by one, in any order, possibly before the call that queued them returned:
//! delivered (partition and offset) or failed (an error). The call then says how many of its
//! records it queued ([`DeliveryReports::close`]); the report is complete once that many are
//! settled, and is handed out exactly once, by whichever of `close` and
//! [`DeliveryReports::settle`] completes it.
//!
//! Generic over who gets the report (`C`) and the error of a failed record (`E`), so the
//! bindings keep their Python objects in it while the bookkeeping stays pure and tested here.
//! Not thread-safe by itself: the engine keeps it under a mutex.

use std::collections::BTreeMap;

/// Where one record of a batch landed (partition, offset), or why it failed.
pub type Outcome<E> = Result<(i32, i64), E>;

/// A complete report: where every record the call queued landed, in call order.
#[derive(Debug, PartialEq, Eq)]
pub struct DeliveryReport<C, E> {
    /// Who gets the report.
    pub recipient: C,
    /// Each record's partition; -1 for a failed one.
    pub partitions: Vec<i32>,
    /// Each record's offset; -1 for a failed one.
    pub offsets: Vec<i64>,
    /// `(index in the call, error)` of each failed record, by index.
    pub errors: Vec<(usize, E)>,
}

/// A report being filled.
#[derive(Debug)]
struct Filling<C, E> {
    report: DeliveryReport<C, E>,
    settled: usize,
    /// How many records the call queued; None until it said so.
    expected: Option<usize>,
}

impl<C, E> Filling<C, E> {
    fn complete(&self) -> bool {
        self.expected == Some(self.settled)
    }

    fn finish(self) -> DeliveryReport<C, E> {
        let mut report = self.report;
        // Indices are unique: an unstable sort gives the same order without a buffer.
        report.errors.sort_unstable_by_key(|(index, _)| *index);
        report
    }
}

/// The reports being filled, keyed by their batch's first id; see the module docs.
#[derive(Debug)]
pub struct DeliveryReports<C, E> {
    filling: BTreeMap<u64, Filling<C, E>>,
}

impl<C, E> Default for DeliveryReports<C, E> {
    fn default() -> Self {
        DeliveryReports {
            filling: BTreeMap::new(),
        }
    }
}

impl<C, E> DeliveryReports<C, E> {
    /// Opens the report of a batch whose `size` records have ids `first`, `first + 1`, ...;
    /// `recipient` gets it. Ranges of open reports must not overlap.
    pub fn open(&mut self, first: u64, size: usize, recipient: C) {
        let report = DeliveryReport {
            recipient,
            partitions: vec![-1; size],
            offsets: vec![-1; size],
            errors: Vec::new(),
        };
        let filling = Filling {
            report,
            settled: 0,
            expected: None,
        };
        self.filling.insert(first, filling);
    }

    /// The call that opened the report at `first` queued its first `accepted` records: the
    /// report covers those (the others were refused, and the call `raised`). Returns the report
    /// if they are all settled already (or there were none); a call that queued nothing and
    /// raised gets no report.
    pub fn close(
        &mut self,
        first: u64,
        accepted: usize,
        raised: bool,
    ) -> Option<DeliveryReport<C, E>> {
        let filling = self.filling.get_mut(&first)?;
        filling.expected = Some(accepted);
        filling.report.partitions.truncate(accepted);
        filling.report.offsets.truncate(accepted);
        if !filling.complete() {
            return None;
        }
        let report = self.filling.remove(&first)?.finish();
        (accepted > 0 || !raised).then_some(report)
    }

    /// The record with id `id` settled with `outcome`: returns the report it completed, if it
    /// did. An id no open report covers is ignored.
    pub fn settle(&mut self, id: u64, outcome: Outcome<E>) -> Option<DeliveryReport<C, E>> {
        let (&first, filling) = self.filling.range_mut(..=id).next_back()?;
        let index = usize::try_from(id - first).unwrap_or(usize::MAX);
        if index >= filling.report.offsets.len() {
            return None;
        }
        match outcome {
            Ok((partition, offset)) => {
                filling.report.partitions[index] = partition;
                filling.report.offsets[index] = offset;
            }
            Err(error) => filling.report.errors.push((index, error)),
        }
        filling.settled += 1;
        if !filling.complete() {
            return None;
        }
        self.filling.remove(&first).map(Filling::finish)
    }

    /// Whether no report is being filled (none left behind).
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.filling.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Reports = DeliveryReports<&'static str, String>;

    #[test]
    fn a_report_settled_before_its_call_returns_goes_out_at_close() {
        let mut reports = Reports::default();
        reports.open(10, 3, "call");
        assert_eq!(reports.settle(12, Ok((0, 7))), None);
        assert_eq!(reports.settle(10, Err("boom".to_owned())), None);
        assert_eq!(reports.settle(11, Ok((1, 3))), None, "not closed yet");
        let report = reports.close(10, 3, false).expect("complete at close");
        assert_eq!(report.recipient, "call");
        assert_eq!(report.partitions, [-1, 1, 0]);
        assert_eq!(report.offsets, [-1, 3, 7]);
        assert_eq!(report.errors, [(0, "boom".to_owned())]);
        assert!(reports.is_empty());
    }

    #[test]
    fn a_report_closed_first_goes_out_with_its_last_record() {
        let mut reports = Reports::default();
        reports.open(1, 4, "call");
        assert_eq!(reports.settle(2, Ok((0, 1))), None);
        // Two of four queued: the report covers those two only.
        assert_eq!(reports.close(1, 2, true), None);
        let report = reports.settle(1, Ok((0, 0))).expect("the last record");
        assert_eq!(
            (report.partitions, report.offsets),
            (vec![0, 0], vec![0, 1])
        );
        assert!(reports.is_empty());
    }

    #[test]
    fn a_call_that_queued_nothing_gets_a_report_only_if_it_did_not_raise() {
        let mut reports = Reports::default();
        reports.open(1, 0, "empty batch");
        let report = reports.close(1, 0, false).expect("an empty report");
        assert_eq!(report.offsets, Vec::<i64>::new());
        reports.open(2, 3, "refused batch");
        assert_eq!(reports.close(2, 0, true), None);
        assert!(reports.is_empty(), "and it is forgotten");
    }

    #[test]
    fn ids_outside_every_open_report_are_ignored() {
        let mut reports = Reports::default();
        assert_eq!(reports.settle(5, Ok((0, 0))), None);
        reports.open(10, 2, "call");
        assert_eq!(reports.settle(9, Ok((0, 0))), None, "below the first");
        assert_eq!(reports.settle(12, Ok((0, 0))), None, "past the last");
        assert_eq!(reports.close(10, 2, false), None, "nothing was settled");
        assert!(!reports.is_empty(), "still waiting for its records");
    }

    /// What happens next to one batch: its call returns, or one of its records settles.
    #[derive(Clone, Debug)]
    enum Step {
        Close(usize),
        Settle(usize, usize),
    }

    /// Batches as (size, accepted, raised) and every step of theirs (each accepted record
    /// settles once), shuffled into any interleaving.
    fn batches_and_steps() -> impl Strategy<Value = (Vec<(usize, usize, bool)>, Vec<Step>)> {
        prop::collection::vec(
            (0usize..6).prop_flat_map(|size| (Just(size), 0..=size, any::<bool>())),
            1..6,
        )
        .prop_flat_map(|batches| {
            let mut steps = Vec::new();
            for (batch, &(_, accepted, _)) in batches.iter().enumerate() {
                steps.push(Step::Close(batch));
                steps.extend((0..accepted).map(|index| Step::Settle(batch, index)));
            }
            (Just(batches), Just(steps).prop_shuffle())
        })
    }

    proptest! {
        #[test]
        fn every_batch_gets_its_report_once_with_every_record_once(
            (batches, steps) in batches_and_steps(),
            failing in any::<u64>(),
        ) {
            let mut reports = DeliveryReports::<usize, (usize, usize)>::default();
            // Ids as the producer hands them out: consecutive ranges, an empty batch taking one.
            let mut firsts = Vec::new();
            let mut next = 1u64;
            for (batch, &(size, _, _)) in batches.iter().enumerate() {
                reports.open(next, size, batch);
                firsts.push(next);
                next += size.max(1) as u64;
            }
            // Record `index` of batch `batch` fails when its bit in `failing` is set.
            let fails = |batch: usize, index: usize| (failing >> ((batch * 6 + index) % 64)) & 1 == 1;
            let mut handed_out = Vec::new();
            for step in steps {
                let report = match step {
                    Step::Close(batch) => {
                        let (_, accepted, raised) = batches[batch];
                        reports.close(firsts[batch], accepted, raised)
                    }
                    Step::Settle(batch, index) => {
                        let id = firsts[batch] + index as u64;
                        let outcome = if fails(batch, index) {
                            Err((batch, index))
                        } else {
                            Ok((batch as i32, index as i64))
                        };
                        reports.settle(id, outcome)
                    }
                };
                handed_out.extend(report);
            }
            // The model: every batch but those that queued nothing and raised gets one report,
            // of its accepted records, each in its place.
            let mut expected: Vec<usize> = (0..batches.len())
                .filter(|&b| !(batches[b].1 == 0 && batches[b].2))
                .collect();
            let mut got: Vec<usize> = handed_out.iter().map(|r| r.recipient).collect();
            got.sort_unstable();
            expected.sort_unstable();
            prop_assert_eq!(got, expected);
            prop_assert!(reports.is_empty());
            for report in handed_out {
                let batch = report.recipient;
                let accepted = batches[batch].1;
                prop_assert_eq!(report.offsets.len(), accepted);
                prop_assert_eq!(report.partitions.len(), accepted);
                let mut failed = Vec::new();
                for index in 0..accepted {
                    if fails(batch, index) {
                        prop_assert_eq!(report.offsets[index], -1);
                        prop_assert_eq!(report.partitions[index], -1);
                        failed.push((index, (batch, index)));
                    } else {
                        prop_assert_eq!(report.offsets[index], index as i64);
                        prop_assert_eq!(report.partitions[index], batch as i32);
                    }
                }
                prop_assert_eq!(report.errors, failed);
            }
        }
    }
}
