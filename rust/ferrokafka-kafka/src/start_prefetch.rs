//! [`StartPrefetch`]: the thread of a queue consumer that reads the next batch of the queue
//! topic, writes its START markers and commits its offsets while the caller handles the batch
//! before (the markers path's prefetch).
//!
//! Invariants:
//! - A record reaches [`StartPrefetch::take`] only after its START marker was acknowledged by
//!   the markers topic and its queue offset committed (or the commit failed after the START was
//!   durable: a restart then reads it again and its new START supersedes the old one).
//! - At most two batches are prepared ahead of the caller (one ready, the next one's START
//!   markers travelling while the ready one's offsets are committed), and only once the caller
//!   asked for records: prefetched messages are in flight (their deadline runs; automatic
//!   keepalive holds them) before anyone handles them.
//! - A batch whose START markers failed is not handed out: the consumer is rewound to its
//!   first offsets and the error is returned by the next `take`.
//!
//! Threading: the prefetch thread owns the queue consumer and the START producer; callers meet
//! it only through the [`Handoff`] mutex and condition variable. Dropping the [`StartPrefetch`]
//! stops and joins the thread (within one poll slice, or one START write).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrokafka_core::markers::{Marker, MessagePayload};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::ThreadedProducer;
use rdkafka::{Offset, TopicPartitionList};

use crate::daemon::{FlushTracker, dispatch_all, settle_all};
use crate::error::{KafkaIoError, KafkaResult};
use crate::marker_writer::{MarkerWriter, message_id};
use crate::record::{OutgoingRecord, ReceivedRecord};

/// Longest one poll of the queue consumer blocks, so a stop is noticed quickly.
const POLL_SLICE: Duration = Duration::from_millis(100);

/// What the prefetch thread and the callers share.
#[derive(Default)]
struct HandoffState {
    /// Records whose START is acknowledged and offsets committed, in poll order.
    ready: VecDeque<ReceivedRecord>,
    /// The failure of the last batch, returned once by `take`.
    error: Option<KafkaIoError>,
    /// A caller asked for records: prefetching may begin.
    wanted: bool,
    stop: bool,
}

#[derive(Default)]
struct Handoff {
    state: Mutex<HandoffState>,
    changed: Condvar,
}

