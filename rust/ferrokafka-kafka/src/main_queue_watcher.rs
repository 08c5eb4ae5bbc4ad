//! [`MainQueueWatcher`]: a thread that reads the main queue of a client whose main queue rdkafka
//! never polls (the [`Client`](crate::Client)'s admin client), where librdkafka puts its error
//! events and OAUTHBEARER token refreshes.
//!
//! Errors go to the client's [`ConnectionWatch`], so a call waiting on the admin client ends with
//! a refused handshake's cause at once; refreshes are answered from the client's context, as a
//! polled client's are. Its log events are dropped: rdkafka never forwards an admin client's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::bindings as rdsys;

use crate::connection_failure::ConnectionWatch;
use crate::main_queue::MainQueue;

/// The librdkafka handle of the watched client, for the token refreshes it asks for.
struct Handle(*mut rdsys::rd_kafka_t);

// SAFETY: librdkafka handles are thread-safe; the watcher thread is joined before the client
// is dropped (see [`MainQueueWatcher`]).
unsafe impl Send for Handle {}

/// The watcher thread (see the module docs). Dropping it stops and joins the thread, waking its
/// poll at once so that a client's drop does not wait out a slice; it must be dropped before the
/// client.
pub(crate) struct MainQueueWatcher {
    stop: Arc<AtomicBool>,
    /// Its own reference to the queue, to wake the thread's poll: the thread releases its own
    /// as soon as it sees the stop flag, maybe before the drop's wake-up.
    queue: MainQueue,
    thread: Option<JoinHandle<()>>,
}

/// How long the watcher waits for an event before it looks at its stop flag (a safety net: the
/// drop wakes it).
const WATCH_SLICE: Duration = Duration::from_millis(100);

impl MainQueueWatcher {
    /// Starts watching the main queue of `client`.
    pub(crate) fn start<C: rdkafka::ClientContext + 'static>(
        client: &rdkafka::client::Client<C>,
        watch: Arc<ConnectionWatch>,
    ) -> std::io::Result<Self> {
        // SAFETY: `client` is a live handle; the thread's reference is released when the thread
        // ends and the drop's after it joined the thread, before the handle can be dropped (see
        // the type's contract).
        let (polled, waker) = unsafe {
            (
                MainQueue::of(client.native_ptr()),
                MainQueue::of(client.native_ptr()),
            )
        };
        let handle = Handle(client.native_ptr());
        let context = Arc::clone(client.context());
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("ferrokafka-client-errors".to_owned())
            .spawn(move || {
                let (queue, handle) = (polled, handle);
                while !stopping.load(Ordering::Acquire) {
                    let Some(event) = queue.poll(WATCH_SLICE) else {
                        continue;
                    };
                    match event.kind() {
                        rdsys::RD_KAFKA_EVENT_ERROR => {
                            // SAFETY: a live event; its description is read before it is
                            // destroyed.
                            unsafe {
                                let text = rdsys::rd_kafka_event_error_string(event.as_ptr());
                                if !text.is_null() {
                                    let text = std::ffi::CStr::from_ptr(text).to_string_lossy();
                                    let code = rdsys::rd_kafka_event_error(event.as_ptr());
                                    watch.record(code.into(), &text);
                                }
                            }
                        }
                        rdsys::RD_KAFKA_EVENT_OAUTHBEARER_TOKEN_REFRESH => {
                            // SAFETY: the client is live while the thread runs, and the event
                            // was polled from its main queue.
                            unsafe {
                                crate::oauth::answer_refresh_event(
                                    handle.0,
                                    &*context,
                                    event.as_ptr(),
                                );
                            }
                        }
                        _ => {}
                    }
                }
            })?;
        Ok(MainQueueWatcher {
            stop,
            queue: waker,
            thread: Some(thread),
        })
    }
}

impl Drop for MainQueueWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.queue.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
