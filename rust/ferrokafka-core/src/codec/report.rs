//! Karafka Web's consumer reports and error reports, both ways: the documents a Karafka Web UI
//! reads from `karafka_consumers_reports` and `karafka_errors` (zlib-compressed JSON, key =
//! process id, header `zlib: true`), field for field as Karafka Web's sampler writes them.
//!
//! Schema (consumer report [`CONSUMER_SCHEMA_VERSION`], error report [`ERROR_SCHEMA_VERSION`]):
//! - [`ConsumerReport`]: `schema_version`, `type` (`"consumer"`), `dispatched_at`, `process`
//!   {`id` "host:pid:random", `started_at`, `status`, `execution_mode`, `listeners` {`active`,
//!   `standby`}, `workers`, `memory_usage`/`memory_total_usage`/`memory_size` (KiB), `cpus`,
//!   `threads`, `cpu_usage` (1/5/15-minute load), `tags`, `bytes_received`, `bytes_sent`},
//!   `versions` {`ruby`, `karafka`, `karafka_core`, `karafka_web`, `waterdrop`, `rdkafka`,
//!   `librdkafka`}, `stats` {`busy`, `enqueued`, `waiting`, `utilization`, `total` {`jobs`,
//!   `batches`, `messages`, `errors`, `retries`, `dead`}}, `consumer_groups` {id -> {`id`,
//!   `subscription_groups` {id -> {`id`, `instance_id` (false or text), `state` {`state`,
//!   `join_state`, `stateage`, `rebalance_age`, `rebalance_cnt`, `rebalance_reason`, `poll_age`,
//!   `poll_interval`}, `topics` {name -> {`name`, `partitions_cnt`, `partitions` {id ->
//!   [`PartitionReport`]}}}}}}}, `jobs` [[`JobReport`]].
//! - [`ErrorReport`]: `schema_version`, `id` (UUID), `type`, `error_class`, `error_message` (at
//!   most [`MAX_ERROR_MESSAGE_CHARS`] characters: cut it with [`cut_error_message`]),
//!   `backtrace`, `details`, `occurred_at`, `process` {`id`, `tags`}.
//!
//! Reading follows Karafka Web's processing: consumer schemas from [`OLDEST_CONSUMER_SCHEMA`]
//! (1.2.x named the process id `name` and counted `listeners` as one number) up to the current
//! one, error schemas from [`OLDEST_ERROR_SCHEMA`] (1.0.0 named the process id `name`, 1.2.0
//! added `id`); fields a schema did not have yet decode as `None` (or Karafka Web's migration
//! default, e.g. `poll_interval` 300 000 ms), unknown fields are ignored, and a report of a newer
//! schema decodes with what can be read ([`ConsumerReport::newer_schema`] tells). Writing is
//! stricter: [`crate::codec::report_rules`] checks every rule of Karafka Web's contracts first,
//! and a report given as JSON is written exactly as given or refused (see
//! [`crate::codec::json::encode_json_document`]): the read defaults never fill a written field.
//!
//! Invariants: a decoded report has a parseable schema version not older than the oldest read,
//! `type` `"consumer"`, a non-empty process id and a finite `dispatched_at`; an encoded one
//! breaks no Karafka Web contract rule.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::CoreError;
use crate::codec::json::{Document, compare_versions};
use crate::codec::partition_figures::with_partition_figures;
use crate::codec::report_rules;

/// The consumer report schema this build writes (Karafka Web's current sampler).
pub const CONSUMER_SCHEMA_VERSION: &str = "1.7.0";

/// The oldest consumer report schema read (the oldest Karafka Web's processing still migrates).
pub const OLDEST_CONSUMER_SCHEMA: &str = "1.2.0";

/// The error report schema this build writes.
pub const ERROR_SCHEMA_VERSION: &str = "1.2.0";

/// The oldest error report schema read.
pub const OLDEST_ERROR_SCHEMA: &str = "1.0.0";

/// Longest error message an error report may carry, in characters (Karafka Web cuts there too).
pub const MAX_ERROR_MESSAGE_CHARS: usize = 10_000;

/// `max.poll.interval.ms` Karafka Web assumes for reports older than 1.7.0.
pub const DEFAULT_POLL_INTERVAL_MS: u64 = 300_000;

