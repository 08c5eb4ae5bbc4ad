//! Handlers that run longer than `max.poll.interval.ms`.
//!
//! A Java or Karafka consumer whose handler overruns `max.poll.interval.ms` is put out of its
//! group, and another member takes the partition over. This engine polls on its own thread, so
//! the group never learns of a stuck handler: the consumer stays, the partition waits for it,
//! and its lag grows without a word. So the poller says it: once per batch, at WARNING, when
//! its handler has run (retries and their backoff included) longer than the consumer's
//! `max.poll.interval.ms` (librdkafka's default 300 s unless set), naming the partition and
//! offsets; and at INFO when that batch is settled at last.

use std::time::{Duration, Instant};

use super::state::{InFlight, Shared, Slot};

/// How often the poller looks for overdue handlers: a warning comes at most this late.
pub(super) const OVERDUE_CHECK: Duration = Duration::from_secs(1);

impl Shared {
    /// Says, once per batch, which handlers have run longer than `max.poll.interval.ms`.
    ///
    /// The warnings are written once the partitions' locks are released: a record goes to
    /// Python's `logging`, whose handlers may let the GIL go while they write, and a Python
    /// thread holding the GIL may be waiting for one of those locks (`stats()`, `ack`).
    pub(super) fn warn_overdue(&self, now: Instant) {
        let mut overdue = Vec::new();
        for slot in self.all_slots() {
            let mut state = slot.lock();
            for batch in state.in_flight.values_mut() {
                let running = now.saturating_duration_since(batch.started);
                if batch.overdue_said || running < self.overdue_after {
                    continue;
                }
                batch.overdue_said = true;
                overdue.push((describe(&slot, batch), running));
            }
        }
        for (batch, running) in overdue {
            log::warn!(
                "the handler of {batch} has run for {:.0} s, longer than max.poll.interval.ms \
                 ({:.0} s): its partition waits for it, and since this consumer stays in \
                 its group no other member takes the partition over (a stuck handler holds \
                 it until it returns or the consumer stops)",
                running.as_secs_f64(),
                self.overdue_after.as_secs_f64()
            );
        }
    }
}

/// What to say once an overdue batch is settled at last, taken while its partition's lock is
/// held and said after it is released (see [`Shared::warn_overdue`]).
#[must_use = "a settled note is said with `say` once the partition's lock is released"]
pub(super) struct SettledNote(Option<(String, Duration)>);

impl SettledNote {
    /// The note for `batch` of `slot`, just settled (nothing to say when it was not overdue).
    pub(super) fn of(slot: &Slot, batch: &InFlight) -> Self {
        Self(
            batch
                .overdue_said
                .then(|| (describe(slot, batch), batch.started.elapsed())),
        )
    }

    /// Says it at INFO; call with no lock held.
    pub(super) fn say(self) {
        if let Some((batch, running)) = self.0 {
            log::info!(
                "the overdue handler of {batch} is done after {:.0} s",
                running.as_secs_f64()
            );
        }
    }
}

/// `topic-partition offsets first-last (n records)`.
fn describe(slot: &Slot, batch: &InFlight) -> String {
    let last = batch
        .records
        .last()
        .map_or(batch.first_offset, |r| r.offset);
    format!(
        "{}-{} offsets {}-{last} ({} records)",
        slot.topic,
        slot.partition,
        batch.first_offset,
        batch.records.len()
    )
}
