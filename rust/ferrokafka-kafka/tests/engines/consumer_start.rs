//! Where a ConcurrentConsumer without a group starts: at `auto.offset.reset`, never at offsets
//! committed under the group id librdkafka makes it carry (`ferrokafka-without-group`, shared by
//! every such consumer). Someone committing under that id must not move where they start.

use std::time::Duration;

use ferrokafka_core::tracking::HandlerSample;
use ferrokafka_kafka::{ConcurrentConsumer, ConsumerOptions, Fetched, Subscription};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::common::{Topics, WAIT, bootstrap, first_assignment, settings, wait_until, write};

/// The group id every consumer without a group carries (process reports list it).
const CARRIED_GROUP: &str = "ferrokafka-without-group";

/// Commits `offset` for `topic`'s partition 0 under [`CARRIED_GROUP`], as any other client could.
fn commit_under_the_carried_group(topic: &str, offset: i64) {
    let outsider: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", CARRIED_GROUP)
        .set("enable.auto.commit", "false")
        .create()
        .expect("rdkafka consumer");
    let mut committed = TopicPartitionList::new();
    committed
        .add_partition_offset(topic, 0, Offset::Offset(offset))
        .expect("a valid offset");
    outsider
        .commit(&committed, CommitMode::Sync)
        .expect("commit under the carried group id");
}

/// The first offset a consumer without a group reading `topic` hands out, with `reset` as its
/// `auto.offset.reset`; `then` runs once librdkafka fetches the partition (its start resolved).
fn first_offset_without_a_group(topic: &str, reset: &str, then: impl FnOnce()) -> i64 {
    let options = ConsumerOptions {
        subscriptions: vec![Subscription::Topic(topic.to_owned())],
        ..ConsumerOptions::default()
    };
    let config = [
        ("auto.offset.reset", reset),
        ("statistics.interval.ms", "50"),
    ];
    let consumer = ConcurrentConsumer::new(settings(&config), options, WAIT).expect("consumer");
    let events = consumer.take_events().expect("the first take gets them");
    let worker = first_assignment(&events)[0].worker;
    wait_until("librdkafka fetching the partition", WAIT, || {
        consumer
            .report_sample(HandlerSample::default())
            .partitions
            .first()
            .and_then(|p| p.statistics.as_ref())
            .map(|statistics| statistics.fetch_state.as_str())
            == Some("active")
    });
    then();
    let first = match consumer.fetch(worker, WAIT).expect("fetch") {
        Fetched::Batch(records) => records[0].offset,
        Fetched::Empty => panic!("nothing fetched within {WAIT:?}"),
        Fetched::Gone => panic!("the partition went away"),
    };
    consumer.begin_stop(Duration::ZERO);
    assert!(consumer.wait_stopped(WAIT), "the consumer did not stop");
    first
}

#[test]
fn a_consumer_without_a_group_starts_at_auto_offset_reset_whatever_its_group_id_committed() {
    let mut topics = Topics::new();
    let topic = topics.create("consumer-start-no-group", 1, &[]);
    let records: Vec<(String, String)> = (0..10).map(|n| (format!("k{n}"), "v".into())).collect();
    write(&topic, &records);
    commit_under_the_carried_group(&topic, 6);
    assert_eq!(
        first_offset_without_a_group(&topic, "earliest", || {}),
        0,
        "earliest: the partition's first record"
    );
    let more: Vec<(String, String)> = (10..12).map(|n| (format!("k{n}"), "v".into())).collect();
    assert_eq!(
        first_offset_without_a_group(&topic, "latest", || write(&topic, &more)),
        10,
        "latest: the first record written after the start"
    );
}