/// Active and standby listeners (polling threads) of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Listeners {
    /// Listeners polling now.
    pub active: u64,
    /// Listeners waiting (multiplexing standby).
    pub standby: u64,
}

impl<'de> Deserialize<'de> for Listeners {
    /// Schema 1.2.1 wrote one count (all active); later ones `{active, standby}`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Count(u64),
            Split {
                #[serde(default)]
                active: u64,
                #[serde(default)]
                standby: u64,
            },
        }
        Ok(match Either::deserialize(deserializer)? {
            Either::Count(active) => Self { active, standby: 0 },
            Either::Split { active, standby } => Self { active, standby },
        })
    }
}

/// The reporting process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// `"host:pid:random"` (schema 1.2.x: `name`).
    #[serde(alias = "name")]
    pub id: String,
    /// Start time, Unix seconds.
    #[serde(default)]
    pub started_at: f64,
    /// Lifecycle status, one of Karafka's process states (`running`, `stopped`, ...).
    #[serde(default)]
    pub status: String,
    /// How the process runs consumers (`standalone`, `embedded`, `swarm`, ...; since 1.4.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_mode: Option<String>,
    /// Listener threads.
    #[serde(default)]
    pub listeners: Listeners,
    /// Worker threads that run handlers.
    #[serde(default)]
    pub workers: u64,
    /// Resident memory of this process, KiB.
    #[serde(default)]
    pub memory_usage: u64,
    /// Memory used by all processes on the host, KiB.
    #[serde(default)]
    pub memory_total_usage: u64,
    /// Total host (or container) memory, KiB.
    #[serde(default)]
    pub memory_size: u64,
    /// CPU count.
    #[serde(default)]
    pub cpus: u64,
    /// Thread count of the process.
    #[serde(default)]
    pub threads: u64,
    /// Load averages over 1, 5 and 15 minutes (`-1` each when unknown).
    #[serde(default = "unknown_load")]
    pub cpu_usage: [f64; 3],
    /// Free-form tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Bytes per second received from the brokers over the last minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_received: Option<u64>,
    /// Bytes per second sent to the brokers over the last minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_sent: Option<u64>,
}

fn unknown_load() -> [f64; 3] {
    [-1.0; 3]
}

/// Versions of the software the process runs, under Karafka Web's names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Versions {
    /// The language runtime.
    pub ruby: String,
    /// The consuming framework.
    pub karafka: String,
    /// The framework's core library.
    pub karafka_core: String,
    /// The reporter.
    pub karafka_web: String,
    /// The producer library.
    pub waterdrop: String,
    /// The librdkafka binding.
    pub rdkafka: String,
    /// librdkafka.
    pub librdkafka: String,
}

/// Counters since the last report (Karafka Web sums them over reports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Jobs run (since 1.4.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<u64>,
    /// Batches handled.
    #[serde(default)]
    pub batches: u64,
    /// Messages processed.
    #[serde(default)]
    pub messages: u64,
    /// Handler errors.
    #[serde(default)]
    pub errors: u64,
    /// Retries.
    #[serde(default)]
    pub retries: u64,
    /// Messages dead-lettered.
    #[serde(default)]
    pub dead: u64,
}

/// Process-wide processing statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// Jobs running now.
    #[serde(default)]
    pub busy: u64,
    /// Jobs waiting for a worker.
    #[serde(default)]
    pub enqueued: u64,
    /// Jobs waiting for something other than a worker.
    #[serde(default)]
    pub waiting: u64,
    /// Share of worker time spent in handlers over the last minute, percent.
    #[serde(default)]
    pub utilization: f64,
    /// Counters since the last report.
    #[serde(default)]
    pub total: Totals,
}

with_partition_figures! {
    /// One assigned partition, from librdkafka statistics (`_d`: change since the previous
    /// statistics, `_fd`: milliseconds the value has not changed; offsets `-1001` when unknown).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(default)]
    pub struct PartitionReport {
        /// Partition number (equals its map key).
        pub id: u32 = 0,
        ..position,
        /// `"active"` or `"paused"`.
        pub poll_state: String = String::new(),
        /// Seconds until a paused partition resumes (0 when active).
        pub poll_state_ch: u64 = 0,
        ..bounds,
        /// Whether the partition is consumed transactionally (since 1.4.1).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub transactional: Option<bool> = None,
    }
}

