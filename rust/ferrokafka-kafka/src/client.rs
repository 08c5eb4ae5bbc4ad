//! [`Client`]: topic administration plus synchronous produce and read-back.
//!
//! Threading: every method blocks its calling thread for at most the given timeout (one deadline
//! for everything the call does) and is safe to call from several threads at once. Delivery
//! reports are routed back to their caller through a per-call slot carried as librdkafka's opaque
//! pointer, so concurrent `produce` calls never see each other's results. The admin client is
//! created with the client, the producer on first use.
//!
//! Refusals: the admin client and the producer share one [`ConnectionWatch`]; a refused TLS
//! handshake, SASL authentication or OAUTHBEARER token ends every wait at once with that cause,
//! and without `allow.auto.create.topics` a produce to a topic the brokers say does not exist
//! fails at once instead of after librdkafka's 30 s of `topic.metadata.propagation.max.ms`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use ferrokafka_core::PartitionKeyHashing;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::config::{ClientRole, ClientSettings};
use crate::connection_failure::{ConnectionWatch, Waited};
use crate::debug_form::debug_showing;
use crate::error::{KafkaIoError, KafkaResult};
use crate::main_queue_watcher::MainQueueWatcher;
use crate::oauth::{self, TokenContext, TokenRefresh, answer_token_refresh};
use crate::partitioner::PartitionCounts;
use crate::polled_producer::PolledProducer;
use crate::record::{OutgoingRecord, ReceivedRecord, TopicName};

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
/// The longest one metadata attempt waits for a usable broker: librdkafka's wait for one cannot
/// be woken, so a refusal recorded meanwhile is seen after at most this long.
const METADATA_SLICE: Duration = Duration::from_millis(200);

/// The broker setting that says whether a producer's metadata request creates a missing topic.
const AUTO_CREATE_TOPICS: &str = "auto.create.topics.enable";

/// Where a produced record landed.
type DeliveryOutcome = KafkaResult<ReceivedRecord>;

/// Where the delivery report of one `produce` call goes: the call waits on it.
struct DeliverySlot {
    outcome: Mutex<Option<DeliveryOutcome>>,
    waiter: Thread,
}

/// Routes each delivery report to the slot of the call that produced the record.
struct DeliveryRouter {
    watch: Arc<ConnectionWatch>,
    tokens: TokenRefresh,
}

impl ClientContext for DeliveryRouter {
    answer_token_refresh!(tokens);

    fn error(&self, error: KafkaError, reason: &str) {
        self.watch.observe(&error, reason);
        log_unless_end(error, &self.watch.redact(reason));
    }
}

impl ProducerContext for DeliveryRouter {
    type DeliveryOpaque = Arc<DeliverySlot>;

    fn delivery(&self, result: &DeliveryResult<'_>, slot: Self::DeliveryOpaque) {
        let outcome = match result {
            Ok(message) => {
                self.watch.clear();
                Ok(ReceivedRecord::from_message(message))
            }
            Err((err, _)) => Err(KafkaIoError::from_rdkafka(
                "produce",
                err.clone(),
                Duration::ZERO,
                None,
            )),
        };
        // The caller may have given up waiting; then nobody reads the slot, and that is fine.
        *slot.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
        slot.waiter.unpark();
    }
}

/// Context of consumers that read to a partition's end on purpose (`enable.partition.eof`):
/// reaching it is how they know they are done, not an error worth logging.
pub(crate) struct EndIsExpected {
    /// Where the consumer's refused connections go, when someone waits on it.
    pub(crate) watch: Option<Arc<ConnectionWatch>>,
    pub(crate) tokens: TokenRefresh,
}

impl ClientContext for EndIsExpected {
    answer_token_refresh!(tokens);

    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(watch) = &self.watch {
            watch.observe(&error, reason);
        }
        log_unless_end(error, reason);
    }
}

