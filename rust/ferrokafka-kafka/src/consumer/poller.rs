//! The poller thread ([`run_poller`]): it serves the main queue (rebalances, statistics,
//! errors, records fetched before a partition's queue was split), takes from each partition's
//! own queue as many records as its buffer has room for and routes them to their slots, commits
//! on schedule, and on shutdown drains, commits and closes the consumer.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferrokafka_core::LoadChange;
use rdkafka::Message;
use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::commit::CLOSE_WITHIN;
use super::events::ConsumerEvent;
use super::overdue::OVERDUE_CHECK;
use super::state::{Handle, Shared, Slot};
use crate::bounded_commit::COMMIT_WAIT;
use crate::dead_letter::DeadLetterWriter;
use crate::locks::lock;
use crate::main_queue::MainQueue;
use crate::partition_source::RawMessage;
use crate::record::{ReceivedRecord, TopicName};
use crate::undecodable::{undecodable_batch, undecodable_code, undecodable_error};

/// Longest the poller blocks in librdkafka before checking for shutdown and due commits.
const POLL_WAIT: Duration = Duration::from_millis(50);

/// Most events (rebalances, log lines, statistics, commit answers) served from the main queue
/// in one turn, then the partitions' turn: a queue that never empties (librdkafka's `debug`
/// logging) still leaves the records their share.
const EVENTS_PER_TURN: usize = 1024;

/// Most records taken from the main queue before routing them: one slot lock per run of
/// records. These may exceed a partition's bound (they were fetched before its queue was
/// split), so the chunk stays small.
const ROUTE_CHUNK: usize = 256;

/// Most records taken from one partition's own queue at once (never more than its buffer has
/// room for), then a turn for every other partition. An idle worker takes the run as one
/// batch, so the run's length sets the batch size while handlers keep up: a handler's cost per
/// call (a `to_arrow` schema, a pyarrow call) is spread over more records. 1,024 instead of
/// 256 took 0.84x the CPU per record in the `to_arrow` bench (and the same in the `values()`
/// one); 4,096 was no better.
const PARTITION_RUN: usize = 1024;

/// The poller thread: route records, commit on schedule, and on shutdown drain, commit and close.
pub(super) fn run_poller(
    shared: &Arc<Shared>,
    consumer: Arc<Handle>,
    dead_letters: Option<&DeadLetterWriter>,
) {
    let interval = shared.options.commit_interval;
    let mut next_commit = Instant::now() + interval;
    let mut next_overdue_check = Instant::now() + OVERDUE_CHECK;
    let mut chunk: Vec<ReceivedRecord> = Vec::with_capacity(ROUTE_CHUNK);
    let mut names = TopicName::default();
    // SAFETY: a live handle; the reference is dropped at the end of this function, before the
    // last reference to the consumer.
    let main_queue = unsafe { MainQueue::of(consumer.client().native_ptr()) };
    while !shared.closing.load(Ordering::Acquire) {
        // The main queue first: rebalances and statistics are served here, and records fetched
        // before their partition's queue was split come before those in that queue.
        shared.take_ready(
            &mut chunk,
            &mut names,
            |wait| consumer.poll(wait),
            || main_queue.len(),
        );
        *lock(&shared.polled_at) = Some(Instant::now());
        let mut routed = chunk.len();
        shared.route_chunk(&mut chunk);
        for slot in shared.all_slots() {
            routed += shared.poll_partition(&slot);
        }
        if routed == 0 {
            shared.wake.wait(POLL_WAIT);
        }
        if let Some(writer) = dead_letters {
            writer.resend_due(Instant::now());
        }
        if Instant::now() >= next_overdue_check {
            shared.warn_overdue(Instant::now());
            next_overdue_check = Instant::now() + OVERDUE_CHECK;
        }
        if Instant::now() >= next_commit {
            shared.commit(
                &consumer,
                &shared.all_slots(),
                Instant::now() + COMMIT_WAIT,
                || shared.closing.load(Ordering::Acquire),
            );
            next_commit = Instant::now() + interval;
        }
    }
    drop(main_queue);
    let drain = lock(&shared.shutdown).drain;
    let slots = shared.all_slots();
    shared.drain(&slots, Instant::now() + drain);
    let close_by = Instant::now() + CLOSE_WITHIN;
    shared.release(&consumer, slots, false, close_by);
    // `release` dropped the split queues; with the stored handle gone too, dropping the last
    // reference here closes the consumer (leaving the group) on this thread, not a Python one.
    // librdkafka waits for the coordinator's answers without a limit, so the stop counts as
    // done at `close_by` even if they have not come, and the close ends here in its own time.
    *lock(&shared.consumer) = None;
    lock(&shared.shutdown).close_by = Some(close_by);
    shared.stopped.notify_all();
    drop(consumer);
    lock(&shared.shutdown).finished = true;
    shared.stopped.notify_all();
}

