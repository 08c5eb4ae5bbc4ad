//! The [`Client`]'s synchronous produce: a producer made on first use, whose delivery reports are
//! routed to the call that waits for them, and the check that the topic exists.

use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};

use super::Client;
use crate::config::ClientRole;
use crate::connection_failure::{ConnectionWatch, Waited, watch_connection};
use crate::error::{KafkaIoError, KafkaResult};
use crate::oauth::{self, TokenRefresh, answer_token_refresh};
use crate::polled_producer::PolledProducer;
use crate::record::{OutgoingRecord, ReceivedRecord};

/// The broker setting that says whether a producer's metadata request creates a missing topic.
const AUTO_CREATE_TOPICS: &str = "auto.create.topics.enable";

/// Where a produced record landed.
type DeliveryOutcome = KafkaResult<ReceivedRecord>;

/// Where the delivery report of one `produce` call goes: the call waits on it.
pub(super) struct DeliverySlot {
    outcome: Mutex<Option<DeliveryOutcome>>,
    waiter: Thread,
}

/// Routes each delivery report to the slot of the call that produced the record.
pub(super) struct DeliveryRouter {
    watch: Arc<ConnectionWatch>,
    tokens: TokenRefresh,
}

impl ClientContext for DeliveryRouter {
    answer_token_refresh!(tokens);
    watch_connection!(watch);
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

impl Client {
    /// The producer, created on first use. The admin calls create it too: the admin client only
    /// logs a failed OAUTHBEARER token, while the producer's error event reaches the watch.
    pub(super) fn producer(&self) -> KafkaResult<&PolledProducer<DeliveryRouter>> {
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
        // Asked of the admin client, which never creates the topic it asks about: the
        // producer's own request would create it on brokers that create topics, and then a
        // `partition_key` would choose among a partition count nobody chose.
        let metadata = self.fetch_metadata(
            "produce",
            self.admin.inner(),
            Some(topic),
            deadline,
            timeout,
        )?;
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
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(entries) = self.await_admin(
            "produce",
            || self.admin.describe_broker(metadata.orig_broker_id(), left),
            deadline,
            left,
        ) else {
            return true;
        };
        let creates = entries
            .iter()
            .filter(|(name, _)| name == AUTO_CREATE_TOPICS)
            .all(|(_, value)| value.as_deref() != Some("false"));
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
        KafkaIoError::check_topic("topic", &record.topic)?;
        let producer = self.producer()?;
        let exists = self.check_topic_exists(&record.topic, deadline, timeout)?;
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
        producer.send(base).map_err(|(e, _)| {
            KafkaIoError::over_client_limit("produce", &e)
                .unwrap_or_else(|| self.error("produce", e, timeout))
        })?;
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
}
