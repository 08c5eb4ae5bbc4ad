//! [`Client`]: topic administration plus synchronous produce and read-back.
//!
//! Threading: every method blocks its calling thread for at most the given timeout and is safe to
//! call from several threads at once. Delivery reports are routed back to their caller through a
//! per-call channel carried as librdkafka's opaque pointer, so concurrent `produce` calls never
//! see each other's results. The producer and the admin client are created on first use.

use std::collections::HashSet;
use std::sync::OnceLock;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::config::{ClientRole, ClientSettings};
use crate::connection_failure::latest_connection_failure;
use crate::error::{KafkaIoError, KafkaResult};
use crate::partitioner::PartitionCounts;
use crate::record::{OutgoingRecord, ReceivedRecord};

/// One broker of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Broker id.
    pub id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: i32,
}

/// One partition of a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition number.
    pub id: i32,
    /// Leader broker id (-1 when there is none).
    pub leader: i32,
    /// Replica broker ids.
    pub replicas: Vec<i32>,
    /// In-sync replica broker ids.
    pub isr: Vec<i32>,
}

/// One topic with its partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    /// Topic name.
    pub name: String,
    /// Partitions ordered by id.
    pub partitions: Vec<PartitionInfo>,
}

/// The cluster as one metadata request saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterInfo {
    /// Id of the broker that answered.
    pub orig_broker_id: i32,
    /// All brokers.
    pub brokers: Vec<BrokerInfo>,
    /// Topics ordered by name.
    pub topics: Vec<TopicInfo>,
}

/// A topic to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTopicSpec {
    /// Topic name.
    pub name: String,
    /// Partition count, or -1 for the broker default.
    pub num_partitions: i32,
    /// Replication factor, or -1 for the broker default.
    pub replication_factor: i32,
    /// Topic-level configuration such as `cleanup.policy`.
    pub config: Vec<(String, String)>,
}

/// Pause between metadata attempts while no broker accepts connections.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Where a produced record landed.
type DeliveryOutcome = KafkaResult<ReceivedRecord>;

/// Routes each delivery report to the channel of the call that produced the record.
struct DeliveryRouter;

impl ClientContext for DeliveryRouter {}

impl ProducerContext for DeliveryRouter {
    type DeliveryOpaque = Box<SyncSender<DeliveryOutcome>>;

    fn delivery(&self, result: &DeliveryResult<'_>, reply: Self::DeliveryOpaque) {
        let outcome = match result {
            Ok(message) => Ok(ReceivedRecord::from_message(message)),
            Err((err, _)) => Err(KafkaIoError::from_rdkafka(
                "produce",
                err.clone(),
                Duration::ZERO,
                None,
            )),
        };
        // The caller may have given up waiting; its receiver is then gone and that is fine.
        let _ = reply.send(outcome);
    }
}

/// Context of consumers that read to a partition's end on purpose (`enable.partition.eof`):
/// reaching it is how they know they are done, not an error worth logging.
pub(crate) struct EndIsExpected;

impl ClientContext for EndIsExpected {
    fn error(&self, error: KafkaError, reason: &str) {
        log_unless_end(error, reason);
    }
}

/// Logs a client error, except the end-of-partition events of `enable.partition.eof`.
pub(crate) fn log_unless_end(error: KafkaError, reason: &str) {
    let end = matches!(error, KafkaError::PartitionEOF(_))
        || error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF);
    if !end {
        log::error!("librdkafka: {error}: {reason}");
    }
}

impl rdkafka::consumer::ConsumerContext for EndIsExpected {}

/// A general-purpose client: administration, synchronous produce, and reading a topic back.
pub struct Client {
    settings: ClientSettings,
    admin: AdminClient<DefaultClientContext>,
    producer: OnceLock<ThreadedProducer<DeliveryRouter>>,
    partitions: PartitionCounts,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Creates a client; librdkafka validates every key now, so a typo fails here.
    pub fn new(settings: ClientSettings) -> KafkaResult<Self> {
        settings.bootstrap()?;
        let admin = settings
            .for_role(ClientRole::Producer)
            .to_client_config()
            .create()
            .map_err(|e| KafkaIoError::from_rdkafka("create client", e, Duration::ZERO, None))?;
        Ok(Client {
            settings,
            admin,
            producer: OnceLock::new(),
            partitions: PartitionCounts::default(),
        })
    }

