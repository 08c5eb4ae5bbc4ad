//! [`PolledProducer`]: every producer of the engines, a librdkafka producer with a polling thread
//! of its own that sleeps until librdkafka has something for it and stops at once.
//!
//! Threads. The engines' threads (and the bindings', GIL released) call [`PolledProducer::send`],
//! `flush`, `purge` and the transaction calls; one thread per producer, the polling thread, takes
//! the events off the client's main queue and runs the context's callbacks on them: delivery
//! reports, errors, OAUTHBEARER token refreshes, statistics and logs. Nothing else polls that
//! queue except rdkafka's own `flush`, which polls while it waits.
//!
//! Why not rdkafka's `ThreadedProducer`, which is the same but for its loop: its thread calls
//! `BaseProducer::poll(100 ms)`, which keeps polling until its deadline even after events, and
//! its drop sets a stop flag and joins that thread. Every close of a producer (a script's
//! AsyncProducer at exit, every CLI command's Client, every Scheduler stop) therefore waited up
//! to 100 ms for nothing. Here the thread sleeps on a pipe that it owns with librdkafka: the main
//! queue's IO event (`rd_kafka_queue_io_event_enable`) makes librdkafka write a byte to it when
//! the queue goes from empty to non-empty (once until the queue is next polled), and the drop
//! writes to it too. Awake, the thread polls one event at a time (`poll(Duration::ZERO)` takes one)
//! while the queue holds any, then checks the stop flag, then sleeps again. The sleep also ends
//! after [`SAFETY_NET`], so an event whose wake-up was somehow missed waits that long at most, as
//! it did with rdkafka's loop.
//!
//! No delivery report is lost at the drop, and none waits: the drop stops the thread before
//! librdkafka's handle is destroyed (as `ThreadedProducer` does), and the thread drains the queue
//! before it looks at the stop flag, so every event queued before the drop reaches the context on
//! the polling thread. rdkafka's `BaseProducer` then purges what librdkafka still holds and polls
//! the purged records' reports on the dropping thread; its poll waits out 100 ms when anything is
//! left (as it still does for records purged at the drop: the engines flush before they drop), so
//! a queue left undrained would cost the drop that again. The IO event is turned
//! off when the thread ends and the pipe is closed after the handle is destroyed, so librdkafka
//! never writes to a closed (or reused) descriptor. The pipe is non-blocking, as librdkafka
//! requires: a full pipe means a wake-up is pending already.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::client::Client;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::ToBytes;
use rdkafka::producer::{
    BaseProducer, BaseRecord, NoCustomPartitioner, Partitioner, Producer, ProducerContext,
    PurgeConfig,
};
use rdkafka::topic_partition_list::TopicPartitionList;
use rdkafka::util::Timeout;

use crate::main_queue::MainQueue;

/// The name of every producer's polling thread, the one that runs its context's callbacks.
pub const POLLING_THREAD: &str = "producer polling thread";

/// The first wait of a flush inside `rd_kafka_flush`, doubled at each call up to
/// [`MAX_FLUSH_SLICE`]: each call wakes librdkafka's broker threads again (a thread can miss the
/// first wake-up and go back to its linger sleep).
pub(crate) const FIRST_FLUSH_SLICE: Duration = Duration::from_millis(1);
/// The longest wait of one `rd_kafka_flush` call.
pub(crate) const MAX_FLUSH_SLICE: Duration = Duration::from_millis(64);

/// The longest the polling thread sleeps without a wake-up: only a missed one would make an
/// event wait this long (rdkafka's `ThreadedProducer` polled in slices of this length).
const SAFETY_NET: Duration = Duration::from_millis(100);

/// A librdkafka producer whose polling thread stops as soon as it is dropped (see the module
/// docs). Like rdkafka's `ThreadedProducer`, which it replaces: `send` and [`Producer`].
#[must_use = "the producer stops at once if unused"]
pub struct PolledProducer<C, Part: Partitioner = NoCustomPartitioner>
where
    C: ProducerContext<Part> + 'static,
{
    // Field order matters: librdkafka's handle is destroyed (the last reference, once the thread
    // is joined) before the pipe it may write to is closed.
    producer: Arc<BaseProducer<C, Part>>,
    wakeup: Arc<Wakeup>,
    poller: Option<JoinHandle<()>>,
}

