//! The stop, shared by both daemons: how a wait for the broker inside the loop ends once the
//! stop is asked for ([`StopBound`], [`resume_in_slices`]), and the last steps: the shutdown
//! budget, the final flush of a producer, and the final offset commit and group leave on a
//! closing thread of their own (librdkafka bounds neither when the coordinator is gone).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::polled_producer::PolledProducer;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::producer::{Producer, ProducerContext};

/// Most time a daemon's shutdown waits for the broker, every step together (dispatches on their
/// way, final state reports, flushes): a stop ends within seconds whatever the broker does, so
/// `ferrokafka scheduler` and `ferrokafka redelivery` exit soon after SIGINT/SIGTERM even with
/// the broker gone. What is not acknowledged by then is logged and dropped.
pub(crate) const SHUTDOWN_BUDGET: Duration = Duration::from_secs(3);

/// How much longer a wait for the broker inside the daemon's loop (acknowledgements, a
/// transaction's abort) lasts once the daemon is asked to stop: enough for a broker that
/// answers (whose records then need not be sent again), little against the daemons' 10 s stop
/// bound when it does not. Without it, such a wait lasted its whole deadline (30 s by default)
/// with the broker away, and the stop with it.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(1);

/// How often a wait for acknowledgements looks at the daemon's stop flag.
pub(crate) const STOP_CHECK: Duration = Duration::from_millis(100);

/// The end of a wait for the broker inside a daemon's loop: its own deadline, cut to
/// [`STOP_GRACE`] after the moment the wait first sees the daemon's stop flag. The one owner of
/// that rule for every such wait (acknowledgements of a round or a `send_all`, a transaction's
/// commit or abort), each of which wakes at least every [`STOP_CHECK`] to ask [`StopBound::end`].
pub(crate) struct StopBound<'a> {
    deadline: Instant,
    stop: &'a AtomicBool,
    stopping: bool,
}

impl<'a> StopBound<'a> {
    /// A wait of `timeout` from now, of a daemon whose stop flag is `stop`.
    pub(crate) fn after(timeout: Duration, stop: &'a AtomicBool) -> Self {
        StopBound {
            deadline: Instant::now() + timeout,
            stop,
            stopping: false,
        }
    }

    /// When the wait ends, as seen at `now`: the first call that finds the stop flag set moves
    /// the end to `now` + [`STOP_GRACE`] (never later than the deadline).
    pub(crate) fn end(&mut self, now: Instant) -> Instant {
        if !self.stopping && self.stop.load(Ordering::Acquire) {
            self.stopping = true;
            self.deadline = self.deadline.min(now + STOP_GRACE);
        }
        self.deadline
    }

    /// How long to sleep from `now` before looking again: until the end, at most [`STOP_CHECK`].
    pub(crate) fn next_check(&mut self, now: Instant) -> Duration {
        self.end(now).saturating_duration_since(now).min(STOP_CHECK)
    }

    /// Whether the end was cut short by the stop (seen by [`StopBound::end`]).
    pub(crate) fn stopping(&self) -> bool {
        self.stopping
    }
}

/// Runs `attempt(slice)`, a wait for the broker that may be resumed (librdkafka's
/// `commit_transaction`, which a caller is told to call again after a retriable timeout), in
/// slices of at most [`STOP_CHECK`] until it ends, fails in a way `resumable` does not accept,
/// or `bound` ends: so a stop cuts even a wait librdkafka holds in one call. The last attempt's
/// result is returned.
pub(crate) fn resume_in_slices<E>(
    mut bound: StopBound<'_>,
    mut attempt: impl FnMut(Duration) -> Result<(), E>,
    resumable: impl Fn(&E) -> bool,
) -> Result<(), E> {
    loop {
        let result = attempt(bound.next_check(Instant::now()));
        let now = Instant::now();
        match result {
            Err(e) if resumable(&e) && now < bound.end(now) => {}
            other => return other,
        }
    }
}

/// Waits until `deadline` for `producer` to deliver what it holds; logs at WARNING how many of
/// `what` the broker did not acknowledge by then (librdkafka purges them when the producer is
/// dropped).
pub(crate) fn flush_before<C: ProducerContext>(
    producer: &PolledProducer<C>,
    deadline: Instant,
    daemon: &str,
    what: &str,
) {
    if producer
        .flush(deadline.saturating_duration_since(Instant::now()))
        .is_err()
    {
        log::warn!(
            "{daemon} stopping: {} {what} not acknowledged by the broker within {}s, dropped",
            producer.in_flight_count(),
            SHUTDOWN_BUDGET.as_secs()
        );
    }
}

/// Least time [`commit_and_close`] waits even when the other shutdown steps used the whole
/// [`SHUTDOWN_BUDGET`]: with a broker that answers, a commit and a group leave take milliseconds.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How long past the deadline [`commit_and_close`] waits for the commit's outcome, which the
/// commit itself reports by the deadline (one 100 ms read of its answer queue at most later).
const COMMIT_OUTCOME_GRACE: Duration = Duration::from_millis(500);

/// What the thread of [`commit_and_close`] reports, in this order.
enum ClosingStep {
    Committed(Result<(), KafkaError>),
    Closed,
}

