//! The ConcurrentConsumer's `ready_fd` signals queued events as well as records, so an event
//! loop that watches it takes both without a thread waiting for either (asyncio's
//! `AsyncConsumer`).

use std::os::fd::RawFd;
use std::time::Duration;

use ferrokafka_kafka::{ConcurrentConsumer, ConsumerEvent, ConsumerOptions, Subscription};

use crate::common::{Topics, WAIT, settings, unique};

/// Whether `fd` becomes readable within `wait`.
fn readable_within(fd: RawFd, wait: Duration) -> bool {
    let mut watched = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd for the duration of the call; the engine keeps fd open.
    let ready = unsafe { libc::poll(&raw mut watched, 1, millis) };
    assert!(
        ready >= 0,
        "poll failed: {}",
        std::io::Error::last_os_error()
    );
    ready == 1 && watched.revents & libc::POLLIN != 0
}

#[test]
fn an_event_queued_for_the_bindings_makes_ready_fd_readable() {
    let mut topics = Topics::new();
    let topic = topics.create("consumer-signal", 1, &[]);
    let group = unique("consumer-signal-group");
    let options = ConsumerOptions {
        subscriptions: vec![Subscription::Topic(topic)],
        ..ConsumerOptions::default()
    };
    let consumer = ConcurrentConsumer::new(settings(&[("group.id", &group)]), options, WAIT)
        .expect("consumer");
    let events = consumer.take_events().expect("the first take gets them");
    let fd = consumer.ready_fd().expect("ready_fd");
    loop {
        match events
            .recv_timeout(WAIT)
            .expect("an assignment within WAIT")
        {
            ConsumerEvent::Assigned(_) => break,
            ConsumerEvent::Error(e) => eprintln!("consumer error: {e}"),
            _ => {}
        }
    }
    // No worker waits for records: reading the signal leaves nothing to say.
    assert!(consumer.fetch_ready().expect("fetch_ready").is_empty());
    assert!(
        !readable_within(fd, Duration::ZERO),
        "signalled with nothing queued"
    );
    // Stopping revokes the partition: its events alone must wake the loop.
    consumer.begin_stop(Duration::ZERO);
    assert!(
        readable_within(fd, WAIT),
        "the stop's events did not signal ready_fd"
    );
    let said = events.recv_timeout(WAIT).expect("the event that signalled");
    assert!(
        matches!(said, ConsumerEvent::Draining { .. }),
        "expected the partition's draining first, got {said:?}"
    );
    assert!(consumer.wait_stopped(WAIT), "the consumer did not stop");
}
