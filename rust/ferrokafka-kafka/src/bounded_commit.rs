//! [`commit_within`]: a group offset commit whose answer is waited for until a deadline, not
//! for ever. Every commit of this crate goes through it: the concurrent consumer's (on schedule,
//! on revocation, final), the daemons' final ones, and the queue consumer's commit thread.
//!
//! rdkafka's `commit(.., CommitMode::Sync)` waits on librdkafka's reply queue without a
//! timeout. Against a broker that is down the answer comes at once (a transport error); against
//! one that accepts connections and never answers (a process stopped or hung in a pause, a
//! network that drops packets) it did not come in 400 s (measured: a `SIGSTOP`ped broker), and
//! a consumer's stop, a rebalance, and Ctrl-C waited with it. Here the commit is sent with a
//! queue of its own and the answer read from that queue until the deadline; an answer that
//! comes later is dropped with the queue, and whoever committed commits again next time.

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use rdkafka::TopicPartitionList;
use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};

/// Longest a single read of the answer queue blocks before `give_up` is asked again.
const SLICE: Duration = Duration::from_millis(100);

/// Longest a commit's answer is waited for while consuming (on schedule, for a revoked
/// partition, the queue consumer's commit thread): long enough for a broker that is slow, short
/// enough that a broker that stopped answering leaves the thread to its other work and the next
/// round retries.
pub(crate) const COMMIT_WAIT: Duration = Duration::from_secs(10);

/// Which offsets a commit sends.
#[derive(Clone, Copy)]
pub(crate) enum Offsets<'a> {
    /// These.
    Listed(&'a TopicPartitionList),
    /// The stored offsets of the consumer's current assignment (rdkafka's
    /// `commit_consumer_state`).
    Stored,
}

/// Commits `offsets` for `consumer`'s group and waits for the coordinator's answer until
/// `deadline`: not answered by then, `Err(ConsumerCommit(OperationTimedOut))`. `None` when
/// `give_up` (asked every 100 ms) said to stop waiting first. Either way the commit may still
/// land later.
pub(crate) fn commit_within<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    offsets: Offsets<'_>,
    deadline: Instant,
    give_up: impl Fn() -> bool,
) -> Option<KafkaResult<()>> {
    let answers = AnswerQueue::new(consumer);
    let listed = match offsets {
        Offsets::Listed(list) => list.ptr(),
        Offsets::Stored => std::ptr::null_mut(),
    };
    // SAFETY: a live client, a valid list (librdkafka copies it) or null (the assignment's
    // stored offsets), and a live queue; no callback, so the answer arrives as an event on that
    // queue.
    let sent = unsafe {
        rdsys::rd_kafka_commit_queue(
            consumer.client().native_ptr(),
            listed,
            answers.0.as_ptr(),
            None,
            std::ptr::null_mut(),
        )
    };
    if sent != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Some(Err(KafkaError::ConsumerCommit(sent.into())));
    }
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Some(Err(KafkaError::ConsumerCommit(
                RDKafkaErrorCode::OperationTimedOut,
            )));
        }
        if give_up() {
            return None;
        }
        if let Some(answer) = answers.next(left.min(SLICE)) {
            return Some(answer);
        }
    }
}

/// [`commit_within`] where nothing gives up before `deadline`.
pub(crate) fn commit_before<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    offsets: Offsets<'_>,
    deadline: Instant,
) -> KafkaResult<()> {
    commit_within(consumer, offsets, deadline, || false)
        .unwrap_or_else(|| unreachable!("nothing gives up"))
}

/// A queue of our own for one commit's answer; destroyed (with any late answer) at the drop.
struct AnswerQueue(NonNull<rdsys::rd_kafka_queue_t>);

impl AnswerQueue {
    fn new<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Self {
        // SAFETY: a live client; the queue is destroyed once, by the drop, while the client
        // still lives (the borrow of `consumer` outlives it).
        let queue = unsafe { rdsys::rd_kafka_queue_new(consumer.client().native_ptr()) };
        AnswerQueue(NonNull::new(queue).expect("librdkafka allocates a queue"))
    }

    /// The commit's outcome, if it arrived within `wait`.
    fn next(&self, wait: Duration) -> Option<KafkaResult<()>> {
        let millis = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: a live queue; a returned event is destroyed exactly once below.
        let event = NonNull::new(unsafe { rdsys::rd_kafka_queue_poll(self.0.as_ptr(), millis) })?;
        // SAFETY: a live event, read then destroyed.
        let (kind, code) = unsafe {
            let kind = rdsys::rd_kafka_event_type(event.as_ptr());
            let code = rdsys::rd_kafka_event_error(event.as_ptr());
            rdsys::rd_kafka_event_destroy(event.as_ptr());
            (kind, code)
        };
        if kind != rdsys::RD_KAFKA_EVENT_OFFSET_COMMIT {
            return None;
        }
        Some(match code {
            rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => Ok(()),
            code => Err(KafkaError::ConsumerCommit(code.into())),
        })
    }
}

impl Drop for AnswerQueue {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once; librdkafka's pending reply holds its own
        // reference, so a late answer goes to a queue that is freed after it.
        unsafe { rdsys::rd_kafka_queue_destroy(self.0.as_ptr()) }
    }
}