/// librdkafka's "offset not known".
pub const UNKNOWN_OFFSET: i64 = -1001;

/// One subscribed topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicReport {
    /// Topic name (equals its map key).
    pub name: String,
    /// Partitions the topic has (since 1.5.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions_cnt: Option<u64>,
    /// Assigned partitions by id.
    #[serde(default)]
    pub partitions: BTreeMap<u32, PartitionReport>,
}

/// A subscription group's consumer state, from librdkafka's `cgrp` statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupState {
    /// librdkafka group state (`up`, `wait-coord`, ...).
    #[serde(default)]
    pub state: String,
    /// librdkafka join state (`steady`, ...).
    #[serde(default)]
    pub join_state: String,
    /// Milliseconds in `state`.
    #[serde(default)]
    pub stateage: u64,
    /// Milliseconds since the last rebalance.
    #[serde(default)]
    pub rebalance_age: u64,
    /// Rebalances so far.
    #[serde(default)]
    pub rebalance_cnt: u64,
    /// Why the last rebalance happened.
    #[serde(default)]
    pub rebalance_reason: String,
    /// Seconds since the group's last poll.
    #[serde(default)]
    pub poll_age: f64,
    /// `max.poll.interval.ms` (since 1.7.0; Karafka Web assumes 300 000 before).
    #[serde(default = "default_poll_interval")]
    pub poll_interval: u64,
}

fn default_poll_interval() -> u64 {
    DEFAULT_POLL_INTERVAL_MS
}

/// One subscription group (one consumer instance) of a consumer group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubscriptionGroupReport {
    /// Subscription group id (equals its map key).
    pub id: String,
    /// `group.instance.id` of a static member; `None` written as `false` (since 1.6.0).
    #[serde(
        default,
        serialize_with = "write_instance_id",
        deserialize_with = "read_instance_id"
    )]
    pub instance_id: Option<String>,
    /// Group membership state.
    pub state: GroupState,
    /// Subscribed topics by name.
    #[serde(default)]
    pub topics: BTreeMap<String, TopicReport>,
}

fn write_instance_id<S: Serializer>(id: &Option<String>, out: S) -> Result<S::Ok, S::Error> {
    match id {
        Some(id) => out.serialize_str(id),
        None => out.serialize_bool(false),
    }
}

fn read_instance_id<'de, D: Deserializer<'de>>(input: D) -> Result<Option<String>, D::Error> {
    // Karafka Web writes `false` for a dynamic member; anything but text means none.
    Ok(match serde_json::Value::deserialize(input)? {
        serde_json::Value::String(id) => Some(id),
        _ => None,
    })
}

/// One consumer group of the process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerGroupReport {
    /// Group id (equals its map key).
    pub id: String,
    /// Subscription groups by id.
    #[serde(default)]
    pub subscription_groups: BTreeMap<String, SubscriptionGroupReport>,
}

/// A job running or waiting now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    /// Handler (consumer class) name.
    #[serde(default)]
    pub consumer: String,
    /// Consumer group.
    #[serde(default)]
    pub consumer_group: String,
    /// Last update, Unix seconds.
    #[serde(default)]
    pub updated_at: f64,
    /// Topic.
    #[serde(default)]
    pub topic: String,
    /// Partition.
    #[serde(default)]
    pub partition: u32,
    /// First offset of the batch (`-1001`: none).
    #[serde(default)]
    pub first_offset: i64,
    /// Last offset of the batch (`-1001`: none).
    #[serde(default)]
    pub last_offset: i64,
    /// Committed offset when the job started.
    #[serde(default)]
    pub committed_offset: i64,
    /// Messages in the batch.
    #[serde(default)]
    pub messages: u64,
    /// Job kind: `consume`, `revoked`, `shutdown`, `tick` or `eofed`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Free-form tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Milliseconds from the last message's timestamp to its processing (-1: unknown).
    #[serde(default)]
    pub consumption_lag: i64,
    /// Milliseconds from receiving the batch to processing it (-1: unknown).
    #[serde(default)]
    pub processing_lag: i64,
    /// `running` or `pending`.
    #[serde(default)]
    pub status: String,
}

