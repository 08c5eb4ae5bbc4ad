//! What every engine test needs: the broker's address, settings, per-test topics (deleted when the
//! test ends, even when it fails), an independent writer and reader built on rdkafka's own
//! clients, the group's committed offsets as an outsider reads them, a consumer's first
//! assignment, and waits with deadlines.
//!
//! The reader and the writer are plain rdkafka clients, not ferrokafka's engines, so what a test
//! counts on a topic does not depend on the code under test.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferrokafka_kafka::{Assignment, Client, ClientSettings, ConsumerEvent, NewTopicSpec};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

/// The longest a test waits for anything: far above what a passing run takes, so only a broken
/// engine (or a broken broker) reaches it.
pub const WAIT: Duration = Duration::from_secs(30);

/// The broker under test, from `KAFKA_BOOTSTRAP`. Without it the test fails: these tests are
/// never skipped, so a green run means they ran against a real broker.
pub fn bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| {
        panic!(
            "KAFKA_BOOTSTRAP is not set: the engine tests need a real broker. Start one with \
             `KAFKA_PORT=19092 bash scripts/kafka.sh start` and run with \
             KAFKA_BOOTSTRAP=127.0.0.1:19092 (scripts/test.sh does both)"
        )
    })
}

/// A name no other test, run or process uses: topics and groups of one test never meet another's.
pub fn unique(what: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("test-{what}-{}-{nanos}-{n}", std::process::id())
}

/// Client settings for the broker under test, plus `extra`.
pub fn settings(extra: &[(&str, &str)]) -> ClientSettings {
    settings_for(&bootstrap(), extra)
}

/// Client settings for the brokers at `bootstrap`, plus `extra`.
pub fn settings_for(bootstrap: &str, extra: &[(&str, &str)]) -> ClientSettings {
    let entries = std::iter::once(("bootstrap.servers", bootstrap))
        .chain(extra.iter().copied())
        .map(|(key, value)| (key.to_owned(), value.to_owned()));
    ClientSettings::new(entries).expect("valid test settings")
}

/// The topics of one test: created on demand, deleted when it ends.
pub struct Topics {
    client: Client,
    names: Vec<String>,
}

impl Topics {
    pub fn new() -> Self {
        Topics {
            client: Client::new(settings(&[])).expect("admin client"),
            names: Vec::new(),
        }
    }

    /// Creates a topic named after `what` with `partitions` and topic-level `config`.
    pub fn create(&mut self, what: &str, partitions: i32, config: &[(&str, &str)]) -> String {
        let name = unique(what);
        self.create_named(&name, partitions, config);
        name
    }

    /// Creates the topic `name` (a name derived from another test topic's).
    pub fn create_named(&mut self, name: &str, partitions: i32, config: &[(&str, &str)]) {
        let spec = NewTopicSpec {
            name: name.to_owned(),
            num_partitions: partitions,
            replication_factor: -1,
            config: config
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        self.client
            .create_topics(&[spec], false, WAIT)
            .unwrap_or_else(|e| panic!("cannot create topic {name}: {e}"));
        self.names.push(name.to_owned());
    }

    /// The admin client, for tests that produce through ferrokafka's own `Client`.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl Drop for Topics {
    fn drop(&mut self) {
        if !self.names.is_empty() {
            // Best effort: a failed deletion must not hide the test's own failure.
            let _ = self.client.delete_topics(&self.names, WAIT);
        }
    }
}

/// Writes `(key, value)` records to `topic` with a plain idempotent rdkafka producer (the order
/// within a partition is the order given) and waits until the broker has all of them.
pub fn write(topic: &str, records: &[(String, String)]) {
    write_in(topic, None, records);
}

/// [`write`] to `partition` of `topic` when given, else wherever the keys go.
pub fn write_in(topic: &str, partition: Option<i32>, records: &[(String, String)]) {
    let stored = || {
        let ends = Observer::new(None).end_offsets(topic);
        match partition {
            Some(partition) => ends.get(&partition).copied().unwrap_or(0),
            None => ends.values().sum::<i64>(),
        }
    };
    let before = stored();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("rdkafka producer");
    for (key, value) in records {
        let mut record = BaseRecord::to(topic).key(key).payload(value);
        record.partition = partition;
        producer
            .send(record)
            .unwrap_or_else(|(e, _)| panic!("cannot queue a record for {topic}: {e}"));
    }
    producer
        .flush(WAIT)
        .unwrap_or_else(|e| panic!("cannot write to {topic}: {e}"));
    assert_eq!(
        stored() - before,
        records.len() as i64,
        "{topic} does not hold what was written"
    );
}

/// An outsider's view of topics and groups: a plain rdkafka consumer that joins no group.
pub struct Observer {
    consumer: BaseConsumer,
}

impl Observer {
    /// With `group`, [`Observer::committed`] reads that group's committed offsets; without, the
    /// observer has a group of its own (librdkafka assigns partitions only with one), which it
    /// never joins.
    pub fn new(group: Option<&str>) -> Self {
        let group = group.map_or_else(|| unique("observer"), str::to_owned);
        let consumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", "read_committed")
            .create()
            .expect("rdkafka consumer");
        Observer { consumer }
    }

