//! Moving records to librdkafka: a run of one topic's records without headers or timestamps in
//! one `rd_kafka_produce_batch` call (keyless ones one partition per run), others one by one;
//! what librdkafka's full queue kept out goes back in front of the retries, in order. Done by
//! the worker, or by a `produce_many` caller that made a delivery due
//! ([`AsyncProducer::hand_off_due`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::util::IntoOpaque;

use super::delivery::DeliveryTracker;
use super::in_flight::InFlight;
use super::options::DeliveryMode;
use super::pending::Pending;
use super::{AsyncProducer, HANDOFF_CHUNK};
use crate::batch_produce::message;
use crate::error::KafkaIoError;
use crate::partitioner::{FAILED_FETCH_PAUSE, METADATA_TIMEOUT};
use crate::polled_producer::PolledProducer;

/// What became of one record the worker offered to librdkafka.
pub(super) enum Handoff {
    /// librdkafka took it; its delivery report settles it.
    Sent,
    /// librdkafka refused it for good; it was handed back with the error.
    Refused,
    /// A shutdown ended the wait for room in librdkafka's queue; the record is given back.
    Unsent(Box<Pending>),
}

/// Whether librdkafka's partitioner would choose a record's partition without a key to hash.
fn keyless(pending: &Pending) -> bool {
    pending.record.partition.is_none() && pending.record.key.is_none()
}

/// Whether a record can go in a batch call: librdkafka's batch carries no headers or timestamps.
fn batchable(pending: &Pending) -> bool {
    pending.record.headers.is_empty() && pending.record.timestamp_ms.is_none()
}

impl AsyncProducer {
    /// Hands what is due to librdkafka from the calling thread, instead of waking the worker
    /// for it: after `produce_many` made a delivery due, the records go on while they are still
    /// in this core's cache, and the buffer does not grow while the worker is scheduled. Leaves
    /// the work to the worker when it is handing off itself, in transactional mode (the worker
    /// owns the transactions), while records wait to be sent again (they go first), and when
    /// librdkafka's queue is full (what librdkafka could not take goes back before everything
    /// else and the worker waits for room; a caller never blocks here). Call it without the
    /// GIL: a due buffer may hold many chunks.
    pub fn hand_off_due(&self) {
        let shared = &self.shared;
        if shared.mode == DeliveryMode::Transactional {
            return;
        }
        let Ok(handoff) = shared.handoff.try_lock() else {
            return;
        };
        loop {
            let mut state = shared.lock();
            // Records waiting to be sent again are older than the buffer's and go first, which
            // only the worker does (it takes them before the buffer).
            if self.stopping()
                || state.fatal.is_some()
                || !state.retries.is_empty()
                || !state.suspects.is_empty()
            {
                break;
            }
            let batch = shared.take_due(&mut state, HANDOFF_CHUNK);
            if batch.is_empty() {
                break;
            }
            shared.in_flight.fetch_add(batch.len(), Ordering::AcqRel);
            drop(state);
            shared.progress.notify_all();
            let count = batch.len();
            let all_sent = self.hand_off(batch, false);
            self.delivered_chunk(count);
            if !all_sent {
                break;
            }
        }
        drop(handoff);
        // Whatever became due meanwhile (or was put back) is the worker's.
        let state = shared.lock();
        let due = state.deliver_requested
            || !state.retries.is_empty()
            || !state.suspects.is_empty()
            || state.buffer.should_deliver(shared.now_ms());
        drop(state);
        if due {
            shared.work.notify_one();
        }
    }

    /// Sends a batch to librdkafka, waiting for room in its queue when `wait_for_room`; records
    /// it could not hand over (full queue without waiting, or a shutdown) are put back in front
    /// of the retries, in order, for the worker or `finish_shutdown`. False when some were.
    /// Consecutive records of one topic without headers or timestamps go in one call.
    pub(super) fn hand_off(&self, batch: Vec<Box<Pending>>, wait_for_room: bool) -> bool {
        let producer = self.producer();
        let mut records = batch
            .into_iter()
            .filter_map(|p| self.with_partition(&producer, p))
            .peekable();
        while let Some(pending) = records.next() {
            let unsent = if batchable(&pending) {
                let mut run = vec![pending];
                while let Some(next) = records
                    .next_if(|next| batchable(next) && next.record.topic == run[0].record.topic)
                {
                    run.push(next);
                }
                self.send_run(&producer, run, wait_for_room)
            } else {
                let in_flight = InFlight::of(&pending);
                match self.send(&producer, pending, in_flight, wait_for_room) {
                    Handoff::Unsent(unsent) => vec![unsent],
                    Handoff::Sent | Handoff::Refused => Vec::new(),
                }
            };
            if !unsent.is_empty() {
                self.put_back(unsent.into_iter().chain(records).collect());
                return false;
            }
        }
        true
    }