/// A periodic consumer process report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerReport {
    /// Schema version.
    pub schema_version: String,
    /// Report kind, `"consumer"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// When the report was made, Unix seconds.
    pub dispatched_at: f64,
    /// The process.
    pub process: ProcessInfo,
    /// Software versions.
    #[serde(default)]
    pub versions: Versions,
    /// Processing statistics.
    #[serde(default = "empty_stats")]
    pub stats: ProcessStats,
    /// Consumer groups by id.
    #[serde(default)]
    pub consumer_groups: BTreeMap<String, ConsumerGroupReport>,
    /// Running and pending jobs.
    #[serde(default)]
    pub jobs: Vec<JobReport>,
}

fn empty_stats() -> ProcessStats {
    ProcessStats {
        busy: 0,
        enqueued: 0,
        waiting: 0,
        utilization: 0.0,
        total: Totals::default(),
    }
}

/// One assigned partition with where it sits in the report.
#[derive(Debug, Clone, Copy)]
pub struct PartitionPlace<'a> {
    /// Consumer group id.
    pub consumer_group: &'a str,
    /// Subscription group id.
    pub subscription_group: &'a str,
    /// Topic name.
    pub topic: &'a str,
    /// The partition's figures.
    pub partition: &'a PartitionReport,
}

impl ConsumerReport {
    /// True when the report's schema is newer than [`CONSUMER_SCHEMA_VERSION`]: it was read
    /// with what this build knows, fields it added are not shown.
    pub fn newer_schema(&self) -> bool {
        compare_versions(&self.schema_version, CONSUMER_SCHEMA_VERSION) == Some(Ordering::Greater)
    }

    /// Every assigned partition, ordered by consumer group, subscription group, topic and id.
    pub fn partitions(&self) -> impl Iterator<Item = PartitionPlace<'_>> {
        self.consumer_groups.values().flat_map(|group| {
            group
                .subscription_groups
                .values()
                .flat_map(move |subscription| {
                    subscription.topics.values().flat_map(move |topic| {
                        topic
                            .partitions
                            .values()
                            .map(move |partition| PartitionPlace {
                                consumer_group: &group.id,
                                subscription_group: &subscription.id,
                                topic: &topic.name,
                                partition,
                            })
                    })
                })
        })
    }

    /// Summed lag of the process as Karafka Web counts it ("hybrid": the stored lag where
    /// known, else the committed lag; unknown lags count 0).
    pub fn lag(&self) -> i64 {
        self.partitions()
            .map(|place| hybrid_lag(place.partition).max(0))
            .sum()
    }

    /// Summed lag to the committed offsets (unknown lags count 0).
    pub fn lag_committed(&self) -> i64 {
        self.partitions()
            .map(|place| place.partition.lag.max(0))
            .sum()
    }

    /// Summed lag to the stored offsets, Karafka Web's `lag_stored` (unknown lags count 0).
    pub fn lag_stored(&self) -> i64 {
        self.partitions()
            .map(|place| place.partition.lag_stored.max(0))
            .sum()
    }
}

/// A partition's lag as Karafka Web shows it: `lag_stored` unless unknown, else `lag`.
pub fn hybrid_lag(partition: &PartitionReport) -> i64 {
    if partition.lag_stored < 0 {
        partition.lag
    } else {
        partition.lag_stored
    }
}

/// The process an error happened in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorProcess {
    /// `"host:pid:random"` (schema 1.0.0: `name`).
    #[serde(alias = "name")]
    pub id: String,
    /// Free-form tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// One error, reported once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorReport {
    /// Schema version.
    pub schema_version: String,
    /// Unique id, a UUID (since 1.2.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Where it happened, e.g. `"consumer.consume.error"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Exception class.
    pub error_class: String,
    /// Message, at most [`MAX_ERROR_MESSAGE_CHARS`] characters.
    #[serde(default)]
    pub error_message: String,
    /// Backtrace text.
    #[serde(default)]
    pub backtrace: String,
    /// Context (topic, partition, offsets, ...).
    #[serde(default)]
    pub details: BTreeMap<String, serde_json::Value>,
    /// When it happened, Unix seconds.
    pub occurred_at: f64,
    /// The process.
    pub process: ErrorProcess,
}