    /// The partitions of `topic`, in order.
    pub fn partitions(&self, topic: &str) -> Vec<i32> {
        let metadata = self
            .consumer
            .fetch_metadata(Some(topic), WAIT)
            .unwrap_or_else(|e| panic!("no metadata for {topic}: {e}"));
        let mut partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        partitions.sort_unstable();
        partitions
    }

    /// Each partition's end (high watermark) offset.
    pub fn end_offsets(&self, topic: &str) -> BTreeMap<i32, i64> {
        self.partitions(topic)
            .into_iter()
            .map(|p| {
                let (_, high) = self
                    .consumer
                    .fetch_watermarks(topic, p, WAIT)
                    .unwrap_or_else(|e| panic!("no watermarks for {topic}[{p}]: {e}"));
                (p, high)
            })
            .collect()
    }

    /// The group's committed offset of each partition of `topic` that has one.
    pub fn committed(&self, topic: &str, partitions: &[i32]) -> HashMap<i32, i64> {
        let mut list = TopicPartitionList::new();
        for &p in partitions {
            list.add_partition(topic, p);
        }
        let committed = self
            .consumer
            .committed_offsets(list, WAIT)
            .unwrap_or_else(|e| panic!("cannot read the committed offsets of {topic}: {e}"));
        committed
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(offset) => Some((e.partition(), offset)),
                _ => None,
            })
            .collect()
    }

    /// Every committed record of `topic`, per partition in offset order, read from the start to
    /// the end of each partition.
    pub fn read(topic: &str) -> Vec<OwnedMessage> {
        let observer = Observer::new(None);
        let partitions = observer.partitions(topic);
        let mut assignment = TopicPartitionList::new();
        for &p in &partitions {
            assignment
                .add_partition_offset(topic, p, Offset::Beginning)
                .expect("a valid offset");
        }
        observer.consumer.assign(&assignment).expect("assign");
        let mut open: BTreeSet<i32> = partitions.into_iter().collect();
        let mut records = Vec::new();
        let deadline = Instant::now() + WAIT;
        while !open.is_empty() {
            assert!(
                Instant::now() < deadline,
                "could not read {topic} to its end"
            );
            match observer.consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Ok(message)) => {
                    // Written after the end was seen: read on to the new end.
                    open.insert(message.partition());
                    records.push(message.detach());
                }
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    open.remove(&p);
                }
                Some(Err(e)) => panic!("error reading {topic}: {e}"),
            }
        }
        records.sort_by_key(|m| (m.partition(), m.offset()));
        records
    }
}

/// The value of header `name` of `message`, if it has one.
pub fn header<'a>(message: &'a OwnedMessage, name: &str) -> Option<&'a [u8]> {
    message
        .headers()?
        .iter()
        .filter(|h| h.key == name)
        .last()
        .and_then(|h| h.value)
}

/// Checks `condition` every 20 ms until it holds; fails naming `what` after `timeout`. For states
/// that no event announces (a topic's contents, a group's committed offsets, a daemon's status).
pub fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The first assignment a ConcurrentConsumer's `events` say, within [`WAIT`]; errors before it
/// are printed (a broker still starting says some), other events skipped.
pub fn first_assignment(events: &Receiver<ConsumerEvent>) -> Vec<Assignment> {
    loop {
        match events
            .recv_timeout(WAIT)
            .expect("an assignment within WAIT")
        {
            ConsumerEvent::Assigned(assigned) => return assigned,
            ConsumerEvent::Error(e) => eprintln!("consumer error: {e}"),
            _ => {}
        }
    }
}
