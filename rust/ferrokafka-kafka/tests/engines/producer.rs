//! The AsyncProducer's accounting: every accepted record is delivered or handed back (a `Failed`
//! or `Dropped` event, or `finish_shutdown`'s list), exactly once, and what counts as delivered
//! is on the topic.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use ferrokafka_kafka::{
    AsyncProducer, AsyncProducerOptions, ClientSettings, OutgoingRecord, Pending, ProducerEvent,
    ProducerStats, Ticket,
};
use rdkafka::message::Message;

use crate::common::{Observer, Topics, WAIT, settings, settings_for, unique};

/// A producer whose events the test reads.
struct Harness {
    producer: Arc<AsyncProducer>,
    events: Receiver<ProducerEvent>,
}

/// What became of the records a producer accepted, once it shut down.
struct Accounting {
    stats: ProducerStats,
    /// Values of the records handed back (`Failed`, `Dropped`, or never sent), in any order.
    handed_back: Vec<String>,
}

impl Harness {
    fn new(settings: ClientSettings, options: AsyncProducerOptions) -> Self {
        let producer = AsyncProducer::new(settings, options).expect("producer");
        let events = producer
            .take_events()
            .expect("the first take gets the events");
        Harness { producer, events }
    }

    /// Queues `values` for `topic` (key `k<value>`, ticket `first + i` when given); the queue
    /// is sized by the test to take them all.
    fn produce(&self, topic: &str, values: &[String], first: Option<Ticket>) {
        self.produce_records(
            values
                .iter()
                .enumerate()
                .map(|(i, value)| {
                    record(topic, value, first.map_or(0, |first| first + i as Ticket))
                })
                .collect(),
        );
    }

    /// Queues `records`; the queue is sized by the test to take them all.
    fn produce_records(&self, mut records: VecDeque<Box<Pending>>) {
        let count = records.len();
        let (accepted, _, refusal) = self.producer.try_produce(&mut records, false);
        assert!(refusal.is_none(), "a record was refused: {refusal:?}");
        assert_eq!(accepted, count);
    }

    /// Delivers everything and waits until every record is settled (delivered or handed back).
    fn settle(&self) {
        let deadline = Instant::now() + WAIT;
        while !self.producer.flush_step(Duration::from_millis(100)) {
            assert!(
                Instant::now() < deadline,
                "records still unsettled: {:?}",
                self.producer.stats()
            );
        }
    }

    /// Shuts the producer down and collects every record it handed back, from its events up to
    /// the last one (`ShutDown`) and from `finish_shutdown`'s list.
    fn shut_down(self) -> Accounting {
        let mut handed_back: Vec<String> = self
            .producer
            .finish_shutdown()
            .into_iter()
            .map(|p| value_of(&p))
            .collect();
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(ProducerEvent::Failed { pending, .. }) => handed_back.push(value_of(&pending)),
                Ok(ProducerEvent::Dropped { pending }) => {
                    handed_back.extend(pending.iter().map(|p| value_of(p)));
                }
                Ok(ProducerEvent::ShutDown) => break,
                Ok(_) => {}
                Err(e) => panic!("no ShutDown event: {e}"),
            }
        }
        handed_back.sort();
        Accounting {
            stats: self.producer.stats(),
            handed_back,
        }
    }
}

/// A record of `value` for `topic`, keyed `k<value>`, with `ticket`.
fn record(topic: &str, value: &str, ticket: Ticket) -> Box<Pending> {
    Box::new(Pending {
        record: OutgoingRecord {
            topic: topic.to_owned(),
            key: Some(format!("k{value}").into_bytes()),
            value: Some(value.as_bytes().to_vec()),
            ..OutgoingRecord::default()
        },
        partition_key: None,
        ticket,
        failures: 0,
    })
}

fn value_of(pending: &Pending) -> String {
    String::from_utf8(pending.record.value.clone().expect("a value")).expect("UTF-8")
}

fn values(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{prefix}{n:04}")).collect()
}

/// Asserts accepted == delivered + handed back, with exactly `expected` handed back.
fn assert_accounted(accounting: &Accounting, accepted: usize, expected: &[String]) {
    let stats = accounting.stats;
    assert_eq!(stats.enqueued, accepted as u64, "{stats:?}");
    assert_eq!(
        stats.delivered + accounting.handed_back.len() as u64,
        accepted as u64,
        "accepted != delivered + handed back: {stats:?}"
    );
    assert_eq!(accounting.handed_back, expected, "handed back");
    assert_eq!(
        stats.failed + stats.dropped,
        expected.len() as u64,
        "{stats:?}"
    );
    assert_eq!(
        (stats.queue_size, stats.retry_queue_size, stats.in_flight),
        (0, 0, 0),
        "records left in the producer: {stats:?}"
    );
}

