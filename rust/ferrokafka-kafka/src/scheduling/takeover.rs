//! A new dispatch producer instance, for a transaction the old one could not end.
//!
//! After an outage librdkafka can leave a commit or an abort unfinished for good: a call cut
//! short by the dispatch timeout is still "in progress" (every later `begin_transaction` is
//! refused as conflicting with it until the same call is made again), and the request behind
//! it can stay queued and never be sent again (`REQTMOUT ... 1 out-queue` every few seconds),
//! so calling again does not end it either. The scheduler then dispatched nothing more until it
//! was restarted. A new instance with the same `transactional.id` ends it instead: its
//! `init_transactions` returns once the coordinator finished whatever the old epoch left
//! (committed, if the commit had reached it, otherwise aborted). Whether a commit that went
//! unanswered was taken is then read through one record of the transaction
//! (`transaction_outcome`), so its schedules are neither dispatched twice nor dropped.

use std::time::{Duration, Instant};

use rdkafka::producer::Producer;

use super::{MAX_SLEEP, SchedulerLoop, create_dispatcher};
use crate::transaction_outcome::{Witness, committed_after_all};

/// Longest one attempt at a new instance waits for the transaction coordinator: short, as
/// the daemon's stop is not noticed meanwhile.
const RENEW_ATTEMPT: Duration = Duration::from_secs(2);
/// Pause between attempts while the broker is away.
const RENEW_PAUSE: Duration = Duration::from_secs(2);

/// A commit that did not end (not answered within the dispatch timeout, or the instance
/// failed): it may have been taken; `witness` is one of the transaction's records.
pub(super) struct Unanswered {
    pub(super) witness: Option<Witness>,
    pub(super) error: String,
}

/// A new dispatch producer instance due: tried from `at` on, `failures` attempts so far.
#[derive(Clone, Copy)]
pub(super) struct Renewal {
    at: Instant,
    failures: u32,
}

impl SchedulerLoop {
    /// Says that the dispatcher left a transaction it could not end: a new instance takes over
    /// before the next transaction begins.
    pub(super) fn renewal_needed(&self, why: &str) {
        if self.renewal_due.get().is_none() {
            log::warn!(
                "the dispatch producer could not end its transaction ({why}): a new instance \
                 takes over before the next one"
            );
            self.renewal_due.set(Some(Renewal {
                at: Instant::now(),
                failures: 0,
            }));
        }
    }

    /// Whether the dispatcher may begin a transaction: no renewal is due, or one just
    /// succeeded (an attempt is made when due, at most every `RENEW_PAUSE`).
    pub(super) fn ready_to_begin(&mut self) -> bool {
        match self.renewal_due.get() {
            None => true,
            Some(due) if Instant::now() < due.at => false,
            Some(_) => self.renew_dispatcher(),
        }
    }

    /// Replaces the dispatch producer with a new instance of the same `transactional.id`
    /// (one attempt); whether it did. While the broker is away, only the first failure is
    /// said at WARNING (one attempt every `RENEW_PAUSE` for as long as it lasts).
    fn renew_dispatcher(&mut self) -> bool {
        let failures = self.renewal_due.get().map_or(0, |due| due.failures);
        match create_dispatcher(&self.dispatch_settings, &self.stop, RENEW_ATTEMPT) {
            Ok(dispatcher) => {
                // The old instance goes once the new one fenced it.
                self.dispatcher = dispatcher;
                self.renewal_due.set(None);
                log::info!(
                    "a new dispatch producer instance took over (after {failures} failed \
                     attempt(s))"
                );
                true
            }
            Err(e) => {
                if failures == 0 {
                    log::warn!(
                        "a new dispatch producer instance could not take over yet (tried again \
                         every {RENEW_PAUSE:?}): {e}"
                    );
                } else {
                    log::debug!("a new dispatch producer instance could not take over yet: {e}");
                }
                self.renewal_due.set(Some(Renewal {
                    at: Instant::now() + RENEW_PAUSE,
                    failures: failures + 1,
                }));
                false
            }
        }
    }

    /// After a commit of `schedules` schedules that was not answered (or failed the instance):
    /// a new instance takes over, waiting for the broker as long as it takes (or until the
    /// daemon stops), then the transaction that wrote its witness is read back. Whether it was
    /// committed; if not, or not known, the commit's error (its schedules go again).
    pub(super) fn take_over_unanswered(
        &mut self,
        Unanswered { witness, error }: Unanswered,
        schedules: usize,
    ) -> Result<(), String> {
        log::warn!(
            "commit_transaction of {schedules} schedule(s) did not end ({error}): a new dispatch \
             producer instance takes over and reads whether the transaction was committed"
        );
        loop {
            if self.dispatcher.context().stopping() {
                return Err(error);
            }
            if self.renew_dispatcher() {
                break;
            }
            let until = Instant::now() + RENEW_PAUSE;
            while Instant::now() < until && !self.dispatcher.context().stopping() {
                std::thread::sleep(MAX_SLEEP);
            }
        }
        let Some(witness) = witness else {
            log::warn!(
                "no record of the transaction was acknowledged, so it cannot have been \
                 committed: its {schedules} schedules go again"
            );
            return Err(error);
        };
        let stopping = || self.dispatcher.context().stopping();
        let what = format!("its {schedules} schedules");
        match committed_after_all(&self.dispatch_settings, &witness, &what, &stopping) {
            true => Ok(()),
            false => Err(error),
        }
    }
}
