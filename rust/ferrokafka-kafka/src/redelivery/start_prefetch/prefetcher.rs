//! The prefetch thread's loop: learn the markers topic's partitions, poll batches while there is
//! room ahead of the caller, and dispatch their START markers in one call each.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokafka_core::codec::marker_codec::{StartParts, append_start};
use rdkafka::Offset;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;

use super::acks::StartAcks;
use super::sources::QueueSources;
use super::{Dispatched, LOOKAHEAD_BATCHES, METADATA_ATTEMPT, POLL_SLICE, Prefetcher, START_DEPTH};
use crate::batch_produce::Payloads;
use crate::client::Client;
use crate::error::KafkaIoError;
use crate::record::ReceivedRecord;
use crate::redelivery::marker_writer::message_id;
use crate::undecodable::undecodable_error;

/// What the prefetch thread may do next.
enum Room {
    /// Poll another batch.
    Poll,
    /// Nothing more may be polled now: finish the batch whose STARTs travel.
    Full,
    Stop,
}

impl Prefetcher {
    pub(super) fn run(self, metadata: Client) {
        let known = self.learn_markers_partitions(&metadata);
        drop(metadata);
        if !known {
            return;
        }
        // Batches whose START markers travel while the next one is polled and dispatched.
        let mut travelling: VecDeque<Dispatched> = VecDeque::new();
        let mut numbers = 0_usize..;
        let mut polled_to = BTreeMap::new();
        let mut sources =
            QueueSources::new(&self.consumer, &self.queue_topic, Arc::clone(&self.wake));
        loop {
            let first_wait = match self.room(!travelling.is_empty()) {
                Room::Stop => break,
                Room::Full => {
                    self.confirm_first(&mut travelling);
                    continue;
                }
                Room::Poll if travelling.is_empty() => POLL_SLICE,
                Room::Poll => Duration::ZERO,
            };
            let number = numbers.next().unwrap_or_default();
            let fresh = self.poll_and_dispatch(&mut sources, number, first_wait);
            let idle = fresh.is_none();
            for record in fresh.iter().flat_map(|batch| &batch.records) {
                polled_to.insert(record.partition, record.offset + 1);
            }
            travelling.extend(fresh);
            // Batches whose STARTs are all reported go on to the commit now, in poll order,
            // rather than when START_DEPTH more are out: a batch reached the caller only after
            // several more polls and dispatches beyond its own round trip, and with at most
            // LOOKAHEAD_BATCHES ahead of the caller that wait bounded the rate (benches/RESULTS.md).
            while travelling
                .front()
                .is_some_and(|batch| self.acks().is_settled(batch.number))
            {
                self.confirm_first(&mut travelling);
            }
            // Nothing more came: the travelling batches need not wait for another.
            if idle || travelling.len() > START_DEPTH {
                self.confirm_first(&mut travelling);
            }
            if idle && travelling.is_empty() {
                self.pass_what_ends_partitions(&mut polled_to);
            }
        }
        // Stopping: commit the batches whose STARTs are out, so that only the tracker brings
        // their messages back (once, after their deadline), not also the next reader of the queue.
        while !travelling.is_empty() {
            self.confirm_first(&mut travelling);
        }
    }