#[test]
fn every_accepted_record_is_delivered_and_acknowledged_where_it_landed() {
    let mut topics = Topics::new();
    let topic = topics.create("producer-delivered", 3, &[]);
    let count = 500;
    let harness = Harness::new(
        settings(&[("linger.ms", "5")]),
        AsyncProducerOptions {
            max_queue_size: count,
            delivery_threshold: 100,
            ..AsyncProducerOptions::default()
        },
    );
    let sent = values("v", count);
    // One batch report's tickets: each acknowledgement names the record it is for.
    let first = harness.producer.batch_tickets(count);
    harness.produce(&topic, &sent, Some(first));
    harness.settle();
    let acknowledged = harness.producer.take_acknowledged();
    let accounting = harness.shut_down();
    assert_accounted(&accounting, count, &[]);
    assert_eq!(accounting.stats.delivered, count as u64);

    let stored: BTreeMap<(i32, i64), (Vec<u8>, Vec<u8>)> = Observer::read(&topic)
        .iter()
        .map(|m| {
            let key = m.key().unwrap_or_default().to_vec();
            let value = m.payload().unwrap_or_default().to_vec();
            ((m.partition(), m.offset()), (key, value))
        })
        .collect();
    assert_eq!(stored.len(), count, "records on {topic}");
    assert_eq!(acknowledged.len(), count, "acknowledgements");
    for ack in &acknowledged {
        let n = usize::try_from(ack.ticket - first).expect("a ticket of the batch");
        let (key, value) = stored
            .get(&(ack.partition, ack.offset))
            .unwrap_or_else(|| panic!("nothing stored where {ack:?} says"));
        assert_eq!(value, sent[n].as_bytes(), "{ack:?}");
        assert_eq!(key, format!("k{}", sent[n]).as_bytes(), "{ack:?}");
    }
}

#[test]
fn records_for_a_missing_topic_are_handed_back_and_the_others_delivered() {
    let mut topics = Topics::new();
    let topic = topics.create("producer-mixed", 1, &[]);
    let missing = unique("producer-never-created");
    // The broker auto-creates topics; this producer asks it not to, so the records for
    // `missing` can never be written and time out.
    let harness = Harness::new(
        settings(&[
            ("allow.auto.create.topics", "false"),
            ("message.timeout.ms", "2000"),
        ]),
        AsyncProducerOptions {
            max_queue_size: 100,
            max_retries: 0,
            ..AsyncProducerOptions::default()
        },
    );
    let (good, lost) = (values("good", 40), values("lost", 10));
    for (good, lost) in good.chunks(4).zip(lost.chunks(1)) {
        harness.produce(&topic, good, None);
        harness.produce(&missing, lost, None);
    }
    harness.settle();
    let accounting = harness.shut_down();
    assert_accounted(&accounting, good.len() + lost.len(), &lost);
    assert_eq!(accounting.stats.delivered, good.len() as u64);

    let mut stored: Vec<String> = Observer::read(&topic)
        .iter()
        .map(|m| String::from_utf8(m.payload().unwrap_or_default().to_vec()).expect("UTF-8"))
        .collect();
    stored.sort();
    assert_eq!(stored, good, "records on {topic}");
    assert!(
        Observer::new(None).partitions(&missing).is_empty(),
        "{missing} was created after all"
    );
}

#[test]
fn without_a_broker_records_are_retried_then_handed_back_by_failure_or_shutdown() {
    // Nothing listens on port 1: every send times out, is sent once more, times out again and
    // is handed back; what shutdown finds still queued comes back from finish_shutdown (or as
    // purged, failed records).
    let harness = Harness::new(
        settings_for("127.0.0.1:1", &[("message.timeout.ms", "1000")]),
        AsyncProducerOptions {
            max_queue_size: 100,
            max_retries: 1,
            ..AsyncProducerOptions::default()
        },
    );
    let topic = unique("producer-unreachable");
    let (timed_out, queued) = (values("sent", 20), values("queued", 10));
    harness.produce(&topic, &timed_out, None);
    harness.settle();
    let stats = harness.producer.stats();
    assert_eq!(
        (stats.retried, stats.failed),
        (timed_out.len() as u64, timed_out.len() as u64),
        "{stats:?}"
    );
    // No delivery trigger: these wait in the queue until the shutdown.
    harness.produce(&topic, &queued, None);
    let accounting = harness.shut_down();
    let mut expected = [queued, timed_out].concat();
    expected.sort();
    assert_accounted(&accounting, expected.len(), &expected);
    assert_eq!(accounting.stats.delivered, 0);
}

#[test]
fn a_batch_refused_for_one_record_delivers_its_neighbours_and_hands_that_one_back() {
    // A keyless record on a compacted topic fails its whole batch, every neighbour reported
    // with its error; the neighbours are sent again in halves and delivered.
    let mut topics = Topics::new();
    let topic = topics.create("producer-isolated", 1, &[("cleanup.policy", "compact")]);
    let harness = Harness::new(
        settings(&[("linger.ms", "100")]),
        AsyncProducerOptions {
            max_queue_size: 100,
            ..AsyncProducerOptions::default()
        },
    );
    let sent = values("v", 30);
    let mut records: VecDeque<Box<Pending>> = sent.iter().map(|v| record(&topic, v, 0)).collect();
    for pending in &mut records {
        pending.record.partition = Some(0);
    }
    records[11].record.key = None;
    harness.produce_records(records);
    harness.settle();
    let accounting = harness.shut_down();
    assert_accounted(&accounting, sent.len(), &sent[11..12]);
    let mut stored: Vec<String> = Observer::read(&topic)
        .iter()
        .map(|m| String::from_utf8(m.payload().unwrap_or_default().to_vec()).expect("UTF-8"))
        .collect();
    stored.sort();
    let good: Vec<String> = sent.iter().filter(|v| **v != sent[11]).cloned().collect();
    assert_eq!(stored, good, "records on {topic}");
}