impl Handoff {
    fn lock(&self) -> MutexGuard<'_, HandoffState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The queue topic, where its markers go, and how the prefetch thread writes them.
pub(crate) struct PrefetchSetup {
    pub(crate) consumer: BaseConsumer,
    pub(crate) starts: ThreadedProducer<FlushTracker>,
    pub(crate) writer: Arc<MarkerWriter>,
    pub(crate) queue_topic: String,
    pub(crate) max_batch_size: usize,
    pub(crate) marker_timeout: Duration,
}

/// The running prefetch thread; see the module docs.
pub(crate) struct StartPrefetch {
    handoff: Arc<Handoff>,
    received: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl StartPrefetch {
    pub(crate) fn spawn(setup: PrefetchSetup) -> KafkaResult<Self> {
        let handoff = Arc::new(Handoff::default());
        let received = Arc::new(AtomicU64::new(0));
        let worker = Prefetcher {
            setup,
            handoff: Arc::clone(&handoff),
            received: Arc::clone(&received),
        };
        let thread = std::thread::Builder::new()
            .name("ferrokafka-queue-prefetch".to_owned())
            .spawn(move || worker.run())
            .map_err(|e| KafkaIoError::InvalidArgument(format!("cannot start prefetch: {e}")))?;
        Ok(StartPrefetch {
            handoff,
            received,
            thread: Some(thread),
        })
    }

    /// Waits up to `wait` for prepared records and takes at most `max` of them (none when
    /// nothing came); the error of a failed batch is returned once.
    pub(crate) fn take(&self, max: usize, wait: Duration) -> KafkaResult<Vec<ReceivedRecord>> {
        let deadline = Instant::now() + wait;
        let mut state = self.handoff.lock();
        if !state.wanted {
            state.wanted = true;
            self.handoff.changed.notify_all();
        }
        loop {
            if let Some(e) = state.error.take() {
                return Err(e);
            }
            if !state.ready.is_empty() {
                let count = max.max(1).min(state.ready.len());
                let records: Vec<ReceivedRecord> = state.ready.drain(..count).collect();
                // The prefetch thread prepares the next batch once this one is taken.
                self.handoff.changed.notify_all();
                return Ok(records);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Vec::new());
            }
            state = self
                .handoff
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Messages handed to the prefetch buffer so far (START written, offsets committed).
    pub(crate) fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }
}

impl Drop for StartPrefetch {
    fn drop(&mut self) {
        self.handoff.lock().stop = true;
        self.handoff.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A polled batch whose START markers are dispatched; `set_at` is when their deadline was set.
struct Dispatched {
    records: Vec<ReceivedRecord>,
    set_at: Instant,
}

struct Prefetcher {
    setup: PrefetchSetup,
    handoff: Arc<Handoff>,
    received: Arc<AtomicU64>,
}

impl Prefetcher {
    fn run(self) {
        // A batch whose START markers are dispatched and not yet confirmed.
        let mut next: Option<Dispatched> = None;
        while self.wait_for_room() {
            let Some(batch) = next.take().or_else(|| self.poll_and_dispatch(POLL_SLICE)) else {
                continue;
            };
            if let Err(e) = settle_all(&self.setup.starts, self.setup.marker_timeout) {
                self.fail(&batch.records, e);
                continue;
            }
            // Pipelining: the next batch's START markers travel while this batch's offsets
            // are committed.
            next = self.poll_and_dispatch(Duration::ZERO);
            self.commit(&batch.records);
            self.setup.writer.begin(
                batch
                    .records
                    .iter()
                    .map(|r| message_id(r.partition, r.offset)),
                batch.set_at,
            );
            self.received
                .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
            self.handoff.lock().ready.extend(batch.records);
            self.handoff.changed.notify_all();
        }
        // Stopping: commit a batch whose STARTs are out, so that only the tracker brings its
        // messages back (once, after their deadline), not also the next reader of the queue.
        if let Some(batch) = next
            && settle_all(&self.setup.starts, self.setup.marker_timeout).is_ok()
        {
            self.commit(&batch.records);
        }
    }

    /// Rewinds the consumer to a failed batch and hands the error to the next `take`.
    fn fail(&self, records: &[ReceivedRecord], error: KafkaIoError) {
        self.rewind(records);
        self.handoff.lock().error = Some(error);
        self.handoff.changed.notify_all();
    }

    /// Blocks until a caller wants records and none are waiting; false once stopping.
    fn wait_for_room(&self) -> bool {
        let mut state = self.handoff.lock();
        while !state.stop && (!state.wanted || !state.ready.is_empty() || state.error.is_some()) {
            state = self
                .handoff
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        !state.stop
    }

    /// Up to `max_batch_size` records: waits up to `first_wait` for the first, then takes what
    /// has arrived.
    fn poll_batch(&self, first_wait: Duration) -> Vec<ReceivedRecord> {
        let consumer = &self.setup.consumer;
        let mut records = Vec::new();
        while records.len() < self.setup.max_batch_size.max(1) {
            let wait = if records.is_empty() {
                first_wait
            } else {
                Duration::ZERO
            };
            match consumer.poll(wait) {
                None => break,
                Some(Ok(message)) => records.push(ReceivedRecord::from_message(&message)),
                Some(Err(e)) => log::warn!("queue consumer: {e}"),
            }
        }
        records
    }

    /// Polls a batch (waiting up to `first_wait` for its first record) and dispatches its
    /// START markers without waiting for them; `None` when nothing came or the dispatch failed.
    fn poll_and_dispatch(&self, first_wait: Duration) -> Option<Dispatched> {
        let records = self.poll_batch(first_wait);
        if records.is_empty() {
            return None;
        }
        let writer = &self.setup.writer;
        let set_at = Instant::now();
        let deadline = writer.next_deadline();
        let markers: Vec<OutgoingRecord> = records
            .iter()
            .map(|record| writer.record(record.partition, &start_marker(record, deadline)))
            .collect();
        match dispatch_all(&self.setup.starts, &markers, self.setup.marker_timeout) {
            Ok(()) => Some(Dispatched { records, set_at }),
            Err(e) => {
                self.fail(&records, e);
                None
            }
        }
    }

    /// Commits the queue offsets after a batch whose START markers are confirmed.
    fn commit(&self, records: &[ReceivedRecord]) {
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for record in records {
            let slot = next.entry(record.partition).or_insert(0);
            *slot = (*slot).max(record.offset + 1);
        }
        let mut commit = TopicPartitionList::new();
        for (partition, offset) in next {
            let _ = commit.add_partition_offset(
                &self.setup.queue_topic,
                partition,
                Offset::Offset(offset),
            );
        }
        // The START markers are durable: should the commit fail, a restart reads these messages
        // again and their new START supersedes the old one (at-least-once, nothing lost).
        if let Err(e) = self.setup.consumer.commit(&commit, CommitMode::Sync) {
            log::warn!("queue offsets not committed: {e}");
        }
    }

    /// Seeks back to the first record of each partition of a batch whose markers failed.
    fn rewind(&self, records: &[ReceivedRecord]) {
        let mut first: BTreeMap<i32, i64> = BTreeMap::new();
        for record in records {
            let slot = first.entry(record.partition).or_insert(record.offset);
            *slot = (*slot).min(record.offset);
        }
        for (partition, offset) in first {
            if let Err(e) = self.setup.consumer.seek(
                &self.setup.queue_topic,
                partition,
                Offset::Offset(offset),
                self.setup.marker_timeout,
            ) {
                log::error!(
                    "cannot rewind {}-{partition} to {offset}: {e}",
                    self.setup.queue_topic
                );
            }
        }
    }
}

fn start_marker(record: &ReceivedRecord, deadline: u64) -> Marker {
    Marker::Start {
        message_id: message_id(record.partition, record.offset),
        deadline,
        payload: MessagePayload {
            key: record.key.clone(),
            value: record.value.clone(),
            headers: record.headers.clone(),
        },
    }
}
