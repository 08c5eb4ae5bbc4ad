//! The QueueConsumer's END markers of single acks: held back to be written together, yet on the
//! markers topic without a flush and without automatic keepalive (the marker thread's timer),
//! and written at once by the close. What a closing consumer marked and never handed out is put
//! back on the queue and ended. Counted by an outside rdkafka reader decoding the markers.
//! Partitions read from their own librdkafka queues are read to their end across rebalances,
//! and a partition with a backlog does not keep the others waiting.

use std::collections::BTreeSet;
use std::time::Duration;

use ferrokafka_core::codec::marker_codec::decode_marker;
use ferrokafka_core::markers::Marker;
use ferrokafka_kafka::{QueueConsumer, QueueConsumerOptions, ReceivedRecord, Taken};
use rdkafka::Message;

use crate::common::{Observer, Topics, WAIT, settings, unique, wait_until, write, write_in};

use std::collections::BTreeMap;

const RECORDS: usize = 6;

/// `(partition, offset)` of every END marker on `markers`.
fn ends(markers: &str) -> BTreeSet<(u32, u64)> {
    Observer::read(markers)
        .iter()
        .filter_map(|m| match decode_marker(m.payload()?).ok()? {
            Marker::End { message_id } => Some((message_id.partition, message_id.offset)),
            _ => None,
        })
        .collect()
}

fn position(record: &ReceivedRecord) -> (u32, u64) {
    (record.partition as u32, record.offset as u64)
}

/// A queue topic holding [`RECORDS`] records (returned with it) and its markers topic.
fn queue_of_records(topics: &mut Topics) -> (String, String, Vec<(String, String)>) {
    let queue = topics.create("queue", 1, &[]);
    let markers = topics.create("markers", 1, &[]);
    let records: Vec<(String, String)> = (0..RECORDS)
        .map(|n| (format!("k{n}"), format!("v{n}")))
        .collect();
    write(&queue, &records);
    (queue, markers, records)
}

/// A queue consumer of `queue` that writes `markers`, reading batches of `max_batch_size`.
fn queue_consumer(queue: &str, markers: &str, max_batch_size: usize) -> QueueConsumer {
    queue_consumer_in(&unique("queue-group"), queue, markers, max_batch_size)
}

/// [`queue_consumer`] in the consumer group `group`.
fn queue_consumer_in(
    group: &str,
    queue: &str,
    markers: &str,
    max_batch_size: usize,
) -> QueueConsumer {
    QueueConsumer::new(
        settings(&[]),
        QueueConsumerOptions {
            queue_topic: queue.to_owned(),
            markers_topic: markers.to_owned(),
            group_id: group.to_owned(),
            redelivery_timeout: Duration::from_secs(30),
            marker_timeout: Duration::from_secs(10),
            max_batch_size,
            // No keepalive to write: the marker thread runs for the held ENDs alone.
            auto_keepalive: false,
            dead_letter_topic: None,
        },
    )
    .expect("queue consumer")
}

/// Takes `count` messages from `consumer`, in as many fetches as it needs.
fn take(consumer: &QueueConsumer, count: usize) -> Vec<ReceivedRecord> {
    let mut taken = Vec::new();
    wait_until("the messages handed out", WAIT, || {
        match consumer.fetch(count - taken.len(), Duration::from_millis(200)) {
            Ok(Taken::Records(records)) => taken.extend(records),
            Ok(Taken::Refused(refused)) => panic!("a START was refused: {:?}", refused.error),
            Err(e) => panic!("fetch failed: {e}"),
        }
        taken.len() == count
    });
    taken
}