impl Shared {
    /// Routes a chunk taken from the main queue: runs of records of the same partition go to
    /// their slot.
    fn route_chunk(&self, chunk: &mut Vec<ReceivedRecord>) {
        let mut records = chunk.drain(..).peekable();
        while let Some(first) = records.next() {
            let (topic, partition) = (first.topic.to_string(), first.partition);
            let mut run = vec![first];
            while let Some(next) =
                records.next_if(|r| r.partition == partition && *r.topic == *topic)
            {
                run.push(next);
            }
            let slot = lock(&self.slots)
                .by_partition
                .get(&(topic, partition))
                .cloned();
            match slot {
                Some(slot) => self.route(&slot, run),
                // A record fetched just before its partition was revoked: never handed out,
                // never committed, so the partition's next owner reads it again.
                None => lock(&self.totals).counters.dropped += run.len() as u64,
            }
        }
    }

    /// Takes from `slot`'s own queue as many records as its buffer has room for (at most
    /// `PARTITION_RUN`) and routes them; returns how many.
    fn poll_partition(&self, slot: &Slot) -> usize {
        let room = {
            let state = slot.lock();
            if state.closed {
                return 0;
            }
            state.buffer.room().min(PARTITION_RUN)
        };
        if room == 0 {
            return 0;
        }
        let mut run = Vec::new();
        {
            let source = lock(&slot.source);
            let Some(queue) = source.as_ref() else {
                return 0;
            };
            run.reserve(room);
            queue.drain(room, |message| {
                let result = message.result();
                if let Some(code) = result.as_ref().err().and_then(undecodable_code) {
                    self.report_undecodable(slot, message, code);
                    return;
                }
                // Errors were taken off the queue with the records: all are handled.
                self.take(&mut run, result, |message| {
                    ReceivedRecord::from_message_of(message, Arc::clone(&slot.topic))
                });
            });
        }
        let count = run.len();
        if count > 0 {
            self.route(slot, run);
        }
        count
    }

    /// Copies the records `poll` has ready (it never waits) into `out`, up to `ROUTE_CHUNK` in
    /// all, serving the events queued before and among them; an error is reported and ends the
    /// turn. `pending` is the main queue's length: a `poll` that serves an event (a log line,
    /// statistics, a rebalance) returns nothing, as one that found the queue empty does, and
    /// stopping there served one event per `POLL_WAIT` while idle, so a revocation waited
    /// behind every log line queued before it (minutes with `debug` logging, or after an
    /// outage), and the group went on without this member meanwhile.
    fn take_ready<M: Message>(
        &self,
        out: &mut Vec<ReceivedRecord>,
        names: &mut TopicName,
        poll: impl Fn(Duration) -> Option<Result<M, KafkaError>>,
        pending: impl Fn() -> usize,
    ) {
        let mut events = 0;
        while out.len() < ROUTE_CHUNK {
            match poll(Duration::ZERO) {
                None => {
                    events += 1;
                    if events >= EVENTS_PER_TURN || pending() == 0 {
                        break;
                    }
                }
                Some(result) => {
                    let result = result.as_ref().map_err(Clone::clone);
                    if !self.take(out, result, |m| {
                        ReceivedRecord::from_message_named(m, names)
                    }) {
                        break;
                    }
                }
            }
        }
    }

    /// Reports a batch of `slot`'s partition that librdkafka cannot decode, once per offset.
    fn report_undecodable(&self, slot: &Slot, message: &RawMessage, code: RDKafkaErrorCode) {
        let offset = message.offset();
        if slot.undecodable_at.swap(offset, Ordering::Relaxed) == offset {
            return;
        }
        let place = format!("{} [{}] at offset {offset}", slot.topic, slot.partition);
        let err = undecodable_batch("consume", code, &place, &message.error_detail());
        log::error!("consumer error: {err}");
        self.emit(ConsumerEvent::Error(err));
    }

    /// Copies one polled message into `out` (as `record` makes it), or reports its error;
    /// false after an error.
    fn take<M: Message>(
        &self,
        out: &mut Vec<ReceivedRecord>,
        result: Result<&M, KafkaError>,
        record: impl FnOnce(&M) -> ReceivedRecord,
    ) -> bool {
        match result {
            Ok(message) => out.push(record(message)),
            Err(KafkaError::PartitionEOF(_)) => {}
            Err(err) => {
                // From the main queue (a partition's own queue names it, see
                // `report_undecodable`): before the split, the place is not known.
                let err = undecodable_error("consume", "a subscribed partition", &err)
                    .unwrap_or_else(|| self.watch.explain("consume", err));
                log::warn!("consumer error: {err}");
                self.emit(ConsumerEvent::Error(err));
                return false;
            }
        }
        true
    }

    /// Queues one run of records of `slot`'s partition; a buffer that becomes full is no longer
    /// polled.
    fn route(&self, slot: &Slot, run: Vec<ReceivedRecord>) {
        let mut state = slot.lock();
        if state.closed {
            // Never handed out, so never committed (the consumer's position is past them).
            if let Some(first) = run.first() {
                state.buffer.progress_mut().hold(first.offset);
            }
            state.counters.dropped += run.len() as u64;
            return;
        }
        state.counters.received += run.len() as u64;
        if state.first_received.is_none() {
            state.first_received = run.first().map(|record| record.offset);
        }
        if state.buffer.push(run) == Some(LoadChange::Full) {
            state.counters.pauses += 1;
            self.say_load_change(slot, &state, true);
        }
        drop(state);
        slot.changed.notify_all();
        self.waiting.notify(slot.worker);
    }
}