/// The first [`MAX_ERROR_MESSAGE_CHARS`] characters of `message`.
pub fn cut_error_message(message: &str) -> String {
    match message.char_indices().nth(MAX_ERROR_MESSAGE_CHARS) {
        Some((end, _)) => message[..end].to_owned(),
        None => message.to_owned(),
    }
}

/// Checks that `version` is `major.minor.patch` and not older than `oldest`.
fn check_readable_version(
    what: &'static str,
    version: &str,
    oldest: &'static str,
) -> Result<(), CoreError> {
    match compare_versions(version, oldest) {
        None => Err(CoreError::invalid_field(
            "schema_version",
            format!("not a major.minor.patch version: {version:?}"),
        )),
        Some(Ordering::Less) => Err(CoreError::UnsupportedVersion {
            what,
            found: version.to_owned(),
            supported: oldest,
        }),
        Some(_) => Ok(()),
    }
}

fn require_text(field: &str, value: &str) -> Result<(), CoreError> {
    if value.is_empty() {
        return Err(CoreError::invalid_field(field, "must not be empty"));
    }
    Ok(())
}

fn require_time(field: &str, seconds: f64) -> Result<(), CoreError> {
    if !(seconds.is_finite() && seconds >= 0.0) {
        return Err(CoreError::invalid_field(
            field,
            "must be a finite, non-negative number of seconds",
        ));
    }
    Ok(())
}

/// The first broken rule as an error naming its field.
fn refuse_violations(violations: Vec<report_rules::Violation>) -> Result<(), CoreError> {
    match violations.into_iter().next() {
        None => Ok(()),
        Some(violation) => Err(CoreError::invalid_field(violation.path, violation.rule)),
    }
}

/// Refuses a written `schema_version` other than `current` (a missing or non-text one is left
/// to the contract rules).
fn require_written_version(json: &serde_json::Value, current: &str) -> Result<(), CoreError> {
    match json
        .get("schema_version")
        .and_then(serde_json::Value::as_str)
    {
        Some(version) if version != current => Err(CoreError::invalid_field(
            "schema_version",
            format!("this build writes {current}"),
        )),
        _ => Ok(()),
    }
}

impl Document for ConsumerReport {
    const NAME: &'static str = "consumer report";

    fn validate(&self) -> Result<(), CoreError> {
        check_readable_version(
            "consumer report schema",
            &self.schema_version,
            OLDEST_CONSUMER_SCHEMA,
        )?;
        if self.kind != "consumer" {
            return Err(CoreError::invalid_field("type", "must be \"consumer\""));
        }
        require_time("dispatched_at", self.dispatched_at)?;
        require_text("process.id", &self.process.id)
    }

    fn validate_written(json: &serde_json::Value) -> Result<(), CoreError> {
        require_written_version(json, CONSUMER_SCHEMA_VERSION)?;
        refuse_violations(report_rules::consumer_report_violations(json))
    }
}

impl Document for ErrorReport {
    const NAME: &'static str = "error report";

    /// Karafka Web's error contract makes the process's tags optional; they are written as `[]`.
    const FILLED_WHEN_MISSING: &'static [&'static str] = &["process.tags"];

    fn validate(&self) -> Result<(), CoreError> {
        check_readable_version(
            "error report schema",
            &self.schema_version,
            OLDEST_ERROR_SCHEMA,
        )?;
        require_text("type", &self.kind)?;
        require_time("occurred_at", self.occurred_at)?;
        require_text("process.id", &self.process.id)
    }

    fn validate_written(json: &serde_json::Value) -> Result<(), CoreError> {
        require_written_version(json, ERROR_SCHEMA_VERSION)?;
        let message = json
            .get("error_message")
            .and_then(serde_json::Value::as_str);
        if message.is_some_and(|message| message.chars().count() > MAX_ERROR_MESSAGE_CHARS) {
            return Err(CoreError::invalid_field(
                "error_message",
                format!("longer than {MAX_ERROR_MESSAGE_CHARS} characters (cut it first)"),
            ));
        }
        refuse_violations(report_rules::error_report_violations(json))
    }
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