/// Logs a client error, except the end-of-partition events of `enable.partition.eof`.
///
/// A broker connection failure (`BrokerTransportFailure`) is logged at DEBUG only: librdkafka
/// hands it to the error callback and logs the same text itself (its FAIL line, at ERROR), so
/// an outage printed every refused connection twice.
pub(crate) fn log_unless_end(error: KafkaError, reason: &str) {
    let code = error.rdkafka_error_code();
    if matches!(error, KafkaError::PartitionEOF(_)) || code == Some(RDKafkaErrorCode::PartitionEOF)
    {
        return;
    }
    if code == Some(RDKafkaErrorCode::BrokerTransportFailure) {
        log::debug!("librdkafka: {error}: {reason}");
    } else {
        log::error!("librdkafka: {error}: {reason}");
    }
}

impl rdkafka::consumer::ConsumerContext for EndIsExpected {}

/// A general-purpose client: administration, synchronous produce, and reading a topic back.
pub struct Client {
    settings: ClientSettings,
    /// Reads the admin client's error events; declared before `admin` so it stops first.
    _admin_errors: MainQueueWatcher,
    admin: AdminClient<TokenContext>,
    producer: OnceLock<PolledProducer<DeliveryRouter>>,
    partitions: PartitionCounts,
    /// The connection failure of the admin client, the producer or `read_topic`'s consumer.
    watch: Arc<ConnectionWatch>,
    /// Topics the brokers said exist, so `produce` asks about each only once.
    existing_topics: Mutex<HashSet<String>>,
    /// The brokers' `auto.create.topics.enable`, once asked.
    brokers_create_topics: Mutex<Option<bool>>,
}

debug_showing!(Client, settings);

impl Client {
    /// Creates a client; librdkafka validates every key now, so a typo fails here.
    pub fn new(settings: ClientSettings) -> KafkaResult<Self> {
        settings.bootstrap()?;
        let mut admin_settings = settings.for_role(ClientRole::Producer);
        // Its metadata requests (list_topics, read_topic's lookup) must not create the topic
        // they ask about, as a producer's would on brokers with auto.create.topics.enable.
        admin_settings.set("allow.auto.create.topics", "false");
        let admin: AdminClient<TokenContext> = oauth::create_client(
            &admin_settings.to_client_config(),
            TokenContext::new(settings.token_refresh()),
            "create client",
        )?;
        let watch = Arc::new(ConnectionWatch::new(&settings));
        let admin_errors = MainQueueWatcher::start(admin.inner(), Arc::clone(&watch))
            .map_err(|e| KafkaIoError::Config(format!("cannot start a client thread: {e}")))?;
        Ok(Client {
            settings,
            _admin_errors: admin_errors,
            admin,
            producer: OnceLock::new(),
            partitions: PartitionCounts::default(),
            watch,
            existing_topics: Mutex::default(),
            brokers_create_topics: Mutex::default(),
        })
    }

