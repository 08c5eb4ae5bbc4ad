//! The stop's last steps, shared by both daemons: the shutdown budget, the final flush of a
//! producer, and the final offset commit and group leave on a closing thread of their own
//! (librdkafka bounds neither when the coordinator is gone).

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

/// What the thread of [`commit_and_close`] reports, in this order.
enum ClosingStep {
    Committed(Result<(), KafkaError>),
    Closed,
}

/// Runs `final_commit` (a synchronous offset commit) and then closes `consumer` (leaving its
/// group) on a thread of their own, waiting for them until `deadline` or [`CLOSE_GRACE`] from
/// now, whichever is later. Returns the commit's result, None if it did not end in time.
///
/// Why a thread: librdkafka bounds neither step. With the coordinator gone, a synchronous commit
/// returns only once the group session times out, and rdkafka's consumer drop polls until the
/// close completes, so a daemon stopping in an outage would outlive its signal by the session
/// timeout and more. What has not ended by the deadline is logged and left to end in the
/// background; the group's session timeout frees the partitions, and the records after the last
/// commit are read again by the next owner (both daemons rebuild their state from the topic).
pub(crate) fn commit_and_close<C: ConsumerContext + 'static>(
    consumer: BaseConsumer<C>,
    final_commit: impl FnOnce(&BaseConsumer<C>) -> Result<(), KafkaError> + Send + 'static,
    deadline: Instant,
    daemon: &str,
) -> Option<Result<(), KafkaError>> {
    let deadline = deadline.max(Instant::now() + CLOSE_GRACE);
    let (steps, step) = std::sync::mpsc::channel();
    let closer = std::thread::Builder::new()
        .name(format!("{daemon} close"))
        .spawn(move || {
            let _ = steps.send(ClosingStep::Committed(final_commit(&consumer)));
            drop(consumer);
            let _ = steps.send(ClosingStep::Closed);
        });
    if let Err(e) = closer {
        log::warn!(
            "{daemon} stopping: cannot start the closing thread ({e}); offsets not committed"
        );
        return None;
    }
    let next = || step.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    let committed = match next() {
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
    if !matches!(next(), Ok(ClosingStep::Closed)) {
        log::warn!(
            "{daemon} stopping: the broker did not answer the group leave in time; left to \
             finish in the background (the group's session timeout frees the partitions)"
        );
    }
    Some(committed)
}