    /// Once every batch polled is on its way to the commit thread: the partitions whose
    /// position is past their last record polled (a transaction's marker, aborted records)
    /// have that position committed behind those batches, as a Java consumer's commit does, so
    /// the group's lag reaches zero on a transactional queue topic. `polled_to` holds the
    /// next offset of each partition's last record polled, or passed.
    fn pass_what_ends_partitions(&self, polled_to: &mut BTreeMap<i32, i64>) {
        let Ok(positions) = self.consumer.position() else {
            return;
        };
        let mut passed_to = Vec::new();
        for element in positions.elements_for_topic(&self.queue_topic) {
            let (partition, Offset::Offset(position)) = (element.partition(), element.offset())
            else {
                continue;
            };
            // A partition rewound after a failure is left as it is. One never polled is passed
            // too: its position moved only past what librdkafka skipped (a partition holding
            // nothing but aborted transactions), or is where its reading starts.
            if polled_to
                .get(&partition)
                .is_none_or(|&polled| position > polled)
            {
                polled_to.insert(partition, position);
                passed_to.push((partition, position));
            }
        }
        if !passed_to.is_empty() {
            // The commit thread ends only after this thread: the send cannot fail.
            drop(self.to_commit.send(Dispatched {
                number: usize::MAX,
                records: Vec::new(),
                set_at: Instant::now(),
                passed: Vec::new(),
                handed_back: Vec::new(),
                passed_to,
            }));
        }
    }

    /// Reads the markers topic's partition count, trying again until it is known (true) or
    /// the consumer closes (false). A failure that lasted the marker timeout, or that is not a
    /// timeout (no such topic), is handed to the next `take`.
    fn learn_markers_partitions(&self, metadata: &Client) -> bool {
        let topic = self.writer.markers_topic().to_owned();
        let mut failing_since = Instant::now();
        while self.stop_seen().is_none() {
            let error = match metadata
                .list_topics(Some(&topic), METADATA_ATTEMPT.min(self.marker_timeout))
            {
                Ok(cluster) => {
                    let count = cluster
                        .topics
                        .iter()
                        .find(|t| t.name == topic)
                        .map_or(0, |t| t.partitions.len());
                    match i32::try_from(count) {
                        Ok(count) if count > 0 => {
                            self.writer.set_markers_partitions(count);
                            return true;
                        }
                        _ => KafkaIoError::InvalidArgument(format!(
                            "markers topic {topic:?} does not exist"
                        )),
                    }
                }
                Err(KafkaIoError::Timeout {
                    bootstrap,
                    broker_error,
                    ..
                }) if failing_since.elapsed() >= self.marker_timeout => KafkaIoError::Timeout {
                    operation: format!("reading the markers topic {topic:?}"),
                    timeout: self.marker_timeout,
                    bootstrap,
                    broker_error,
                },
                Err(KafkaIoError::Timeout { .. }) => continue,
                Err(other) => other,
            };
            failing_since = Instant::now();
            let mut state = self.handoff.lock();
            state.error.get_or_insert(error);
            self.handoff.changed.notify_all();
            // The error is reported, or a close comes: try again after a pause either way.
            drop(
                self.handoff
                    .changed
                    .wait_timeout_while(state, METADATA_ATTEMPT, |s| !s.stop && s.error.is_some()),
            );
        }
        false
    }

    /// When this thread first saw that the consumer is closing; `None` while it is not.
    pub(super) fn stop_seen(&self) -> Option<Instant> {
        if self.stopping_since.get().is_none() && self.handoff.lock().stop {
            self.stopping_since.set(Some(Instant::now()));
        }
        self.stopping_since.get()
    }