    /// This client with its partition keys hashed by `hashing` (by default as WaterDrop does).
    pub fn with_partition_key_hashing(mut self, hashing: PartitionKeyHashing) -> Self {
        self.partitions = PartitionCounts::new(hashing);
        self
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
            KafkaIoError::Timeout { ref operation, .. } => match self.watch.failure() {
                Some(failure) => failure.error(operation),
                None => error,
            },
            other => other,
        }
    }

    fn timed_out(&self, operation: &str, timeout: Duration) -> KafkaIoError {
        self.explain(KafkaIoError::Timeout {
            operation: operation.to_owned(),
            timeout,
            bootstrap: self.bootstrap().map(str::to_owned),
        })
    }

    /// Asks `client` for metadata until a broker answers, a connection is refused or `deadline`
    /// passes. librdkafka fails at once when every broker refuses the connection; a broker that
    /// is still starting should not be an error while the caller is willing to wait.
    fn fetch_metadata<C: ClientContext>(
        &self,
        operation: &str,
        client: &rdkafka::client::Client<C>,
        topic: Option<&str>,
        deadline: Instant,
        timeout: Duration,
    ) -> KafkaResult<rdkafka::metadata::Metadata> {
        // Until a broker took a request, each attempt waits at most METADATA_SLICE for one.
        let mut slice = METADATA_SLICE;
        loop {
            if let Some(failure) = self.watch.failure() {
                return Err(failure.error(operation));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timed_out(operation, timeout));
            }
            let err = match client.fetch_metadata(topic, left.min(slice)) {
                Ok(metadata) => {
                    self.watch.clear();
                    return Ok(metadata);
                }
                Err(err) => err,
            };
            match self.error(operation, err, timeout) {
                // A broker took the request and did not answer in the slice: wait for the
                // answer to a new one with all the time left.
                KafkaIoError::Timeout { .. } => slice = left,
                KafkaIoError::Broker {
                    retriable: true, ..
                } => {
                    let pause = (Instant::now() + RETRY_PAUSE).min(deadline);
                    if let Waited::Refused(failure) = self.watch.wait_until(pause, || None::<()>) {
                        return Err(failure.error(operation));
                    }
                }
                other => return Err(other),
            }
        }
    }

    /// Waits for an admin operation until it completes, a connection is refused or `deadline`
    /// passes.
    fn await_admin<T>(
        &self,
        operation: &str,
        pending: impl Future<Output = rdkafka::error::KafkaResult<T>>,
        deadline: Instant,
        timeout: Duration,
    ) -> KafkaResult<T> {
        self.producer()?;
        match self.watch.block_on(pending, deadline) {
            Waited::Done(Ok(done)) => {
                self.watch.clear();
                Ok(done)
            }
            Waited::Done(Err(err)) => Err(self.error(operation, err, timeout)),
            Waited::Refused(failure) => Err(failure.error(operation)),
            Waited::TimedOut => Err(self.timed_out(operation, timeout)),
        }
    }

    /// Admin options bounding an operation by `timeout`: librdkafka's own request timeout is
    /// `socket.timeout.ms` (60 s) otherwise.
    fn admin_options(timeout: Duration) -> AdminOptions {
        AdminOptions::new()
            .operation_timeout(Some(timeout))
            .request_timeout(Some(timeout))
    }

    /// Fetches cluster metadata, for one topic or for all of them.
    pub fn list_topics(&self, topic: Option<&str>, timeout: Duration) -> KafkaResult<ClusterInfo> {
        self.list_topics_until("list_topics", topic, Instant::now() + timeout, timeout)
    }

    /// [`Client::list_topics`] for `operation`, within a deadline; `timeout` is what errors
    /// report.
    fn list_topics_until(
        &self,
        operation: &str,
        topic: Option<&str>,
        deadline: Instant,
        timeout: Duration,
    ) -> KafkaResult<ClusterInfo> {
        self.producer()?;
        let metadata =
            self.fetch_metadata(operation, self.admin.inner(), topic, deadline, timeout)?;
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
        let deadline = Instant::now() + timeout;
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
        let options = Self::admin_options(timeout);
        let results = self.await_admin(
            "create_topics",
            self.admin.create_topics(&new_topics, &options),
            deadline,
            timeout,
        )?;
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
        self.wait_until_led(&created, deadline, timeout)?;
        Ok(created)
    }

    /// Waits until every topic in `names` shows in metadata with a leader for each partition, so
    /// a caller can produce to a topic as soon as `create_topics` returns.
    fn wait_until_led(
        &self,
        names: &[String],
        deadline: Instant,
        timeout: Duration,
    ) -> KafkaResult<()> {
        loop {
            let cluster = self.list_topics_until("create_topics", None, deadline, timeout)?;
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
                return Err(self.timed_out(
                    &format!("waiting for new topics {names:?} to get leaders"),
                    timeout,
                ));
            }
            std::thread::sleep(RETRY_PAUSE);
        }
    }

    /// Deletes topics; unknown topics are an error.
    pub fn delete_topics(&self, names: &[String], timeout: Duration) -> KafkaResult<()> {
        let deadline = Instant::now() + timeout;
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let options = Self::admin_options(timeout);
        let results = self.await_admin(
            "delete_topics",
            self.admin.delete_topics(&names, &options),
            deadline,
            timeout,
        )?;
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

    /// The producer, created on first use. The admin calls create it too: the admin client only
    /// logs a failed OAUTHBEARER token, while the producer's error event reaches the watch.
    fn producer(&self) -> KafkaResult<&PolledProducer<DeliveryRouter>> {
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
        // Each call waits for its one record: lingering for more would only add to the wait
        // (records of concurrent calls still share a request while one is in flight).
        if ["linger.ms", "queue.buffering.max.ms"]
            .iter()
            .all(|name| self.settings.get(name).is_none())
        {
            config.set("linger.ms", "0");
        }
        let producer = oauth::create_client(
            &config,
            DeliveryRouter {
                watch: Arc::clone(&self.watch),
                tokens: self.settings.token_refresh(),
            },
            "create producer",
        )?;
        Ok(self.producer.get_or_init(|| producer))
    }

    /// Refuses a topic the brokers say does not exist when it will not be created: this client
    /// does not ask for it (`allow.auto.create.topics` off), or the brokers do not create topics
    /// (`auto.create.topics.enable=false`, as on most managed clusters). librdkafka would hold
    /// the record `topic.metadata.propagation.max.ms` (30 s) before failing it. Otherwise
    /// librdkafka's own request creates the topic: `Ok(false)`, the topic does not exist yet.
    fn check_topic_exists(
        &self,
        producer: &PolledProducer<DeliveryRouter>,
        topic: &str,
        deadline: Instant,
        timeout: Duration,
    ) -> KafkaResult<bool> {
        let mut existing = self
            .existing_topics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if existing.contains(topic) {
            return Ok(true);
        }
        let metadata =
            self.fetch_metadata("produce", producer.client(), Some(topic), deadline, timeout)?;
        let missing = metadata.topics().iter().any(|t| {
            t.name() == topic
                && t.error() == Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        });
        if !missing {
            existing.insert(topic.to_owned());
            return Ok(true);
        }
        let why_not_created = if !self.auto_creates_topics() {
            Some("allow.auto.create.topics is off")
        } else if !self.brokers_create_topics(&metadata, deadline) {
            Some("the brokers do not create topics: auto.create.topics.enable=false")
        } else {
            None
        };
        if let Some(why) = why_not_created {
            return Err(KafkaIoError::from_code(
                "produce",
                RDKafkaErrorCode::UnknownTopicOrPartition,
                Some(format!(
                    "unknown topic or partition: topic {topic:?} does not exist ({why})"
                )),
            ));
        }
        Ok(false)
    }

    /// Whether the brokers create a topic a producer asks for (`auto.create.topics.enable`),
    /// asked of the broker that answered `metadata` once per client. Anything but a clear
    /// "false" (no answer in time, no right to describe configs) counts as yes: librdkafka's
    /// own wait then decides, as before.
    fn brokers_create_topics(
        &self,
        metadata: &rdkafka::metadata::Metadata,
        deadline: Instant,
    ) -> bool {
        let mut known = self
            .brokers_create_topics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(known) = *known {
            return known;
        }
        let broker = ResourceSpecifier::Broker(metadata.orig_broker_id());
        let left = deadline.saturating_duration_since(Instant::now());
        let pending = self
            .admin
            .describe_configs([&broker], &Self::admin_options(left));
        let Waited::Done(Ok(results)) = self.watch.block_on(pending, deadline) else {
            return true;
        };
        let creates = results
            .iter()
            .flatten()
            .filter_map(|resource| resource.get(AUTO_CREATE_TOPICS))
            .all(|entry| entry.value.as_deref() != Some("false"));
        *known = Some(creates);
        creates
    }

    /// Whether this client's producer asks the brokers to create topics it produces to
    /// (librdkafka's producer default).
    fn auto_creates_topics(&self) -> bool {
        !self
            .settings
            .get("allow.auto.create.topics")
            .is_some_and(|v| v.eq_ignore_ascii_case("false") || v == "0")
    }

    /// Produces one record and waits for the broker's acknowledgement. Without an explicit
    /// partition, `partition_key` chooses it as the AsyncProducer (and WaterDrop) would.
    pub fn produce(
        &self,
        record: &OutgoingRecord,
        partition_key: Option<&[u8]>,
        timeout: Duration,
    ) -> KafkaResult<ReceivedRecord> {
        let deadline = Instant::now() + timeout;
        if record.topic.is_empty() {
            return Err(KafkaIoError::InvalidArgument(
                "topic must be a non-empty string".to_owned(),
            ));
        }
        let producer = self.producer()?;
        let exists = self.check_topic_exists(producer, &record.topic, deadline, timeout)?;
        let partition = match (record.partition, partition_key) {
            // A topic the brokers are about to create with their default partition count is
            // refused too: a key's partition depends on that count, which nobody chose.
            (None, Some(partition_key)) => {
                if !exists {
                    return Err(KafkaIoError::InvalidArgument(format!(
                        "cannot choose a partition for partition_key: topic {:?} does not exist",
                        record.topic
                    )));
                }
                let partition = self.partitions.partition_for(
                    producer.client(),
                    &record.topic,
                    partition_key,
                    deadline.saturating_duration_since(Instant::now()),
                )?;
                Some(partition.ok_or_else(|| {
                    KafkaIoError::InvalidArgument(
                        "cannot choose a partition for an empty partition_key".to_owned(),
                    )
                })?)
            }
            (partition, _) => partition,
        };
        let slot = Arc::new(DeliverySlot {
            outcome: Mutex::new(None),
            waiter: std::thread::current(),
        });
        let mut base = record.base_record(Arc::clone(&slot));
        if let Some(partition) = partition {
            base = base.partition(partition);
        }
        producer
            .send(base)
            .map_err(|(e, _)| self.error("produce", e, timeout))?;
        let delivered = self.watch.wait_until(deadline, || {
            slot.outcome
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
        });
        match delivered {
            Waited::Done(delivered) => delivered.map(|mut r| {
                r.topic = record.topic.as_str().into();
                r
            }),
            Waited::Refused(failure) => Err(failure.error("produce")),
            Waited::TimedOut => Err(self.timed_out("produce", timeout)),
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
        let deadline = Instant::now() + timeout;
        let cluster = self.list_topics_until("read_topic", Some(topic), deadline, timeout)?;
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
        let mut config = self.settings.for_plain_consumer().to_client_config();
        config
            .set("enable.partition.eof", "true")
            .set("enable.auto.commit", "false")
            .set("group.id", "ferrokafka-read-topic");
        let consumer: BaseConsumer<EndIsExpected> = oauth::create_client(
            &config,
            EndIsExpected {
                watch: Some(Arc::clone(&self.watch)),
                tokens: self.settings.token_refresh(),
            },
            "create consumer",
        )?;
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
        let mut names = TopicName::default();
        while !open.is_empty() && records.len() < max_records {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timed_out(&format!("read_topic({topic})"), timeout));
            }
            match consumer.poll(left.min(Duration::from_millis(100))) {
                None => {}
                Some(Ok(message)) => {
                    records.push(ReceivedRecord::from_message_named(&message, &mut names));
                }
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    open.remove(&p);
                }
                // A refused connection comes as an error event, whose description the context
                // took: that names the cause.
                Some(Err(e)) => {
                    return Err(match self.watch.failure() {
                        Some(failure) => failure.error("read_topic"),
                        None => self.error("read_topic", e, timeout),
                    });
                }
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
    use crate::config::settings_of;

    #[test]
    fn unknown_config_key_is_refused_with_its_name() {
        let settings = settings_of(&[("bootstrap.servers", "127.0.0.1:1"), ("no.such.key", "1")]);
        let err = Client::new(settings).unwrap_err();
        assert!(matches!(err, KafkaIoError::Config(_)), "{err:?}");
        assert!(err.to_string().contains("no.such.key"), "{err}");
    }

    #[test]
    fn refused_secret_values_are_named_but_never_shown() {
        for (key, value) in [("sasl.passwrd", "hunter2"), ("ssl.key.pem", "hunter2")] {
            let settings = settings_of(&[
                ("bootstrap.servers", "127.0.0.1:1"),
                // With TLS in use librdkafka parses the key and refuses one that is not PEM.
                ("security.protocol", "SSL"),
                (key, value),
            ]);
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
        let settings = settings_of(&[("bootstrap.servers", "127.0.0.1:1")]);
        let client = Client::new(settings).unwrap();
        let err = client
            .list_topics(None, Duration::from_millis(300))
            .unwrap_err();
        assert!(matches!(err, KafkaIoError::Timeout { .. }), "{err:?}");
    }
}
