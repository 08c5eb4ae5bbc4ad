//! `Client`, plus the typed metadata classes it returns.
//!
//! GIL: arguments are converted while attached; every network call runs through
//! [`run_detached`], so other Python threads run while librdkafka waits.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrokafka_kafka::{
    BrokerInfo, Client, ClusterInfo, KafkaIoError, NewTopicSpec, PartitionInfo, TopicInfo,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::blocking::{ForkGuard, TimeoutArg, run_detached};
use crate::convert::{
    self, CountArg, PartitionArg, ReplicationFactor, TimestampArg, TopicPartitions,
    outgoing_record, settings_from_dict,
};
use crate::engine_drops::ReleaseOnDrop;
use crate::errors::{NativeError, NativeResult, invalid_argument, wrong_type};
use crate::flat_record::frozen_record;
use crate::message::PyMessage;

frozen_record! {
    /// One broker of the cluster.
    #[derive(Debug)]
    "BrokerMetadata" PyBrokerMetadata {
        id: i32,
        host: String,
        port: i32,
    }
}

frozen_record! {
    /// One partition: its leader, replicas and in-sync replicas (broker ids).
    #[derive(Debug)]
    "PartitionMetadata" PyPartitionMetadata {
        id: i32,
        leader: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
    }
}

frozen_record! {
    /// One topic and its partitions, ordered by partition id.
    #[derive(Debug)]
    "TopicMetadata" PyTopicMetadata {
        name: String,
        partitions: Vec<Py<PyPartitionMetadata>>,
    }
}

frozen_record! {
    /// What one metadata request returned.
    ///
    /// Example:
    ///     >>> client.create_topics([NewTopic("orders", 3)])
    ///     ['orders']
    ///     >>> md = client.list_topics(timeout=5.0)
    ///     >>> len(md.topics["orders"].partitions)
    ///     3
    #[derive(Debug)]
    "ClusterMetadata" PyClusterMetadata {
        /// Id of the broker that answered.
        orig_broker_id: i32,
        brokers: Vec<Py<PyBrokerMetadata>>,
        /// Topics by name.
        topics: BTreeMap<String, Py<PyTopicMetadata>>,
    }
}

#[pymethods]
impl PyBrokerMetadata {
    fn __repr__(&self) -> String {
        format!(
            "BrokerMetadata(id={}, host={:?}, port={})",
            self.id, self.host, self.port
        )
    }
}

#[pymethods]
impl PyPartitionMetadata {
    fn __repr__(&self) -> String {
        format!(
            "PartitionMetadata(id={}, leader={}, replicas={:?}, isr={:?})",
            self.id, self.leader, self.replicas, self.isr
        )
    }
}

#[pymethods]
impl PyTopicMetadata {
    fn __repr__(&self) -> String {
        format!(
            "TopicMetadata(name={:?}, partitions={})",
            self.name,
            self.partitions.len()
        )
    }
}

#[pymethods]
impl PyClusterMetadata {
    fn __repr__(&self) -> String {
        format!(
            "ClusterMetadata(brokers={}, topics={})",
            self.brokers.len(),
            self.topics.len()
        )
    }
}

fn cluster_to_py(py: Python<'_>, cluster: ClusterInfo) -> PyResult<PyClusterMetadata> {
    let brokers = cluster
        .brokers
        .into_iter()
        .map(|BrokerInfo { id, host, port }| Py::new(py, PyBrokerMetadata { id, host, port }))
        .collect::<PyResult<_>>()?;
    let topics = cluster
        .topics
        .into_iter()
        .map(|TopicInfo { name, partitions }| {
            let partitions = partitions
                .into_iter()
                .map(
                    |PartitionInfo {
                         id,
                         leader,
                         replicas,
                         isr,
                     }| {
                        Py::new(
                            py,
                            PyPartitionMetadata {
                                id,
                                leader,
                                replicas,
                                isr,
                            },
                        )
                    },
                )
                .collect::<PyResult<_>>()?;
            let topic = Py::new(
                py,
                PyTopicMetadata {
                    name: name.clone(),
                    partitions,
                },
            )?;
            Ok((name, topic))
        })
        .collect::<PyResult<_>>()?;
    Ok(PyClusterMetadata {
        orig_broker_id: cluster.orig_broker_id,
        brokers,
        topics,
    })
}

/// Raises `ValueError` naming `name` (as `what`) unless Kafka accepts it as a topic name: the one
/// rule every topic given to ferrokafka is checked by (`ferrokafka-core/src/topic_name.rs`).
#[pyfunction]
#[pyo3(signature = (name, what = "topic"))]
pub fn check_topic_name(name: &str, what: &str) -> PyResult<()> {
    KafkaIoError::check_topic(what, name).map_err(NativeError::from)?;
    Ok(())
}

frozen_record! {
    /// A topic for :meth:`Client.create_topics`; -1 means the broker's default.
    ///
    /// Example:
    ///     >>> NewTopic("orders", num_partitions=3, config={"cleanup.policy": "compact"})
    ///     NewTopic(name="orders", num_partitions=3, replication_factor=-1)
    #[derive(Debug)]
    "NewTopic" PyNewTopic {
        name: String,
        num_partitions: i32,
        replication_factor: i32,
        config: BTreeMap<String, String>,
    }
}

