//! The daemons' synchronous producing: [`send_all`] waits for its own records through the
//! [`FlushTracker`] context; the enqueue helpers wait only for room in librdkafka's queue, and
//! that only as long as their [`RoomWait`] allows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext};

use super::closing::StopBound;
use crate::config::ClientSettings;
use crate::error::{KafkaIoError, KafkaResult};
use crate::locks::wait_timeout;
use crate::oauth;
use crate::oauth::{TokenRefresh, plain_client_context};
use crate::polled_producer::PolledProducer;
use crate::record::OutgoingRecord;

/// Producer context that counts records in flight and collects delivery failures, so that
/// [`send_all`] can wait for its own records. (rdkafka's `flush`, which [`PolledProducer`]
/// delegates to, waits in 100 ms polls that never see the delivery reports, which the polling
/// thread takes.)
pub(crate) struct FlushTracker {
    state: Mutex<FlushState>,
    settled: Condvar,
    tokens: TokenRefresh,
}

#[derive(Default)]
struct FlushState {
    in_flight: usize,
    failures: Vec<KafkaError>,
}

impl FlushTracker {
    pub(crate) fn new(tokens: TokenRefresh) -> Self {
        FlushTracker {
            state: Mutex::new(FlushState::default()),
            settled: Condvar::new(),
            tokens,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FlushState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

plain_client_context!(FlushTracker, tokens);

impl ProducerContext for FlushTracker {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let mut state = self.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if let Err((err, _)) = result {
            state.failures.push(err.clone());
        }
        // Waking the waiter for every report of a large batch would only make it contend.
        if state.in_flight == 0 {
            self.settled.notify_all();
        }
    }
}

/// A producer whose writes are waited for (by [`send_all`] with a [`FlushTracker`], or by the
/// caller's own `context`): idempotent, and lingering 1 ms, since a longer linger would only add
/// to every synchronous write's wait.
pub(crate) fn synchronous_producer<C: ProducerContext>(
    settings: &ClientSettings,
    context: C,
    what: &str,
) -> KafkaResult<PolledProducer<C>> {
    let mut producer_settings = settings.for_plain_producer();
    producer_settings.set_default("enable.idempotence", "true");
    producer_settings.set_default("linger.ms", "1");
    oauth::create_client(&producer_settings.to_client_config(), context, what)
}

/// How long a record may wait for room in librdkafka's full queue: until `deadline`, and not
/// at all once `stop` is set.
///
/// With the broker away, librdkafka frees room only as its queued records time out
/// (`message.timeout.ms`: the dispatch timeout, or minutes by default), so an unbounded wait
/// held a daemon that was asked to stop for that long. A record that finds no room in time
/// fails with `QueueFull`, a transient error: it is sent again by the next round or by whoever
/// takes the partition over.
#[derive(Clone, Copy)]
pub(crate) struct RoomWait<'a> {
    deadline: Instant,
    stop: Option<&'a AtomicBool>,
}

impl<'a> RoomWait<'a> {
    /// Waits until `deadline` at the most.
    pub(crate) fn until(deadline: Instant) -> Self {
        RoomWait {
            deadline,
            stop: None,
        }
    }

    /// Waits until `deadline` at the most, and not once `stop` is set.
    pub(crate) fn until_stopped(deadline: Instant, stop: &'a AtomicBool) -> Self {
        RoomWait {
            deadline,
            stop: Some(stop),
        }
    }