#[test]
fn single_acks_reach_the_markers_topic_without_a_flush_and_by_the_close() {
    let mut topics = Topics::new();
    let (queue, markers, _) = queue_of_records(&mut topics);
    let consumer = queue_consumer(&queue, &markers, RECORDS);
    let taken = take(&consumer, RECORDS);
    let (first, rest) = taken.split_at(RECORDS / 2);
    for record in first {
        consumer
            .ack(record.partition, record.offset)
            .expect("ack of a message handed out");
    }
    let acked: BTreeSet<_> = first.iter().map(position).collect();
    wait_until("the single acks' ENDs, without a flush", WAIT, || {
        ends(&markers) == acked
    });

    for record in rest {
        consumer
            .ack(record.partition, record.offset)
            .expect("ack of a message handed out");
    }
    consumer.close(Vec::new(), WAIT);
    assert_eq!(ends(&markers), taken.iter().map(position).collect());
    assert_eq!(consumer.stats().acked, RECORDS as u64);
}

#[test]
fn a_close_puts_back_what_was_marked_and_never_handed_out_and_ends_it() {
    const BATCH: usize = 2;
    let mut topics = Topics::new();
    let (queue, markers, records) = queue_of_records(&mut topics);
    let consumer = queue_consumer(&queue, &markers, BATCH);
    let handled = take(&consumer, BATCH);
    // Fetched by the caller and kept (the rest of a batch a loop left), not handed out.
    let kept = take(&consumer, BATCH);
    for record in &handled {
        consumer
            .ack(record.partition, record.offset)
            .expect("ack of a message handed out");
    }
    // The prefetch marks the rest before anybody asks: ready, never taken.
    wait_until("every message marked", WAIT, || {
        consumer.stats().received == RECORDS as u64
    });
    consumer.close(kept, WAIT);
    drop(consumer);

    // Every START is ended: the tracker redelivers none of them.
    assert_eq!(
        ends(&markers),
        (0..RECORDS as u64).map(|offset| (0, offset)).collect()
    );
    // The four never handed out are on the queue again, after the originals, as they were.
    let on_queue: Vec<(String, String)> = Observer::read(&queue)
        .iter()
        .map(|m| {
            let text = |bytes: Option<&[u8]>| {
                String::from_utf8_lossy(bytes.unwrap_or_default()).into_owned()
            };
            (text(m.key()), text(m.payload()))
        })
        .collect();
    let (originals, copies) = on_queue.split_at(RECORDS);
    assert_eq!(originals, records.as_slice());
    let mut copies: BTreeMap<String, String> = copies.iter().cloned().collect();
    for (key, value) in &records[BATCH..] {
        assert_eq!(
            copies.remove(key).as_ref(),
            Some(value),
            "{key} not put back"
        );
    }
    assert!(copies.is_empty(), "put back but handed out: {copies:?}");
}

#[test]
fn once_a_close_began_nothing_is_handed_out_and_the_ready_messages_are_put_back() {
    let mut topics = Topics::new();
    let (queue, markers, records) = queue_of_records(&mut topics);
    let consumer = queue_consumer(&queue, &markers, 1);
    // The first fetch starts the prefetch, which then marks every other message.
    let [handled] = take(&consumer, 1).try_into().expect("one message");
    wait_until("every message marked", WAIT, || {
        consumer.stats().received == RECORDS as u64
    });
    consumer.stop_handing_out();
    match consumer.fetch(RECORDS, WAIT) {
        Ok(Taken::Records(records)) => assert!(records.is_empty(), "handed out: {records:?}"),
        other => panic!("a fetch after the close began got {other:?}"),
    }
    // The handler of the message handed out before finishes during the close: its ack counts.
    consumer
        .ack(handled.partition, handled.offset)
        .expect("an ack while the consumer closes");
    consumer.close(Vec::new(), WAIT);
    drop(consumer);

    assert_eq!(
        ends(&markers),
        (0..RECORDS as u64).map(|offset| (0, offset)).collect()
    );
    let copies: Vec<String> = Observer::read(&queue)[RECORDS..]
        .iter()
        .map(|m| String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned())
        .collect();
    let expected: Vec<String> = records[1..].iter().map(|(_, v)| v.clone()).collect();
    assert_eq!(copies, expected);
}