    fn bootstrap(&self) -> Option<&str> {
        self.settings.bootstrap().ok()
    }

    fn error(&self, operation: &str, err: KafkaError, timeout: Duration) -> KafkaIoError {
        self.explain(KafkaIoError::from_rdkafka(
            operation,
            err,
            timeout,
            self.bootstrap(),
        ))
    }

    /// A timeout becomes the refused TLS handshake or SASL authentication behind it, if any: a
    /// wrong CA or password is not something waiting longer would fix.
    fn explain(&self, error: KafkaIoError) -> KafkaIoError {
        match error {
            KafkaIoError::Timeout { ref operation, .. } => {
                match latest_connection_failure(self.admin.inner()) {
                    Some((code, reason)) => KafkaIoError::from_code(operation, code, Some(reason)),
                    None => error,
                }
            }
            other => other,
        }
    }

    /// Asks for metadata until a broker answers or `timeout` passes. librdkafka fails at once
    /// when every broker refuses the connection; a broker that is still starting should not be
    /// an error while the caller is willing to wait.
    fn fetch_metadata(
        &self,
        topic: Option<&str>,
        timeout: Duration,
    ) -> KafkaResult<rdkafka::metadata::Metadata> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.admin.inner().fetch_metadata(topic, left) {
                Ok(metadata) => return Ok(metadata),
                Err(err) => match self.error("list_topics", err, timeout) {
                    KafkaIoError::Broker {
                        retriable: true, ..
                    } if Instant::now() + RETRY_PAUSE < deadline => {
                        std::thread::sleep(RETRY_PAUSE);
                    }
                    KafkaIoError::Broker {
                        retriable: true, ..
                    } => {
                        return Err(self.explain(KafkaIoError::Timeout {
                            operation: "list_topics".to_owned(),
                            timeout,
                            bootstrap: self.bootstrap().map(str::to_owned),
                        }));
                    }
                    other => return Err(other),
                },
            }
        }
    }

    /// Fetches cluster metadata, for one topic or for all of them.
    pub fn list_topics(&self, topic: Option<&str>, timeout: Duration) -> KafkaResult<ClusterInfo> {
        let metadata = self.fetch_metadata(topic, timeout)?;
        let brokers = metadata
            .brokers()
            .iter()
            .map(|b| BrokerInfo {
                id: b.id(),
                host: b.host().to_owned(),
                port: b.port(),
            })
            .collect();
        let mut topics: Vec<TopicInfo> = metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| {
                let mut partitions: Vec<PartitionInfo> = t
                    .partitions()
                    .iter()
                    .map(|p| PartitionInfo {
                        id: p.id(),
                        leader: p.leader(),
                        replicas: p.replicas().to_vec(),
                        isr: p.isr().to_vec(),
                    })
                    .collect();
                partitions.sort_by_key(|p| p.id);
                TopicInfo {
                    name: t.name().to_owned(),
                    partitions,
                }
            })
            .collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ClusterInfo {
            orig_broker_id: metadata.orig_broker_id(),
            brokers,
            topics,
        })
    }

    /// Creates topics and returns the names created; with `exist_ok`, existing topics are not an
    /// error (and are not in the result).
    pub fn create_topics(
        &self,
        specs: &[NewTopicSpec],
        exist_ok: bool,
        timeout: Duration,
    ) -> KafkaResult<Vec<String>> {
        let mut seen = HashSet::new();
        for spec in specs {
            if spec.name.is_empty() {
                return Err(KafkaIoError::InvalidArgument(
                    "topic name must not be empty".to_owned(),
                ));
            }
            if !seen.insert(spec.name.as_str()) {
                return Err(KafkaIoError::InvalidArgument(format!(
                    "topic {:?} is listed twice",
                    spec.name
                )));
            }
        }
        let new_topics: Vec<NewTopic<'_>> = specs
            .iter()
            .map(|spec| {
                spec.config.iter().fold(
                    NewTopic::new(
                        &spec.name,
                        spec.num_partitions,
                        TopicReplication::Fixed(spec.replication_factor),
                    ),
                    |topic, (key, value)| topic.set(key, value),
                )
            })
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(timeout));
        let results = futures_executor::block_on(self.admin.create_topics(&new_topics, &options))
            .map_err(|e| self.error("create_topics", e, timeout))?;
        let mut created = Vec::with_capacity(results.len());
        for result in results {
            match result {
                Ok(name) => created.push(name),
                Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) if exist_ok => {}
                Err((name, code)) => {
                    return Err(KafkaIoError::from_code(
                        "create_topics",
                        code,
                        Some(format!("topic {name:?}: {code}")),
                    ));
                }
            }
        }
        self.wait_until_led(&created, timeout)?;
        Ok(created)
    }

    /// Waits until every topic in `names` shows in metadata with a leader for each partition, so
    /// a caller can produce to a topic as soon as `create_topics` returns.
    fn wait_until_led(&self, names: &[String], timeout: Duration) -> KafkaResult<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let cluster = self.list_topics(None, left.max(RETRY_PAUSE))?;
            let led = names.iter().all(|name| {
                cluster.topics.iter().any(|t| {
                    t.name == *name
                        && !t.partitions.is_empty()
                        && t.partitions.iter().all(|p| p.leader >= 0)
                })
            });
            if led {
                return Ok(());
            }
            if Instant::now() + RETRY_PAUSE >= deadline {
                return Err(KafkaIoError::Timeout {
                    operation: format!("waiting for new topics {names:?} to get leaders"),
                    timeout,
                    bootstrap: self.bootstrap().map(str::to_owned),
                });
            }
            std::thread::sleep(RETRY_PAUSE);
        }
    }

    /// Deletes topics; unknown topics are an error.
    pub fn delete_topics(&self, names: &[String], timeout: Duration) -> KafkaResult<()> {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let options = AdminOptions::new().operation_timeout(Some(timeout));
        let results = futures_executor::block_on(self.admin.delete_topics(&names, &options))
            .map_err(|e| self.error("delete_topics", e, timeout))?;
        for result in results {
            if let Err((name, code)) = result {
                return Err(KafkaIoError::from_code(
                    "delete_topics",
                    code,
                    Some(format!("topic {name:?}: {code}")),
                ));
            }
        }
        Ok(())
    }

    fn producer(&self) -> KafkaResult<&ThreadedProducer<DeliveryRouter>> {
        if let Some(producer) = self.producer.get() {
            return Ok(producer);
        }
        let mut config = self
            .settings
            .for_role(ClientRole::Producer)
            .to_client_config();
        // A synchronous call must not outlive its caller's patience by minutes.
        if self.settings.get("message.timeout.ms").is_none() {
            config.set("message.timeout.ms", "30000");
        }
        let producer = config
            .create_with_context(DeliveryRouter)
            .map_err(|e| KafkaIoError::from_rdkafka("create producer", e, Duration::ZERO, None))?;
        Ok(self.producer.get_or_init(|| producer))
    }

    /// Produces one record and waits for the broker's acknowledgement. Without an explicit
    /// partition, `partition_key` chooses it as the AsyncProducer (and WaterDrop) would.
    pub fn produce(
        &self,
        record: &OutgoingRecord,
        partition_key: Option<&[u8]>,
        timeout: Duration,
    ) -> KafkaResult<ReceivedRecord> {
        if record.topic.is_empty() {
            return Err(KafkaIoError::InvalidArgument(
                "topic must be a non-empty string".to_owned(),
            ));
        }
        let producer = self.producer()?;
        let partition = match (record.partition, partition_key) {
            (None, Some(partition_key)) => Some(
                self.partitions
                    .partition_for(producer.client(), &record.topic, partition_key)
                    .ok_or_else(|| {
                        KafkaIoError::InvalidArgument(format!(
                            "cannot choose a partition for partition_key: topic {:?} does not \
                             exist or has no partitions",
                            record.topic
                        ))
                    })?,
            ),
            (partition, _) => partition,
        };
        let (reply, outcome) = sync_channel(1);
        let mut base = record.base_record(Box::new(reply));
        if let Some(partition) = partition {
            base = base.partition(partition);
        }
        producer
            .send(base)
            .map_err(|(e, _)| self.error("produce", e, timeout))?;
        match outcome.recv_timeout(timeout) {
            Ok(delivered) => delivered.map(|mut r| {
                r.topic.clone_from(&record.topic);
                r
            }),
            Err(_) => Err(KafkaIoError::Timeout {
                operation: "produce".to_owned(),
                timeout,
                bootstrap: self.bootstrap().map(str::to_owned),
            }),
        }
    }

    /// Reads every partition of `topic` from the beginning up to its end as of this call, at most
    /// `max_records` records, in partition then offset order.
    pub fn read_topic(
        &self,
        topic: &str,
        max_records: usize,
        timeout: Duration,
    ) -> KafkaResult<Vec<ReceivedRecord>> {
        let started = Instant::now();
        let cluster = self.list_topics(Some(topic), timeout)?;
        let partitions: Vec<i32> = cluster
            .topics
            .iter()
            .filter(|t| t.name == topic)
            .flat_map(|t| t.partitions.iter().map(|p| p.id))
            .collect();
        if partitions.is_empty() {
            return Err(KafkaIoError::InvalidArgument(format!(
                "topic {topic:?} does not exist"
            )));
        }
        let mut config = self
            .settings
            .for_role(ClientRole::Consumer)
            .to_client_config();
        config
            .set("enable.partition.eof", "true")
            .set("enable.auto.commit", "false")
            .set("group.id", "ferrokafka-read-topic");
        let consumer: BaseConsumer<EndIsExpected> = config
            .create_with_context(EndIsExpected)
            .map_err(|e| KafkaIoError::from_rdkafka("create consumer", e, Duration::ZERO, None))?;
        let mut assignment = TopicPartitionList::new();
        for &p in &partitions {
            assignment
                .add_partition_offset(topic, p, Offset::Beginning)
                .map_err(|e| self.error("read_topic", e, timeout))?;
        }
        consumer
            .assign(&assignment)
            .map_err(|e| self.error("read_topic", e, timeout))?;
        let mut open: HashSet<i32> = partitions.into_iter().collect();
        let mut records = Vec::new();
        while !open.is_empty() && records.len() < max_records {
            let Some(left) = timeout.checked_sub(started.elapsed()) else {
                return Err(KafkaIoError::Timeout {
                    operation: format!("read_topic({topic})"),
                    timeout,
                    bootstrap: self.bootstrap().map(str::to_owned),
                });
            };
            match consumer.poll(left.min(Duration::from_millis(100))) {
                None => {}
                Some(Ok(message)) => records.push(ReceivedRecord::from_message(&message)),
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    open.remove(&p);
                }
                Some(Err(e)) => return Err(self.error("read_topic", e, timeout)),
            }
        }
        records.sort_by_key(|r| (r.partition, r.offset));
        records.truncate(max_records);
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_config_key_is_refused_with_its_name() {
        let settings = ClientSettings::new([
            ("bootstrap.servers".to_owned(), "127.0.0.1:1".to_owned()),
            ("no.such.key".to_owned(), "1".to_owned()),
        ])
        .unwrap();
        let err = Client::new(settings).unwrap_err();
        assert!(matches!(err, KafkaIoError::Config(_)), "{err:?}");
        assert!(err.to_string().contains("no.such.key"), "{err}");
    }

    #[test]
    fn refused_secret_values_are_named_but_never_shown() {
        for (key, value) in [("sasl.passwrd", "hunter2"), ("ssl.key.pem", "hunter2")] {
            let settings = ClientSettings::new([
                ("bootstrap.servers".to_owned(), "127.0.0.1:1".to_owned()),
                // With TLS in use librdkafka parses the key and refuses one that is not PEM.
                ("security.protocol".to_owned(), "SSL".to_owned()),
                (key.to_owned(), value.to_owned()),
            ])
            .unwrap();
            let err = Client::new(settings).unwrap_err();
            let shown = format!("{err} {err:?}");
            assert!(shown.contains(key), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
    }

    #[test]
    fn missing_bootstrap_is_a_config_error() {
        let err = Client::new(ClientSettings::default()).unwrap_err();
        assert!(err.to_string().contains("bootstrap.servers"), "{err}");
    }

    #[test]
    fn unreachable_broker_times_out_within_the_deadline() {
        let settings =
            ClientSettings::new([("bootstrap.servers".to_owned(), "127.0.0.1:1".to_owned())])
                .unwrap();
        let client = Client::new(settings).unwrap();
        let err = client
            .list_topics(None, Duration::from_millis(300))
            .unwrap_err();
        assert!(matches!(err, KafkaIoError::Timeout { .. }), "{err:?}");
    }
}