impl<C, Part> std::fmt::Debug for PolledProducer<C, Part>
where
    Part: Partitioner,
    C: ProducerContext<Part> + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolledProducer").finish_non_exhaustive()
    }
}

impl<C, Part> FromClientConfigAndContext<C> for PolledProducer<C, Part>
where
    Part: Partitioner + Send + Sync + 'static,
    C: ProducerContext<Part> + 'static,
{
    fn from_config_and_context(config: &ClientConfig, context: C) -> KafkaResult<Self> {
        let producer = Arc::new(BaseProducer::<C, Part>::from_config_and_context(
            config, context,
        )?);
        let cannot = |what: &str, e: io::Error| {
            KafkaError::ClientCreation(format!(
                "cannot start the producer's polling thread: {what}: {e}"
            ))
        };
        let wakeup = Arc::new(Wakeup::new().map_err(|e| cannot("no wake-up pipe", e))?);
        // SAFETY: a live handle; the thread releases the reference before it drops its
        // reference to the producer, and the handle is destroyed only with the last one.
        let mut queue = unsafe { MainQueue::of(producer.client().native_ptr()) };
        queue.write_on_arrival(wakeup.write.as_fd());
        let poller = {
            let producer = Arc::clone(&producer);
            let wakeup = Arc::clone(&wakeup);
            thread::Builder::new()
                .name(POLLING_THREAD.to_owned())
                .spawn(move || {
                    poll_until_stopped(&producer, &queue, &wakeup);
                    // In this order, as the producer's own fields: the queue handle before
                    // librdkafka's handle, which goes before its pipe.
                    drop(queue);
                    drop(producer);
                    drop(wakeup);
                })
                .map_err(|e| cannot("no thread", e))?
        };
        Ok(PolledProducer {
            producer,
            wakeup,
            poller: Some(poller),
        })
    }
}

/// The polling thread: drains the main queue, then sleeps until woken, until the producer is
/// dropped; the queue is drained once more after the stop so no event is left behind.
fn poll_until_stopped<C, Part>(producer: &BaseProducer<C, Part>, queue: &MainQueue, wakeup: &Wakeup)
where
    Part: Partitioner,
    C: ProducerContext<Part>,
{
    loop {
        while queue.len() > 0 {
            producer.poll(Duration::ZERO);
        }
        if wakeup.stopped() {
            return;
        }
        wakeup.sleep(SAFETY_NET);
    }
}

/// A record librdkafka refused in [`PolledProducer::send`], given back with the reason.
pub type Unsent<'a, K, P, O> = (KafkaError, BaseRecord<'a, K, P, O>);

impl<C, Part> PolledProducer<C, Part>
where
    Part: Partitioner,
    C: ProducerContext<Part> + 'static,
{
    /// Sends a message to Kafka: [`BaseProducer::send`].
    // The error returns the record, as rdkafka's does.
    #[allow(clippy::result_large_err)]
    pub fn send<'a, K, P>(
        &self,
        record: BaseRecord<'a, K, P, C::DeliveryOpaque>,
    ) -> Result<(), Unsent<'a, K, P, C::DeliveryOpaque>>
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        self.producer.send(record)
    }

    /// librdkafka's `rd_kafka_flush` for up to `wait`: librdkafka treats `linger.ms` as elapsed
    /// for its duration and returns once it holds no record (their reports handled by the
    /// polling thread, since rdkafka takes delivery reports as events). rdkafka's own `flush`
    /// calls it with no wait and then polls in 100 ms steps, so the linger would only be skipped
    /// for an instant. Callers look at their own counts afterwards: a timeout is the only other
    /// outcome.
    pub fn send_lingering_for(&self, wait: Duration) {
        let wait_ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX).max(1);
        // SAFETY: the pointer is the live librdkafka handle this producer owns for the call.
        unsafe { rdkafka::bindings::rd_kafka_flush(self.client().native_ptr(), wait_ms) };
    }

    /// Waits until librdkafka holds no record (none unsent, unacknowledged or with a report not
    /// yet handled), at most until `deadline`, inside librdkafka's flush
    /// ([`Self::send_lingering_for`]) in slices from [`FIRST_FLUSH_SLICE`] doubling to
    /// [`MAX_FLUSH_SLICE`]; true when it holds none.
    pub fn flush_until(&self, deadline: Instant) -> bool {
        let mut slice = FIRST_FLUSH_SLICE;
        while self.in_flight_count() > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            self.send_lingering_for(left.min(slice));
            slice = (slice * 2).min(MAX_FLUSH_SLICE);
        }
        true
    }
}

