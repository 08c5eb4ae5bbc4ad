//! The QueueConsumer's END markers of single acks: held back to be written together, yet on the
//! markers topic without a flush and without automatic keepalive (the marker thread's timer),
//! and written at once by `finish_markers`, the close's first step. Counted by an outside rdkafka
//! reader decoding the markers.

use std::collections::BTreeSet;
use std::time::Duration;

use ferrokafka_core::codec::marker_codec::decode_marker;
use ferrokafka_core::markers::Marker;
use ferrokafka_kafka::{QueueConsumer, QueueConsumerOptions, ReceivedRecord, Taken};
use rdkafka::Message;

use crate::common::{Observer, Topics, WAIT, settings, unique, wait_until, write};

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

#[test]
fn single_acks_reach_the_markers_topic_without_a_flush_and_by_the_close() {
    let mut topics = Topics::new();
    let queue = topics.create("queue", 1, &[]);
    let markers = topics.create("markers", 1, &[]);
    let records: Vec<(String, String)> = (0..RECORDS)
        .map(|n| (format!("k{n}"), format!("v{n}")))
        .collect();
    write(&queue, &records);
    let consumer = QueueConsumer::new(
        settings(&[]),
        QueueConsumerOptions {
            queue_topic: queue.clone(),
            markers_topic: markers.clone(),
            group_id: unique("queue-group"),
            redelivery_timeout: Duration::from_secs(30),
            marker_timeout: Duration::from_secs(10),
            max_batch_size: RECORDS,
            // No keepalive to write: the marker thread runs for the held ENDs alone.
            auto_keepalive: false,
            dead_letter_topic: None,
        },
    )
    .expect("queue consumer");

    let mut taken = Vec::new();
    wait_until("every record handed out", WAIT, || {
        match consumer.fetch(RECORDS - taken.len(), Duration::from_millis(200)) {
            Ok(Taken::Records(records)) => taken.extend(records),
            Ok(Taken::Refused(refused)) => panic!("a START was refused: {:?}", refused.error),
            Err(e) => panic!("fetch failed: {e}"),
        }
        taken.len() == RECORDS
    });
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
    consumer.finish_markers(WAIT);
    assert_eq!(ends(&markers), taken.iter().map(position).collect());
    assert_eq!(consumer.stats().acked, RECORDS as u64);
}