/// What one fetch of up to `max` messages from `consumer` hands out (none when nothing came).
fn fetch_values(consumer: &QueueConsumer, max: usize) -> Vec<String> {
    match consumer.fetch(max, Duration::from_millis(100)) {
        Ok(Taken::Records(records)) => records
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect(),
        other => panic!("a fetch got {other:?}"),
    }
}

#[test]
fn partitions_revoked_and_assigned_again_are_read_to_their_end() {
    // The prefetch thread reads each assigned partition from the partition's own librdkafka
    // queue, split from the consumer's. librdkafka never forwards a queue the application
    // split back to the consumer's, even when the partition is assigned again: a partition
    // that leaves this consumer and comes back must be split again, or it is never read.
    const PARTITIONS: i32 = 4;
    const COUNT: usize = 4_000;
    let mut topics = Topics::new();
    let queue = topics.create("queue", PARTITIONS, &[]);
    let markers = topics.create("markers", 1, &[]);
    let values: BTreeSet<String> = (0..COUNT).map(|n| format!("v{n}")).collect();
    let records: Vec<(String, String)> = values
        .iter()
        .map(|v| (format!("k{v}"), v.clone()))
        .collect();
    write(&queue, &records);
    let group = unique("queue-group");
    let first = queue_consumer_in(&group, &queue, &markers, 10);
    let mut seen: BTreeSet<String> = BTreeSet::new();
    wait_until("the first consumer's first messages", WAIT, || {
        seen.extend(fetch_values(&first, 10));
        seen.len() >= 50
    });
    // A second member: the group rebalances (librdkafka's default assignors are eager: every
    // partition is revoked, then each member gets some). Both go on fetching, so that both
    // take part in the rebalance.
    let second = queue_consumer_in(&group, &queue, &markers, 10);
    let mut second_saw = 0;
    wait_until("messages for the second member", WAIT, || {
        seen.extend(fetch_values(&first, 10));
        let got = fetch_values(&second, 10);
        second_saw += got.len();
        seen.extend(got);
        second_saw > 0
    });
    // It leaves: its partitions come back to the first, whose splits of them were dropped
    // when they were revoked. What it marked and never handed out is put back on the queue.
    second.close(Vec::new(), WAIT);
    drop(second);
    wait_until(
        "every message handed out by one member or the other",
        WAIT,
        || {
            seen.extend(fetch_values(&first, 50));
            seen.is_superset(&values)
        },
    );
    first.close(Vec::new(), WAIT);
}

#[test]
fn a_partition_with_a_backlog_does_not_keep_the_others_waiting() {
    // Each look at the partitions' own queues begins after the one that gave the last
    // records: batches come from every partition in turn, not from the first one until it is
    // drained.
    const BACKLOG: usize = 3_000;
    const FEW: usize = 5;
    let mut topics = Topics::new();
    let queue = topics.create("queue", 3, &[]);
    let markers = topics.create("markers", 1, &[]);
    let records = |what: &str, count: usize| -> Vec<(String, String)> {
        (0..count)
            .map(|n| (format!("k{n}"), format!("{what}{n}")))
            .collect()
    };
    write_in(&queue, Some(0), &records("backlog", BACKLOG));
    write_in(&queue, Some(1), &records("one", FEW));
    write_in(&queue, Some(2), &records("two", FEW));
    let consumer = queue_consumer(&queue, &markers, 100);
    let mut backlog_before = 0;
    let mut others = 0;
    wait_until("the few records of partitions 1 and 2", WAIT, || {
        for value in fetch_values(&consumer, 100) {
            if value.starts_with("backlog") {
                backlog_before += 1;
            } else {
                others += 1;
            }
        }
        others == 2 * FEW
    });
    assert!(
        backlog_before <= BACKLOG / 2,
        "{backlog_before} of partition 0's backlog handed out before the other partitions' {}",
        2 * FEW
    );
    consumer.close(Vec::new(), WAIT);
}