    /// Hands a run of one topic's records to librdkafka in one call (again after 1 ms for what
    /// a full queue refused, while `wait_for_room` and no shutdown); records refused for another
    /// reason are handed back with the error. Returns, in order, those a full queue kept out.
    fn send_run(
        &self,
        producer: &PolledProducer<DeliveryTracker>,
        mut run: Vec<Box<Pending>>,
        wait_for_room: bool,
    ) -> Vec<Box<Pending>> {
        let topic = match self.topics.get(producer, &run[0].record.topic) {
            Ok(topic) => topic,
            Err(err) => {
                let error = KafkaIoError::from_rdkafka("produce", err, Duration::ZERO, None);
                self.shared
                    .fail(run.into_iter().map(|p| (p, error.clone())));
                return Vec::new();
            }
        };
        // Keyless records without a partition go to one partition per run, as librdkafka's
        // sticky partitioner sends them, without its lookup and lock for every record; chosen
        // once, so what a full queue refused goes on to the same partition.
        let run_partition = if self.keyless_runs && run.iter().any(|p| keyless(p)) {
            self.partitions
                .partition_for_run(producer.client(), &run[0].record.topic)
        } else {
            None
        };
        loop {
            let mut messages: Vec<_> = run
                .iter()
                .map(|pending| {
                    let partition = if keyless(pending) {
                        run_partition
                    } else {
                        pending.record.partition
                    };
                    let record = &pending.record;
                    let (key, value) = (record.key.as_deref(), record.value.as_deref());
                    message(partition, key, value, InFlight::of(pending).into_ptr())
                })
                .collect();
            // SAFETY: the keys and values live in `run` through the call; the opaques are the
            // delivery tracker's `InFlight` words.
            unsafe { topic.offer(&mut messages) };
            // What librdkafka took is in its copy now (and rebuilt from it if it must be sent
            // again): those records are dropped here.
            let mut full = Vec::new();
            let mut refused = Vec::new();
            for (message, pending) in messages.iter().zip(run) {
                if message.err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
                    continue;
                }
                // SAFETY: made by `into_ptr` above; librdkafka refused it, so it is ours.
                unsafe { InFlight::from_ptr(message._private) }.reclaim();
                if message.err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__QUEUE_FULL {
                    full.push(pending);
                } else {
                    let err = KafkaError::MessageProduction(message.err.into());
                    let error =
                        KafkaIoError::over_client_limit("produce", &err).unwrap_or_else(|| {
                            KafkaIoError::from_rdkafka("produce", err, Duration::ZERO, None)
                        });
                    refused.push((pending, error));
                }
            }
            if !refused.is_empty() {
                self.shared.fail(refused);
            }
            if full.is_empty() || !wait_for_room || self.stopping() {
                return full;
            }
            run = full;
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Returns in-flight records to the front of the retries, in order, settling them.
    pub(super) fn put_back(&self, records: Vec<Box<Pending>>) {
        let count = records.len();
        let now = Instant::now();
        let mut state = self.shared.lock();
        for pending in records.into_iter().rev() {
            state.retries.push_front((now, pending));
        }
        self.shared.put_back_from_flight(&state, count);
    }

    /// Chooses the partition of a record that has a `partition_key` (by default as WaterDrop).
    /// `None` when it cannot be chosen: librdkafka would place the record anywhere, so it is
    /// sent again once the topic's partition count may be known (or handed back, when the
    /// metadata request was refused for good or its retries are used up).
    pub(super) fn with_partition(
        &self,
        producer: &PolledProducer<DeliveryTracker>,
        mut pending: Box<Pending>,
    ) -> Option<Box<Pending>> {
        if pending.record.partition.is_none()
            && let Some(key) = pending.partition_key.as_deref()
        {
            match self.partitions.partition_for(
                producer.client(),
                &pending.record.topic,
                key,
                METADATA_TIMEOUT,
            ) {
                Ok(partition) => pending.record.partition = partition,
                Err(error) => {
                    let transient = error.is_retriable();
                    // Not sooner: until then the partitioner answers from the failed fetch.
                    let backoff = self.shared.options.retry_backoff.max(FAILED_FETCH_PAUSE);
                    self.shared
                        .retry_or_fail(pending, error, transient, backoff);
                    return None;
                }
            }
        }
        Some(pending)
    }

    /// Hands one record to librdkafka, waiting while librdkafka's own queue is full; librdkafka
    /// copies it, and the box is dropped here. A refused record is handed back with the error.
    /// Gives the record back when a shutdown ends the wait for room.
    pub(super) fn send(
        &self,
        producer: &PolledProducer<DeliveryTracker>,
        pending: Box<Pending>,
        in_flight: InFlight,
        wait_for_room: bool,
    ) -> Handoff {
        let mut base = pending.record.base_record(in_flight);
        loop {
            match producer.send(base) {
                // librdkafka copied the record; the box is dropped here.
                Ok(()) => return Handoff::Sent,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    if !wait_for_room || self.stopping() {
                        back.delivery_opaque.reclaim();
                        return Handoff::Unsent(pending);
                    }
                    base = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((err, back)) => {
                    back.delivery_opaque.reclaim();
                    let error = KafkaIoError::from_rdkafka("produce", err, Duration::ZERO, None);
                    self.shared.fail([(pending, error)]);
                    return Handoff::Refused;
                }
            }
        }
    }
}
