//! What the ConcurrentConsumer tells the bindings, and how it wakes them: `ready_fd` signals
//! queued events as well as records, so an event loop that watches it takes both without a
//! thread waiting for either (asyncio's `AsyncConsumer`); pauses and resumes of a partition's
//! buffer become events only once asked for (telemetry subscribers), since a handler that keeps
//! up makes about one of each a batch.

use std::os::fd::RawFd;
use std::time::Duration;

use ferrokafka_kafka::{
    ConcurrentConsumer, ConsumerEvent, ConsumerOptions, Fetched, StartAt, Subscription,
};

use crate::common::{Topics, WAIT, first_assignment, settings, unique, wait_until, write};

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
    first_assignment(&events);
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

#[test]
fn pauses_and_resumes_are_events_only_once_asked_for() {
    let mut topics = Topics::new();
    let topic = topics.create("consumer-load-changes", 1, &[]);
    let records: Vec<(String, String)> = (0..50).map(|n| (format!("k{n}"), "v".into())).collect();
    write(&topic, &records);
    let options = ConsumerOptions {
        subscriptions: vec![Subscription::Partition {
            topic,
            partition: 0,
            start: StartAt::Beginning,
        }],
        max_batch_size: Some(5),
        max_queue_records: 10,
        ..ConsumerOptions::default()
    };
    let consumer = ConcurrentConsumer::new(settings(&[]), options, WAIT).expect("consumer");
    let events = consumer.take_events().expect("the first take gets them");
    // Nobody fetches: the buffer fills and the partition is paused, which is only counted.
    wait_until("the partition paused", WAIT, || {
        consumer.stats().totals.pauses > 0
    });
    let said: Vec<ConsumerEvent> = events.try_iter().collect();
    let worker = said
        .iter()
        .find_map(|event| match event {
            ConsumerEvent::Assigned(assigned) => Some(assigned[0].worker),
            _ => None,
        })
        .expect("the assignment");
    assert!(
        !said
            .iter()
            .any(|event| matches!(event, ConsumerEvent::LoadControl { .. })),
        "load changes sent before they were asked for: {said:?}"
    );
    consumer.report_load_changes();
    // A batch of 5 takes the buffer down to half: the partition is polled again, and says so.
    assert!(matches!(
        consumer.fetch(worker, WAIT).expect("fetch"),
        Fetched::Batch(_)
    ));
    let resumed = loop {
        match events.recv_timeout(WAIT).expect("the resume within WAIT") {
            ConsumerEvent::LoadControl { paused, queued, .. } => break (paused, queued),
            ConsumerEvent::Error(e) => eprintln!("consumer error: {e}"),
            _ => {}
        }
    };
    assert_eq!(resumed, (false, 5), "the first load change after asking");
    consumer.begin_stop(Duration::ZERO);
    assert!(consumer.wait_stopped(WAIT), "the consumer did not stop");
}