/// Runs `final_commit` (an offset commit, given the deadline to wait for its answer until: see
/// [`commit_within`](crate::bounded_commit::commit_within)) and then closes `consumer` (leaving
/// its group) on a thread of their own, waiting for them until `deadline` or [`CLOSE_GRACE`]
/// from now, whichever is later. Returns the commit's result, None if it did not end in time.
///
/// Why a thread: librdkafka does not bound the close. rdkafka's consumer drop polls until the
/// close completes, which with the coordinator gone or hung takes librdkafka's request timeouts,
/// so a daemon stopping in an outage would outlive its signal by that much. What has not ended
/// by the deadline is logged and left to end in the background (the commit no later than the
/// deadline, the close when librdkafka gives up on the coordinator); the group's session
/// timeout frees the partitions, and the records after the last commit are read again by the
/// next owner (both daemons rebuild their state from the topic).
pub(crate) fn commit_and_close<C: ConsumerContext + 'static>(
    consumer: BaseConsumer<C>,
    final_commit: impl FnOnce(&BaseConsumer<C>, Instant) -> Result<(), KafkaError> + Send + 'static,
    deadline: Instant,
    daemon: &str,
) -> Option<Result<(), KafkaError>> {
    let deadline = deadline.max(Instant::now() + CLOSE_GRACE);
    let (steps, step) = std::sync::mpsc::channel();
    let closer = std::thread::Builder::new()
        .name(format!("{daemon} close"))
        .spawn(move || {
            let committed = final_commit(&consumer, deadline);
            let _ = steps.send(ClosingStep::Committed(committed));
            drop(consumer);
            let _ = steps.send(ClosingStep::Closed);
        });
    if let Err(e) = closer {
        log::warn!(
            "{daemon} stopping: cannot start the closing thread ({e}); offsets not committed"
        );
        return None;
    }
    let next = |by: Instant| step.recv_timeout(by.saturating_duration_since(Instant::now()));
    // The commit answers by the deadline itself (timed out at worst): its outcome is waited
    // for a little past it, so that a wait ending at the same moment does not lose it.
    let committed = match next(deadline + COMMIT_OUTCOME_GRACE) {
        Ok(ClosingStep::Committed(result)) => result,
        _ => {
            log::warn!(
                "{daemon} stopping: the broker did not answer the final offset commit in time; \
                 left to finish in the background (the next owner of its partitions reads \
                 again from the last commit)"
            );
            return None;
        }
    };
    if !matches!(next(deadline), Ok(ClosingStep::Closed)) {
        log::warn!(
            "{daemon} stopping: the broker did not answer the group leave in time; left to \
             finish in the background (the group's session timeout frees the partitions)"
        );
    }
    Some(committed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_bound_ends_at_its_deadline_or_a_grace_after_the_stop_whichever_is_first() {
        let stop = AtomicBool::new(false);
        let now = Instant::now();
        let mut long = StopBound::after(Duration::from_secs(30), &stop);
        let mut short = StopBound::after(Duration::from_millis(200), &stop);
        assert!(long.end(now) > now + Duration::from_secs(29));
        assert!(!long.stopping());
        stop.store(true, Ordering::Release);
        let later = now + Duration::from_secs(5);
        assert_eq!(long.end(later), later + STOP_GRACE);
        assert!(long.stopping());
        // Seen once: the grace counts from the first look, not each one.
        assert_eq!(long.end(later + STOP_GRACE), later + STOP_GRACE);
        assert!(short.end(now) < now + STOP_GRACE);
        assert_eq!(long.next_check(later), STOP_CHECK);
        assert_eq!(long.next_check(later + STOP_GRACE), Duration::ZERO);
    }

    #[test]
    fn a_resumable_wait_is_resumed_until_it_ends_and_a_stop_cuts_it_within_the_grace() {
        let stop = AtomicBool::new(false);
        let mut calls = 0;
        let ended = resume_in_slices(
            StopBound::after(Duration::from_secs(30), &stop),
            |slice| {
                assert!(slice <= STOP_CHECK);
                calls += 1;
                if calls < 3 { Err("timed out") } else { Ok(()) }
            },
            |e| *e == "timed out",
        );
        assert_eq!((ended, calls), (Ok(()), 3));

        let refused = resume_in_slices(
            StopBound::after(Duration::from_secs(30), &stop),
            |_| Err("fenced"),
            |e| *e == "timed out",
        );
        assert_eq!(refused, Err("fenced"));

        // A broker that never answers: the stop ends the wait STOP_GRACE later, not at 30 s.
        let started = Instant::now();
        let cut = resume_in_slices(
            StopBound::after(Duration::from_secs(30), &stop),
            |slice| {
                if started.elapsed() > Duration::from_millis(300) {
                    stop.store(true, Ordering::Release);
                }
                std::thread::sleep(slice);
                Err("timed out")
            },
            |e| *e == "timed out",
        );
        assert_eq!(cut, Err("timed out"));
        let took = started.elapsed();
        assert!(took >= STOP_GRACE && took < STOP_GRACE * 2, "{took:?}");
    }
}