#[pymethods]
impl PyNewTopic {
    #[new]
    #[pyo3(signature = (name, num_partitions=TopicPartitions(-1), replication_factor=ReplicationFactor(-1), config=None))]
    #[pyo3(text_signature = "(name, num_partitions=-1, replication_factor=-1, config=None)")]
    fn new(
        name: String,
        num_partitions: TopicPartitions,
        replication_factor: ReplicationFactor,
        config: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let (TopicPartitions(num_partitions), ReplicationFactor(replication_factor)) =
            (num_partitions, replication_factor);
        KafkaIoError::check_topic("topic name", &name).map_err(NativeError::from)?;
        if num_partitions == 0 || num_partitions < -1 {
            return Err(invalid_argument(format!(
                "num_partitions must be positive or -1 (broker default), got {num_partitions}"
            )));
        }
        if replication_factor == 0 || replication_factor < -1 {
            return Err(invalid_argument(format!(
                "replication_factor must be positive or -1 (broker default), got {replication_factor}"
            )));
        }
        Ok(PyNewTopic {
            name,
            num_partitions,
            replication_factor,
            config: config
                .map(convert::topic_config)
                .transpose()?
                .unwrap_or_default(),
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "NewTopic(name={:?}, num_partitions={}, replication_factor={})",
            self.name, self.num_partitions, self.replication_factor
        )
    }
}

/// A Kafka client (librdkafka, in Rust) for administration and simple synchronous I/O.
///
/// ``config`` is a librdkafka configuration dict, the same one confluent-kafka takes. Unknown
/// keys raise :class:`ferrokafka.ConfigError` naming the key. Every method releases the GIL while
/// it waits and can be interrupted with Ctrl-C. A client cannot be used in a forked child.
/// ``partition_key_hashing`` says how :meth:`produce` hashes a ``partition_key``:
/// ``"waterdrop"`` (default) as WaterDrop does, over as many leading UTF-8 bytes as the key has
/// characters, so Ruby and Python producers agree on non-ASCII keys; ``"bytes"`` over every
/// byte. Anything else raises ``ValueError``.
///
/// Example:
///     >>> client = Client({"bootstrap.servers": "127.0.0.1:9092"})
///     >>> client.create_topics([NewTopic("orders", 3)], exist_ok=True)
///     ['orders']
///     >>> client.produce("orders", b"paid", key="order-1").offset()
///     0
///     >>> [m.value() for m in client.read_topic("orders")]
///     [b'paid']
#[pyclass(name = "Client", module = "ferrokafka._native", frozen)]
#[derive(Debug)]
pub struct PyClient {
    inner: ReleaseOnDrop<Arc<Client>>,
    guard: ForkGuard,
}

#[pymethods]
impl PyClient {
    #[new]
    #[pyo3(signature = (config, *, partition_key_hashing="waterdrop"))]
    fn new(config: &Bound<'_, PyDict>, partition_key_hashing: &str) -> NativeResult<Self> {
        let hashing = convert::partition_key_hashing(partition_key_hashing)?;
        let settings = settings_from_dict(config)?;
        let client = Client::new(settings)?.with_partition_key_hashing(hashing);
        Ok(PyClient {
            inner: ReleaseOnDrop::new(Arc::new(client)),
            guard: ForkGuard::new("ferrokafka.Client"),
        })
    }

    /// Fetch cluster metadata, for one topic or all.
    ///
    /// Raises :class:`ferrokafka.KafkaTimeoutError` (also a ``TimeoutError``) when no broker
    /// answers within ``timeout`` seconds.
    #[pyo3(signature = (topic=None, timeout=TimeoutArg(10.0)))]
    #[pyo3(text_signature = "($self, topic=None, timeout=10.0)")]
    fn list_topics(
        &self,
        py: Python<'_>,
        topic: Option<String>,
        timeout: TimeoutArg,
    ) -> NativeResult<PyClusterMetadata> {
        self.guard.check()?;
        let timeout = timeout.duration()?;
        let inner = Arc::clone(&*self.inner);
        let cluster = run_detached(py, move || inner.list_topics(topic.as_deref(), timeout))??;
        Ok(cluster_to_py(py, cluster)?)
    }

