//! [`MainQueue`]: a reference to a librdkafka client's main queue, for the threads that read it
//! outside rdkafka's own loops: a [`PolledProducer`](crate::polled_producer::PolledProducer)'s
//! polling thread and the admin client's [`MainQueueWatcher`](crate::main_queue_watcher); and for
//! the consumer's poller, which measures it (a group consumer's main queue forwards to its
//! consumer queue, and the length is the forwarded queue's).
//!
//! The main queue is where librdkafka puts a client's delivery reports, errors, logs, statistics
//! and OAUTHBEARER token refreshes. Each reference is counted by librdkafka and released once, by
//! its drop, which must come before the client's handle is destroyed (`rd_kafka_destroy` waits for
//! them). A queue that writes to a pipe when events arrive stops writing at the drop too, so
//! librdkafka never writes to a descriptor closed (or reused) after it.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::time::Duration;

use rdkafka::bindings as rdsys;

/// What the queue writes to a descriptor when events arrive; only the write itself matters.
static ARRIVAL_BYTE: u8 = 1;

/// One reference to the main queue of a librdkafka client (see the module docs).
pub(crate) struct MainQueue {
    queue: NonNull<rdsys::rd_kafka_queue_t>,
    /// Whether this reference made the queue write to a descriptor, to undo at the drop.
    writes_on_arrival: bool,
}

// SAFETY: librdkafka's queues may be polled, measured and woken from any thread at once; the
// reference is released once, by the drop.
unsafe impl Send for MainQueue {}
// SAFETY: as for Send.
unsafe impl Sync for MainQueue {}

impl MainQueue {
    /// A new reference to the main queue of `rk`.
    ///
    /// # Safety
    /// `rk` must be a live handle, and the reference must be dropped before `rk` is destroyed.
    pub(crate) unsafe fn of(rk: *mut rdsys::rd_kafka_t) -> Self {
        // SAFETY: the caller's contract; rd_kafka_queue_get_main never returns null for a live
        // handle.
        let queue = unsafe { rdsys::rd_kafka_queue_get_main(rk) };
        MainQueue {
            queue: NonNull::new(queue).expect("librdkafka has a main queue"),
            writes_on_arrival: false,
        }
    }

    /// Makes librdkafka write a byte to `fd` whenever the queue goes from empty to non-empty
    /// (once until it is next polled), until this reference is dropped. `fd` must be
    /// non-blocking (librdkafka requires it: a full pipe means a wake-up is pending already) and
    /// stay open until the drop.
    pub(crate) fn write_on_arrival(&mut self, fd: BorrowedFd<'_>) {
        // SAFETY: a live queue; librdkafka keeps a copy of the one-byte payload.
        unsafe {
            rdsys::rd_kafka_queue_io_event_enable(
                self.queue.as_ptr(),
                fd.as_raw_fd(),
                std::ptr::from_ref(&ARRIVAL_BYTE).cast(),
                1,
            );
        }
        self.writes_on_arrival = true;
    }

    /// The events waiting on the queue.
    pub(crate) fn len(&self) -> usize {
        // SAFETY: a live queue.
        unsafe { rdsys::rd_kafka_queue_length(self.queue.as_ptr()) }
    }

    /// Takes the next event, waiting up to `timeout` for one; `None` when none came (or
    /// [`wake`](Self::wake) ended the wait).
    pub(crate) fn poll(&self, timeout: Duration) -> Option<QueueEvent> {
        let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: a live queue; the event returned is ours to destroy.
        let event = unsafe { rdsys::rd_kafka_queue_poll(self.queue.as_ptr(), millis) };
        NonNull::new(event).map(QueueEvent)
    }

    /// Makes a [`poll`](Self::poll) in progress on any reference to this queue, or the next one,
    /// return at once.
    pub(crate) fn wake(&self) {
        // SAFETY: a live queue.
        unsafe { rdsys::rd_kafka_queue_yield(self.queue.as_ptr()) };
    }
}

impl Drop for MainQueue {
    fn drop(&mut self) {
        // SAFETY: a live queue, released once; fd -1 turns the arrival writes off.
        unsafe {
            if self.writes_on_arrival {
                rdsys::rd_kafka_queue_io_event_enable(self.queue.as_ptr(), -1, std::ptr::null(), 0);
            }
            rdsys::rd_kafka_queue_destroy(self.queue.as_ptr());
        }
    }
}

/// An event taken off a [`MainQueue`], destroyed when dropped.
pub(crate) struct QueueEvent(NonNull<rdsys::rd_kafka_event_t>);

impl QueueEvent {
    /// librdkafka's event, valid while `self` lives.
    pub(crate) fn as_ptr(&self) -> *mut rdsys::rd_kafka_event_t {
        self.0.as_ptr()
    }

    /// Its type (`RD_KAFKA_EVENT_ERROR`, ...).
    pub(crate) fn kind(&self) -> rdsys::rd_kafka_event_type_t {
        // SAFETY: a live event.
        unsafe { rdsys::rd_kafka_event_type(self.as_ptr()) }
    }
}

impl Drop for QueueEvent {
    fn drop(&mut self) {
        // SAFETY: a polled event, destroyed once.
        unsafe { rdsys::rd_kafka_event_destroy(self.as_ptr()) };
    }
}
