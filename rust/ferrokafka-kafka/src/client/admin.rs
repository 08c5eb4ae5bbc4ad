//! The [`Client`]'s topic administration (list, create, delete) and the cluster as it
//! describes it.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::admin_request::AdminRequest;
use super::{Client, RETRY_PAUSE};
use crate::connection_failure::Waited;
use crate::error::{KafkaIoError, KafkaResult};

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

impl Client {
    /// Makes an admin request (`request`) and waits for its answer until it comes, a connection
    /// is refused or `deadline` passes.
    pub(super) fn await_admin<T>(
        &self,
        operation: &str,
        request: impl FnOnce() -> rdkafka::error::KafkaResult<AdminRequest<T>>,
        deadline: Instant,
        timeout: Duration,
    ) -> KafkaResult<T> {
        self.producer()?;
        let request = request().map_err(|err| self.error(operation, err, timeout))?;
        match self.watch.wait_until(deadline, || request.outcome()) {
            Waited::Done(Ok(done)) => {
                self.watch.clear();
                Ok(done)
            }
            Waited::Done(Err(err)) => Err(self.error(operation, err, timeout)),
            Waited::Refused(failure) => Err(failure.error(operation)),
            Waited::TimedOut => Err(self.timed_out(operation, timeout)),
        }
    }

    /// Fetches cluster metadata, for one topic or for all of them.
    pub fn list_topics(&self, topic: Option<&str>, timeout: Duration) -> KafkaResult<ClusterInfo> {
        if let Some(topic) = topic {
            KafkaIoError::check_topic("topic", topic)?;
        }
        self.list_topics_until("list_topics", topic, Instant::now() + timeout, timeout)
    }

    /// [`Client::list_topics`] for `operation`, within a deadline; `timeout` is what errors
    /// report.
    pub(super) fn list_topics_until(
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
            KafkaIoError::check_topic("topic name", &spec.name)?;
            if let Some((key, value)) = spec
                .config
                .iter()
                .find(|(key, value)| key.contains('\0') || value.contains('\0'))
            {
                return Err(KafkaIoError::InvalidArgument(format!(
                    "topic {:?}: config {key:?} = {value:?} must not contain a NUL byte",
                    spec.name
                )));
            }
            if !seen.insert(spec.name.as_str()) {
                return Err(KafkaIoError::InvalidArgument(format!(
                    "topic {:?} is listed twice",
                    spec.name
                )));
            }
        }
        if specs.is_empty() {
            return Ok(Vec::new());
        }
        let results = self.await_admin(
            "create_topics",
            || self.admin.create_topics(specs, timeout),
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
        for name in names {
            KafkaIoError::check_topic("topic name", name)?;
        }
        if names.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let results = self.await_admin(
            "delete_topics",
            || self.admin.delete_topics(&names, timeout),
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
}