    /// Create topics and return the names created (none for an empty list).
    ///
    /// A failure raises :class:`ferrokafka.KafkaError` with the topic and the code name (for
    /// example ``TOPIC_ALREADY_EXISTS``); with ``exist_ok=True`` existing topics are skipped. A
    /// name Kafka would refuse (see :func:`check_topic_name`) raises ``ValueError`` before
    /// anything is sent.
    #[pyo3(signature = (topics, timeout=TimeoutArg(30.0), exist_ok=false))]
    #[pyo3(text_signature = "($self, topics, timeout=30.0, exist_ok=False)")]
    fn create_topics(
        &self,
        py: Python<'_>,
        topics: &Bound<'_, PyAny>,
        timeout: TimeoutArg,
        exist_ok: bool,
    ) -> NativeResult<Vec<String>> {
        self.guard.check()?;
        let timeout = timeout.duration()?;
        convert::refuse_single_name(topics)?;
        let specs = topics
            .try_iter()
            .map_err(|_| {
                wrong_type(
                    "topics must be a list of NewTopic objects or str names",
                    topics,
                )
            })?
            .map(|t| {
                let t = t?;
                if let Ok(name) = t.cast::<PyString>() {
                    let spec = PyNewTopic::new(
                        name.to_str()?.to_owned(),
                        TopicPartitions(-1),
                        ReplicationFactor(-1),
                        None,
                    )?;
                    return Ok(spec_of(&spec));
                }
                let topic = t
                    .cast::<PyNewTopic>()
                    .map_err(|_| wrong_type("topics must be NewTopic objects or str names", &t))?;
                Ok(spec_of(topic.get()))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let inner = Arc::clone(&*self.inner);
        Ok(run_detached(py, move || {
            inner.create_topics(&specs, exist_ok, timeout)
        })??)
    }

    /// Delete topics (nothing for an empty list); an unknown topic raises
    /// :class:`ferrokafka.KafkaError`, a name Kafka would refuse ``ValueError``.
    #[pyo3(signature = (topics, timeout=TimeoutArg(30.0)))]
    #[pyo3(text_signature = "($self, topics, timeout=30.0)")]
    fn delete_topics(
        &self,
        py: Python<'_>,
        topics: &Bound<'_, PyAny>,
        timeout: TimeoutArg,
    ) -> NativeResult<()> {
        self.guard.check()?;
        let topics = convert::topic_names(topics)?;
        let timeout = timeout.duration()?;
        let inner = Arc::clone(&*self.inner);
        Ok(run_detached(py, move || {
            inner.delete_topics(&topics, timeout)
        })??)
    }

    /// Produce one record and wait for the broker's acknowledgement.
    ///
    /// ``str`` keys, values and header values are encoded as UTF-8; ``timestamp`` is in
    /// milliseconds since the epoch. Without ``partition``, ``partition_key`` chooses the
    /// partition as :class:`AsyncProducer` and WaterDrop do without being the record key: CRC32
    /// of as many leading UTF-8 bytes as the key has characters (WaterDrop's rule), or of every
    /// byte with ``Client(..., partition_key_hashing="bytes")``, modulo the partition count. An
    /// empty ``partition_key``, a topic Kafka would refuse (see :func:`check_topic_name`) and
    /// a header name with a NUL byte raise ``ValueError``. Returns the delivered record with
    /// its partition and offset.
    #[pyo3(signature = (topic, value=None, key=None, partition=None, headers=None, timestamp=None, timeout=TimeoutArg(10.0), partition_key=None))]
    #[pyo3(
        text_signature = "($self, topic, value=None, key=None, partition=None, headers=None, timestamp=None, timeout=10.0, partition_key=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn produce(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
        key: Option<&Bound<'_, PyAny>>,
        partition: Option<PartitionArg>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<TimestampArg>,
        timeout: TimeoutArg,
        partition_key: Option<&Bound<'_, PyAny>>,
    ) -> NativeResult<PyMessage> {
        self.guard.check()?;
        let timeout = timeout.duration()?;
        let record = outgoing_record(topic, value, key, partition, headers, timestamp)?;
        let partition_key = convert::partition_key(partition_key)?;
        let inner = Arc::clone(&*self.inner);
        let delivered = run_detached(py, move || {
            inner.produce(&record, partition_key.as_deref(), timeout)
        })??;
        Ok(delivered.into())
    }

    /// Read every partition from its start to its current end, by (partition, offset): at
    /// most ``max_messages``, the first ones in that order whichever partitions answer first
    /// (logged at INFO when the topic holds more).
    #[pyo3(signature = (topic, max_messages=CountArg(100_000), timeout=TimeoutArg(10.0)))]
    #[pyo3(text_signature = "($self, topic, max_messages=100000, timeout=10.0)")]
    fn read_topic(
        &self,
        py: Python<'_>,
        topic: String,
        max_messages: CountArg,
        timeout: TimeoutArg,
    ) -> NativeResult<Vec<Py<PyMessage>>> {
        self.guard.check()?;
        let max_messages = max_messages.0;
        let timeout = timeout.duration()?;
        let inner = Arc::clone(&*self.inner);
        let records = run_detached(py, move || inner.read_topic(&topic, max_messages, timeout))??;
        Ok(PyMessage::untracked_all(py, records)?)
    }

    fn __repr__(&self) -> String {
        format!("{:?}", *self.inner)
    }
}

fn spec_of(topic: &PyNewTopic) -> NewTopicSpec {
    NewTopicSpec {
        name: topic.name.clone(),
        num_partitions: topic.num_partitions,
        replication_factor: topic.replication_factor,
        config: topic.config.clone().into_iter().collect(),
    }
}