    /// Whether a batch may be polled: a caller wants records, fewer than
    /// [`LOOKAHEAD_BATCHES`] are ahead of it and no error waits for it. Blocks until then unless
    /// a batch travels (`Full` then).
    fn room(&self, travelling: bool) -> Room {
        let limit = (LOOKAHEAD_BATCHES - 1) * self.max_batch_size;
        let mut state = self.handoff.lock();
        loop {
            if state.stop {
                return Room::Stop;
            }
            if state.wanted && state.error.is_none() && state.ahead <= limit {
                return Room::Poll;
            }
            if travelling {
                return Room::Full;
            }
            state = self
                .handoff
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Up to `max_batch_size` records: waits up to `first_wait` for the first, then takes what
    /// has arrived.
    fn poll_batch(&self, sources: &mut QueueSources, first_wait: Duration) -> Vec<ReceivedRecord> {
        let mut records = Vec::new();
        sources.take(self.max_batch_size, first_wait, |taken| match taken {
            Ok(record) => {
                records.push(record);
                true
            }
            Err(e) => {
                let place = format!("queue topic {:?}", self.queue_topic);
                let Some(error) = undecodable_error("consume", &place, &e) else {
                    log::warn!("queue consumer: {e}");
                    return true;
                };
                // Fetched again and again, nothing behind it read: `take` raises it instead of
                // returning nothing for ever, once every record polled before it was handed out
                // (until then it comes again at the next fetch).
                let mut state = self.handoff.lock();
                if records.is_empty() && state.ahead == 0 {
                    let said = error.to_string();
                    state.error.get_or_insert(error);
                    self.handoff.changed.notify_all();
                    // Said with the lock released: a record goes to Python's `logging` (the
                    // GIL), and `stop_handing_out` takes the lock holding the GIL.
                    drop(state);
                    log::error!("queue consumer: {said}");
                }
                false
            }
        });
        records
    }

    /// Polls a batch (waiting up to `first_wait` for its first record) and dispatches its
    /// START markers without waiting for them; `None` when nothing came or the dispatch failed.
    fn poll_and_dispatch(
        &self,
        sources: &mut QueueSources,
        number: usize,
        first_wait: Duration,
    ) -> Option<Dispatched> {
        let records = self.poll_batch(sources, first_wait);
        if records.is_empty() {
            return None;
        }
        self.handoff.lock().ahead += records.len();
        let set_at = Instant::now();
        match self.dispatch(number, &records) {
            Ok(()) => Some(Dispatched {
                number,
                records,
                set_at,
                passed: Vec::new(),
                handed_back: Vec::new(),
                passed_to: Vec::new(),
            }),
            // A START too large even for this client goes the way of one the topic refused.
            Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge) => {
                self.acks().fail_now(number, e);
                Some(Dispatched {
                    number,
                    records,
                    set_at,
                    passed: Vec::new(),
                    handed_back: Vec::new(),
                    passed_to: Vec::new(),
                })
            }
            Err(e) => {
                self.acks().forget(number);
                self.fail(&records, self.start_error(e));
                None
            }
        }
    }

    /// Counts the START markers of each batch.
    pub(super) fn acks(&self) -> &StartAcks {
        self.starts.producer().context()
    }

    /// Hands the START markers of `records` to librdkafka in one call, encoded straight from
    /// the records into one buffer (librdkafka copies each).
    pub(super) fn dispatch(
        &self,
        number: usize,
        records: &[ReceivedRecord],
    ) -> Result<(), KafkaError> {
        let deadline = self.writer.next_deadline();
        let mut markers =
            Payloads::with_capacity(records.len(), records.iter().map(encoded_size).sum());
        for record in records {
            let start = StartParts {
                message_id: message_id(record.partition, record.offset),
                deadline,
                key: record.key.as_deref(),
                value: record.value.as_deref(),
                headers: &record.headers,
            };
            let partition = self.writer.markers_partition_of(record.partition);
            markers.push(partition, |out| append_start(out, &start));
        }
        // Counted before the call: a delivery report may arrive before it returns.
        self.acks().expect(number, records.len());
        self.starts
            .produce(&markers, number, self.marker_timeout)
            .map_err(|(e, _)| e)
    }

    pub(super) fn start_error(&self, error: KafkaError) -> KafkaIoError {
        KafkaIoError::from_rdkafka("write START markers", error, self.marker_timeout, None)
    }
}

/// About how many bytes the START marker of `record` takes (a buffer size hint).
fn encoded_size(record: &ReceivedRecord) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|(name, value)| name.len() + value.as_ref().map_or(0, Vec::len) + 4)
        .sum();
    32 + record.key.as_ref().map_or(0, Vec::len)
        + record.value.as_ref().map_or(0, Vec::len)
        + headers
}
