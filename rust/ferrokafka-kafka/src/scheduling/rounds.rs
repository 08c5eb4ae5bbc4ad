//! Rounds: groups of records produced together whose delivery results are collected per record.
//!
//! The scheduler needs to know, for every record it produced, whether the broker acknowledged it
//! (a tombstone may be written only after its target was acknowledged; a refused target must not
//! fail its neighbours). A [`Rounds`] producer context gives every record a sequence number as its
//! delivery opaque and files each delivery report under the round that record belongs to.
//!
//! Several rounds can be open at once, so the daemon can send chunk n+1 while chunk n is still
//! being acknowledged: [`Rounds::start`] enqueues without waiting, [`Rounds::take_finished`] hands
//! back the results of a round once every report arrived (or its deadline passed),
//! [`Rounds::wait_for_progress`] sleeps until some round finishes and [`Rounds::wait_for`] until a
//! given one does (a transaction's rounds, all started before the first is awaited).
//! [`send_round`] is the blocking form for the rare paths that settle one record at a time.
//!
//! A record not reported by its round's deadline counts as timed out (a transient failure);
//! reports arriving after their round was taken are ignored. A record waits for room in
//! librdkafka's full queue until its round's deadline, and not once the daemon is asked to stop
//! (see [`RoomWait`]): then it fails with `QueueFull`, also transient. Once the daemon is asked
//! to stop, a wait for acknowledgements lasts `STOP_GRACE` at the most (see [`StopBound`]):
//! with the broker away it would last the round's whole deadline, and the stop with it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use crate::connection_failure::{ConnectionWatch, watch_connection};
use crate::daemon::{RoomWait, StopBound};
use crate::locks::wait_timeout;
use crate::oauth::{TokenRefresh, answer_token_refresh};
use crate::polled_producer::PolledProducer;
use crate::transaction_outcome::Witness;

/// A record a round can produce.
pub(super) trait RoundRecord {
    /// Hands the record to `producer` with `sequence` as its delivery opaque (waiting only for
    /// room in librdkafka's queue, as long as `room` allows).
    fn enqueue(
        &self,
        producer: &PolledProducer<Rounds>,
        sequence: usize,
        room: RoomWait<'_>,
    ) -> Result<(), KafkaError>;
}

/// Identifies an open round: the sequence number of its first record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct RoundId(usize);

/// Producer context of a producer whose records are sent in rounds; see the module docs.
pub(super) struct Rounds {
    state: Mutex<RoundsState>,
    progress: Condvar,
    /// The producer's refused connections, so its `init_transactions` ends with their cause.
    watch: ConnectionWatch,
    tokens: TokenRefresh,
    /// The daemon's stop flag, which ends a record's wait for room.
    stop: Arc<AtomicBool>,
}

#[derive(Default)]
struct RoundsState {
    /// Sequence number of the next record produced.
    next: usize,
    /// Open rounds by their first sequence number.
    open: BTreeMap<usize, Round>,
    /// Where the first record acknowledged since the last [`Rounds::take_witness`] was
    /// written: through it the outcome of a transaction whose commit went unanswered is read.
    witness: Option<Witness>,
}

struct Round {
    results: Vec<Option<Result<(), KafkaError>>>,
    unreported: usize,
    /// Whether a record of the round failed.
    failed: bool,
    deadline: Instant,
}

impl Round {
    fn is_done(&self, now: Instant) -> bool {
        self.unreported == 0 || now >= self.deadline
    }

    /// Each record's result, a record not reported counting as timed out.
    fn into_results(self) -> Vec<Result<(), KafkaError>> {
        self.results
            .into_iter()
            .map(|result| {
                result.unwrap_or(Err(KafkaError::MessageProduction(
                    RDKafkaErrorCode::MessageTimedOut,
                )))
            })
            .collect()
    }
}

impl Rounds {
    /// The context of a producer whose refused connections `watch` keeps, run by a daemon
    /// whose stop flag is `stop`.
    pub(super) fn new(watch: ConnectionWatch, tokens: TokenRefresh, stop: Arc<AtomicBool>) -> Self {
        Rounds {
            state: Mutex::default(),
            progress: Condvar::new(),
            watch,
            tokens,
            stop,
        }
    }

    /// The producer's refused connections.
    pub(super) fn watch(&self) -> &ConnectionWatch {
        &self.watch
    }

    fn state(&self) -> MutexGuard<'_, RoundsState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Files a record's result under its round; `written` is the record as acknowledged.
    fn record(
        &self,
        sequence: usize,
        result: Result<(), KafkaError>,
        written: Option<&BorrowedMessage<'_>>,
    ) {
        let mut state = self.state();
        if let Some(message) = written
            && state.witness.is_none()
        {
            state.witness = Some(Witness::of(message));
        }
        let Some((&first, round)) = state.open.range_mut(..=sequence).next_back() else {
            return;
        };
        let Some(slot) = round.results.get_mut(sequence - first) else {
            return;
        };
        if slot.is_none() {
            // A round's first failure is news too: it dooms its transaction.
            let first_failure = result.is_err() && !round.failed;
            round.failed |= result.is_err();
            *slot = Some(result);
            round.unreported -= 1;
            if round.unreported == 0 || first_failure {
                self.progress.notify_all();
            }
        }
    }