impl<C, Part> Producer<C, Part> for PolledProducer<C, Part>
where
    Part: Partitioner,
    C: ProducerContext<Part> + 'static,
{
    fn client(&self) -> &Client<C> {
        self.producer.client()
    }

    fn flush<T: Into<Timeout>>(&self, timeout: T) -> KafkaResult<()> {
        self.producer.flush(timeout)
    }

    fn purge(&self, flags: PurgeConfig) {
        self.producer.purge(flags)
    }

    fn in_flight_count(&self) -> i32 {
        self.producer.in_flight_count()
    }

    fn init_transactions<T: Into<Timeout>>(&self, timeout: T) -> KafkaResult<()> {
        self.producer.init_transactions(timeout)
    }

    fn begin_transaction(&self) -> KafkaResult<()> {
        self.producer.begin_transaction()
    }

    fn send_offsets_to_transaction<T: Into<Timeout>>(
        &self,
        offsets: &TopicPartitionList,
        cgm: &ConsumerGroupMetadata,
        timeout: T,
    ) -> KafkaResult<()> {
        self.producer
            .send_offsets_to_transaction(offsets, cgm, timeout)
    }

    fn commit_transaction<T: Into<Timeout>>(&self, timeout: T) -> KafkaResult<()> {
        self.producer.commit_transaction(timeout)
    }

    fn abort_transaction<T: Into<Timeout>>(&self, timeout: T) -> KafkaResult<()> {
        self.producer.abort_transaction(timeout)
    }
}

impl<C, Part> Drop for PolledProducer<C, Part>
where
    Part: Partitioner,
    C: ProducerContext<Part> + 'static,
{
    fn drop(&mut self) {
        self.wakeup.stop();
        let Some(poller) = self.poller.take() else {
            return;
        };
        if poller.thread().id() == thread::current().id() {
            // Dropped by a callback on the polling thread itself, which cannot join itself: it
            // stops once the callback returns and then drops the last reference to the client.
            return;
        }
        if poller.join().is_err() {
            log::warn!("a producer's polling thread panicked");
        }
    }
}

/// The pipe the polling thread sleeps on, and the flag that tells it to stop.
struct Wakeup {
    read: OwnedFd,
    write: OwnedFd,
    stop: AtomicBool,
}

/// What the drop writes to wake the thread; only its arrival matters.
static WAKE_BYTE: u8 = 1;

impl Wakeup {
    fn new() -> io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe(2) returns.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe(2) succeeded, so both are open descriptors that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        for fd in [&read, &write] {
            // Non-blocking: librdkafka requires it of the end it writes to, and the thread
            // empties its end until it would block. Close-on-exec: a child started by the
            // application has no use for them.
            // SAFETY: fcntl on an open descriptor.
            let set = unsafe {
                let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
                flags != -1
                    && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) != -1
                    && libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) != -1
            };
            if !set {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Wakeup {
            read,
            write,
            stop: AtomicBool::new(false),
        })
    }

    /// Tells the thread to stop, and wakes it.
    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        // A failed write (the pipe full) leaves a wake-up pending already.
        // SAFETY: writes one byte from a live buffer to an open descriptor.
        unsafe {
            libc::write(
                self.write.as_raw_fd(),
                std::ptr::from_ref(&WAKE_BYTE).cast(),
                1,
            )
        };
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Sleeps until woken or `timeout` passes, and empties the pipe.
    fn sleep(&self, timeout: Duration) {
        let mut pollfd = libc::pollfd {
            fd: self.read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one live pollfd; an interrupted poll only ends the sleep early.
        unsafe { libc::poll(&mut pollfd, 1, millis) };
        let mut drained = [0u8; 64];
        // SAFETY: reads into a live buffer of its length from an open non-blocking descriptor.
        while unsafe {
            libc::read(
                self.read.as_raw_fd(),
                drained.as_mut_ptr().cast(),
                drained.len(),
            )
        } > 0
        {}
    }
}