    fn over(&self) -> bool {
        self.stop.is_some_and(|stop| stop.load(Ordering::Acquire))
            || Instant::now() >= self.deadline
    }
}

/// Hands `record` to librdkafka without waiting for its delivery, waiting only while
/// librdkafka's own queue is full (as long as `room` allows).
fn enqueue<C: ProducerContext<DeliveryOpaque = ()>>(
    producer: &PolledProducer<C>,
    record: &OutgoingRecord,
    room: RoomWait<'_>,
) -> Result<(), KafkaError> {
    enqueue_with(producer, record, (), room)
}

/// [`enqueue`] with a delivery opaque, which the context's delivery report receives.
pub(crate) fn enqueue_with<C: ProducerContext>(
    producer: &PolledProducer<C>,
    record: &OutgoingRecord,
    opaque: C::DeliveryOpaque,
    room: RoomWait<'_>,
) -> Result<(), KafkaError> {
    send_waiting_for_room(producer, record.base_record(opaque), room)
}

/// Hands `base` to librdkafka, waiting only while librdkafka's own queue is full, and that only
/// as long as `room` allows (then the `QueueFull` refusal is returned).
pub(crate) fn send_waiting_for_room<C: ProducerContext>(
    producer: &PolledProducer<C>,
    mut base: BaseRecord<'_, [u8], [u8], C::DeliveryOpaque>,
    room: RoomWait<'_>,
) -> Result<(), KafkaError> {
    loop {
        match producer.send(base) {
            Ok(()) => return Ok(()),
            Err((
                full @ KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                back,
            )) => {
                if room.over() {
                    return Err(full);
                }
                base = back;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Produces `records` and waits until librdkafka confirmed or failed every one (and every
/// record still in flight from an earlier call that timed out); the first failure is returned.
/// Waiting for room in librdkafka's queue takes part of `timeout`. Once `stop` is set, neither
/// wait lasts the whole `timeout` (with the broker away, it would): room is not waited for, and
/// acknowledgements `STOP_GRACE` more (see [`StopBound`]), then [`KafkaIoError::Closed`] is
/// returned. Only one `send_all` may run per producer at a time.
pub(crate) fn send_all(
    producer: &PolledProducer<FlushTracker>,
    records: &[OutgoingRecord],
    timeout: Duration,
    stop: &AtomicBool,
) -> KafkaResult<()> {
    let room = RoomWait::until_stopped(Instant::now() + timeout, stop);
    dispatch_all(producer, records, timeout, room)?;
    settle_all(producer, timeout, stop)
}

/// The first half of [`send_all`]: hands `records` to librdkafka and counts them in flight,
/// forgetting the failures of earlier rounds.
fn dispatch_all(
    producer: &PolledProducer<FlushTracker>,
    records: &[OutgoingRecord],
    timeout: Duration,
    room: RoomWait<'_>,
) -> KafkaResult<()> {
    let tracker = producer.context();
    tracker.state().failures.clear();
    for record in records {
        // Counted before the send: the delivery report may arrive before `enqueue` returns.
        tracker.state().in_flight += 1;
        if let Err(e) = enqueue(producer, record, room) {
            let mut state = tracker.state();
            state.in_flight = state.in_flight.saturating_sub(1);
            return Err(KafkaIoError::from_rdkafka("dispatch", e, timeout, None));
        }
    }
    Ok(())
}

/// The second half of [`send_all`]: waits up to `timeout` until nothing is in flight (cut by
/// the stop, see [`StopBound`]), and returns the first failure since the last [`dispatch_all`].
fn settle_all(
    producer: &PolledProducer<FlushTracker>,
    timeout: Duration,
    stop: &AtomicBool,
) -> KafkaResult<()> {
    let tracker = producer.context();
    let mut bound = StopBound::after(timeout, stop);
    let mut state = tracker.state();
    while state.in_flight > 0 {
        let now = Instant::now();
        if now >= bound.end(now) {
            return Err(if bound.stopping() {
                KafkaIoError::Closed("the daemon")
            } else {
                KafkaIoError::timed_out("dispatch flush", timeout, None)
            });
        }
        state = wait_timeout(&tracker.settled, state, bound.next_check(now));
    }
    match state.failures.drain(..).next() {
        None => Ok(()),
        Some(e) => Err(KafkaIoError::from_rdkafka("dispatch", e, timeout, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::settings_of;
    use crate::oauth;

    /// A producer with no broker and room for one record, which it has taken.
    fn full_producer() -> PolledProducer<FlushTracker> {
        let settings = settings_of(&[
            ("bootstrap.servers", "127.0.0.1:1"),
            ("queue.buffering.max.messages", "1"),
        ]);
        let producer: PolledProducer<FlushTracker> = oauth::create_client(
            &settings.to_client_config(),
            FlushTracker::new(settings.token_refresh()),
            "create test producer",
        )
        .unwrap();
        let now = RoomWait::until(Instant::now());
        enqueue(&producer, &record(), now).unwrap();
        producer
    }

    fn record() -> OutgoingRecord {
        OutgoingRecord {
            topic: "nowhere".to_owned(),
            value: Some(b"v".to_vec()),
            ..OutgoingRecord::default()
        }
    }

    fn is_queue_full(result: Result<(), KafkaError>) -> bool {
        matches!(
            result,
            Err(KafkaError::MessageProduction(
                rdkafka::types::RDKafkaErrorCode::QueueFull
            ))
        )
    }

    #[test]
    fn a_full_queue_is_waited_for_until_the_deadline_only() {
        let producer = full_producer();
        let started = Instant::now();
        let room = RoomWait::until(started + Duration::from_millis(300));
        assert!(is_queue_full(enqueue(&producer, &record(), room)));
        let waited = started.elapsed();
        assert!(
            (Duration::from_millis(300)..Duration::from_secs(3)).contains(&waited),
            "{waited:?}"
        );
    }

    #[test]
    fn a_stop_request_ends_the_wait_for_room_at_once() {
        let producer = full_producer();
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let room = RoomWait::until_stopped(started + Duration::from_secs(60), &stop);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                stop.store(true, Ordering::Release);
            });
            assert!(is_queue_full(enqueue(&producer, &record(), room)));
        });
        let waited = started.elapsed();
        assert!(
            (Duration::from_millis(200)..Duration::from_secs(3)).contains(&waited),
            "{waited:?}"
        );
    }
}