    /// Produces `records` as one round that ends at the latest after `timeout`; does not wait
    /// for acknowledgements (only for room in librdkafka's queue).
    pub(super) fn start<R: RoundRecord>(
        producer: &PolledProducer<Rounds>,
        records: &[R],
        timeout: Duration,
    ) -> RoundId {
        let rounds = producer.context();
        let deadline = Instant::now() + timeout;
        let first = {
            let mut state = rounds.state();
            let first = state.next;
            state.next += records.len().max(1);
            state.open.insert(
                first,
                Round {
                    results: vec![None; records.len()],
                    unreported: records.len(),
                    failed: false,
                    deadline,
                },
            );
            first
        };
        let room = RoomWait::until_stopped(deadline, &rounds.stop);
        for (n, record) in records.iter().enumerate() {
            if let Err(e) = record.enqueue(producer, first + n, room) {
                rounds.record(first + n, Err(e), None);
            }
        }
        RoundId(first)
    }

    /// The per-record results of round `id` once it is done (every record reported, or its
    /// deadline passed: the unreported ones then count as timed out); None while in progress.
    pub(super) fn take_finished(&self, id: RoundId) -> Option<Vec<Result<(), KafkaError>>> {
        let mut state = self.state();
        if !state.open.get(&id.0)?.is_done(Instant::now()) {
            return None;
        }
        state.open.remove(&id.0).map(Round::into_results)
    }

    /// Waits (up to `timeout`, at least the round's own deadline when started with the same
    /// timeout) until round `id` is done, and takes its per-record results: a record not
    /// confirmed by then counts as timed out.
    pub(super) fn wait_for(&self, id: RoundId, timeout: Duration) -> Vec<Result<(), KafkaError>> {
        self.wait_while(timeout, |open, now| {
            open.get(&id.0).is_some_and(|round| !round.is_done(now))
        });
        self.state()
            .open
            .remove(&id.0)
            .map_or_else(Vec::new, Round::into_results)
    }

    /// Waits up to `timeout` until every round of `ids` is done or a record of one of them
    /// failed; whether every record of every one was acknowledged. The rounds stay open.
    pub(super) fn all_acknowledged(&self, ids: &[RoundId], timeout: Duration) -> bool {
        self.wait_while(timeout, |open, now| {
            let rounds = || ids.iter().filter_map(|id| open.get(&id.0));
            !rounds().any(|round| round.failed) && rounds().any(|round| !round.is_done(now))
        });
        let state = self.state();
        ids.iter().all(|id| {
            state
                .open
                .get(&id.0)
                .is_some_and(|round| round.unreported == 0 && !round.failed)
        })
    }

    /// Waits up to `timeout` until some open round is done (finished or past its deadline);
    /// returns at once when one already is.
    pub(super) fn wait_for_progress(&self, timeout: Duration) {
        self.wait_while(timeout, |open, now| {
            !open.values().any(|round| round.is_done(now))
        });
    }

    /// Where the first record acknowledged since the last call was written, if any (a
    /// transaction's, when called as it begins and after it ended).
    pub(super) fn take_witness(&self) -> Option<Witness> {
        self.state().witness.take()
    }

    /// Whether the daemon was asked to stop.
    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The end of a wait for the broker of up to `timeout` (see [`StopBound`]).
    pub(super) fn stop_bound(&self, timeout: Duration) -> StopBound<'_> {
        StopBound::after(timeout, &self.stop)
    }

    /// Waits up to `timeout` (cut by the daemon's stop, see [`StopBound`]) while
    /// `busy` holds for the open rounds, waking at each delivery report that finishes a round,
    /// at the earliest round deadline and every `STOP_CHECK`.
    fn wait_while(
        &self,
        timeout: Duration,
        busy: impl Fn(&BTreeMap<usize, Round>, Instant) -> bool,
    ) {
        let mut bound = self.stop_bound(timeout);
        let mut state = self.state();
        loop {
            let now = Instant::now();
            if !busy(&state.open, now) {
                return;
            }
            let until = bound.end(now);
            if now >= until {
                return;
            }
            // A round passing its deadline is progress too, so wake for the earliest one.
            let earliest = state
                .open
                .values()
                .filter(|round| !round.is_done(now))
                .map(|round| round.deadline)
                .min();
            let wake = bound
                .next_check(now)
                .min(earliest.map_or(Duration::MAX, |deadline| {
                    deadline.saturating_duration_since(now)
                }));
            state = wait_timeout(&self.progress, state, wake.max(Duration::from_millis(1)));
        }
    }
}

impl ClientContext for Rounds {
    answer_token_refresh!(tokens);
    watch_connection!(watch);
}

impl ProducerContext for Rounds {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sequence: usize) {
        if result.is_ok() {
            self.watch.clear();
        }
        self.record(
            sequence,
            result.as_ref().map(|_| ()).map_err(|(e, _)| e.clone()),
            result.as_ref().ok(),
        );
    }
}

/// Produces `records` as one round and waits (up to `timeout`) for each one's delivery result;
/// a record not confirmed in time counts as timed out.
pub(super) fn send_round<R: RoundRecord>(
    producer: &PolledProducer<Rounds>,
    records: &[R],
    timeout: Duration,
) -> Vec<Result<(), KafkaError>> {
    let id = Rounds::start(producer, records, timeout);
    producer.context().wait_for(id, timeout)
}
