//! The daemons' synchronous producing: [`send_all`] waits for its own records through the
//! [`FlushTracker`] context; the enqueue helpers wait only for room in librdkafka's queue.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext};

use crate::error::{KafkaIoError, KafkaResult};
use crate::locks::wait_timeout;
use crate::oauth::{TokenRefresh, answer_token_refresh};
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

impl ClientContext for FlushTracker {
    answer_token_refresh!(tokens);

    // rdkafka's default logs every error at ERROR, the broker failures librdkafka logs itself too.
    fn error(&self, error: KafkaError, reason: &str) {
        crate::client::log_unless_end(error, reason);
    }
}

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

/// Hands `record` to librdkafka without waiting for its delivery, waiting only while
/// librdkafka's own queue is full.
fn enqueue<C: ProducerContext<DeliveryOpaque = ()>>(
    producer: &PolledProducer<C>,
    record: &OutgoingRecord,
) -> Result<(), KafkaError> {
    enqueue_with(producer, record, ())
}

/// [`enqueue`] with a delivery opaque, which the context's delivery report receives.
pub(crate) fn enqueue_with<C: ProducerContext>(
    producer: &PolledProducer<C>,
    record: &OutgoingRecord,
    opaque: C::DeliveryOpaque,
) -> Result<(), KafkaError> {
    send_waiting_for_room(producer, record.base_record(opaque))
}

/// Hands `base` to librdkafka, waiting only while librdkafka's own queue is full.
pub(crate) fn send_waiting_for_room<C: ProducerContext>(
    producer: &PolledProducer<C>,
    mut base: BaseRecord<'_, [u8], [u8], C::DeliveryOpaque>,
) -> Result<(), KafkaError> {
    loop {
        match producer.send(base) {
            Ok(()) => return Ok(()),
            Err((
                KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                back,
            )) => {
                base = back;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Produces `records` and waits until librdkafka confirmed or failed every one (and every
/// record still in flight from an earlier call that timed out); the first failure is returned.
/// Only one `send_all` may run per producer at a time.
pub(crate) fn send_all(
    producer: &PolledProducer<FlushTracker>,
    records: &[OutgoingRecord],
    timeout: Duration,
) -> KafkaResult<()> {
    dispatch_all(producer, records, timeout)?;
    settle_all(producer, timeout)
}

/// The first half of [`send_all`]: hands `records` to librdkafka and counts them in flight,
/// forgetting the failures of earlier rounds.
fn dispatch_all(
    producer: &PolledProducer<FlushTracker>,
    records: &[OutgoingRecord],
    timeout: Duration,
) -> KafkaResult<()> {
    let tracker = producer.context();
    tracker.state().failures.clear();
    for record in records {
        // Counted before the send: the delivery report may arrive before `enqueue` returns.
        tracker.state().in_flight += 1;
        if let Err(e) = enqueue(producer, record) {
            let mut state = tracker.state();
            state.in_flight = state.in_flight.saturating_sub(1);
            return Err(KafkaIoError::from_rdkafka("dispatch", e, timeout, None));
        }
    }
    Ok(())
}

/// The second half of [`send_all`]: waits up to `timeout` until nothing is in flight and
/// returns the first failure since the last [`dispatch_all`].
fn settle_all(producer: &PolledProducer<FlushTracker>, timeout: Duration) -> KafkaResult<()> {
    let tracker = producer.context();
    let deadline = Instant::now() + timeout;
    let mut state = tracker.state();
    while state.in_flight > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(KafkaIoError::Timeout {
                operation: "dispatch flush".to_owned(),
                timeout,
                bootstrap: None,
            });
        }
        state = wait_timeout(&tracker.settled, state, left);
    }
    match state.failures.drain(..).next() {
        None => Ok(()),
        Some(e) => Err(KafkaIoError::from_rdkafka("dispatch", e, timeout, None)),
    }
}
