//! Process reports and error reports of the tracking reporter: zlib-compressed JSON documents,
//! field names following Karafka Web's consumer report schema where they mean the same thing.
//!
//! Schema (version [`REPORT_SCHEMA_VERSION`]):
//! - [`ProcessReport`]: `schema_version`, `type` (`"consumer"`), `dispatched_at`, `process`
//!   {`id` "host:pid:random", `status`, `started_at`, `memory_usage`/`memory_total_usage`/
//!   `memory_size` (KiB), `cpus`, `threads`, `cpu_usage` (1/5/15-minute load), `tags`},
//!   `stats` {`busy`, `enqueued`, `utilization`, `total` {`batches`, `messages`, `errors`,
//!   `retries`, `dead`}, `lag`, `lag_stored`}, `consumer_groups` {id -> {`id`, `topics` {name ->
//!   {`name`, `partitions` {id -> {`id`, `lag`, `lag_stored`, `committed_offset`,
//!   `stored_offset`, `hi_offset`, `lo_offset`, `fetch_state`, `poll_state`}}}}}}, `jobs` [...],
//!   `versions` {component -> version}.
//!   Karafka nests topics under subscription groups; ferrokafka has one subscription per consumer
//!   group, so topics sit directly under the group.
//! - [`ErrorReport`]: `schema_version`, `id` (UUID), `type`, `error_class`, `error_message` (at
//!   most [`MAX_ERROR_MESSAGE_CHARS`] characters: cut it with [`cut_error_message`]),
//!   `backtrace`, `details`, `occurred_at`, `process` {`id`, `tags`}.
//!
//! Invariants: `validate` accepts exactly the documents a dashboard can rely on: known schema
//! version, well-formed process id, map keys equal to the ids/names inside, finite non-negative
//! times. Unknown fields are ignored on decode (newer minor versions stay readable).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::CoreError;
use crate::codec::json::{Document, check_schema_version};

/// The report schema version this build writes and the newest it reads.
pub const REPORT_SCHEMA_VERSION: &str = "1.0.0";

/// Longest error message an error report may carry, in characters.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 10_000;

/// Lifecycle status of a reporting process (Karafka's process states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessStatus {
    /// Starting up.
    Initializing,
    /// Configured, not yet consuming.
    Initialized,
    /// Consuming.
    Running,
    /// Finishing work, taking no new work.
    Quieting,
    /// Quiet: idle, still connected.
    Quiet,
    /// Shutting down.
    Stopping,
    /// Shut down.
    Stopped,
}

impl ProcessStatus {
    /// The name used in reports, e.g. `"running"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initializing => "initializing",
            Self::Initialized => "initialized",
            Self::Running => "running",
            Self::Quieting => "quieting",
            Self::Quiet => "quiet",
            Self::Stopping => "stopping",
            Self::Stopped => "stopped",
        }
    }
}

/// The reporting process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// `"host:pid:random"`.
    pub id: String,
    /// Lifecycle status.
    pub status: ProcessStatus,
    /// Start time, Unix seconds.
    pub started_at: f64,
    /// Resident memory of this process, KiB.
    pub memory_usage: u64,
    /// Memory used by all processes on the host, KiB.
    pub memory_total_usage: u64,
    /// Total host memory, KiB.
    pub memory_size: u64,
    /// CPU count.
    pub cpus: u32,
    /// Thread count of the process.
    pub threads: u32,
    /// Load averages over 1, 5 and 15 minutes.
    pub cpu_usage: [f64; 3],
    /// Free-form tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// Processed/errored/retried counters since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Batches handled.
    pub batches: u64,
    /// Messages processed.
    pub messages: u64,
    /// Handler errors.
    pub errors: u64,
    /// Retries.
    pub retries: u64,
    /// Messages dead-lettered.
    pub dead: u64,
}

/// Process-wide processing statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// Workers busy now.
    pub busy: u32,
    /// Jobs waiting for a worker.
    pub enqueued: u32,
    /// Share of time spent processing over the last interval, 0..=100.
    pub utilization: f64,
    /// Counters since start.
    pub total: Totals,
    /// Total lag over all partitions.
    pub lag: i64,
    /// Total lag to the stored offsets.
    pub lag_stored: i64,
}

/// One assigned partition, from librdkafka statistics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionReport {
    /// Partition number (equals its map key).
    pub id: u32,
    /// Lag to the committed offset.
    pub lag: i64,
    /// Lag to the stored offset.
    pub lag_stored: i64,
    /// Last committed offset (-1: none).
    pub committed_offset: i64,
    /// Last stored offset (-1: none).
    pub stored_offset: i64,
    /// High watermark.
    pub hi_offset: i64,
    /// Low watermark.
    pub lo_offset: i64,
    /// librdkafka fetch state, e.g. `"active"`.
    pub fetch_state: String,
    /// `"active"` or `"paused"`.
    pub poll_state: String,
}

/// One subscribed topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicReport {
    /// Topic name (equals its map key).
    pub name: String,
    /// Assigned partitions by id.
    pub partitions: BTreeMap<u32, PartitionReport>,
}

/// One consumer group of the process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroupReport {
    /// Group id (equals its map key).
    pub id: String,
    /// Subscribed topics by name.
    pub topics: BTreeMap<String, TopicReport>,
}

/// A batch being processed now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    /// Consumer group.
    pub consumer_group: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// First offset of the batch.
    pub first_offset: i64,
    /// Last offset of the batch.
    pub last_offset: i64,
    /// Committed offset when the job started.
    pub committed_offset: i64,
    /// Messages in the batch.
    pub messages: u64,
    /// Job kind, e.g. `"consume"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Last update, Unix seconds.
    pub updated_at: f64,
}

/// A periodic process report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessReport {
    /// Schema version, `"1.0.0"`.
    pub schema_version: String,
    /// Report kind, `"consumer"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// When the report was made, Unix seconds.
    pub dispatched_at: f64,
    /// The process.
    pub process: ProcessInfo,
    /// Processing statistics.
    pub stats: ProcessStats,
    /// Consumer groups by id.
    pub consumer_groups: BTreeMap<String, ConsumerGroupReport>,
    /// Running jobs.
    #[serde(default)]
    pub jobs: Vec<JobReport>,
    /// Software versions by component (`python`, `ferrokafka`, `librdkafka`, ...).
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
}

/// The process an error happened in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorProcess {
    /// `"host:pid:random"`.
    pub id: String,
    /// Free-form tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// One error, reported once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorReport {
    /// Schema version, `"1.0.0"`.
    pub schema_version: String,
    /// Unique id (UUID).
    pub id: String,
    /// Where it happened, e.g. `"consumer.consume.error"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Exception class.
    pub error_class: String,
    /// Message, at most [`MAX_ERROR_MESSAGE_CHARS`] characters.
    pub error_message: String,
    /// Backtrace text.
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

fn require_key_matches(field: String, key: &str, inner: &str) -> Result<(), CoreError> {
    if key != inner {
        return Err(CoreError::invalid_field(
            field,
            format!("map key {key:?} differs from the value's own {inner:?}"),
        ));
    }
    Ok(())
}

/// Checks `"host:pid:random"`: non-empty host and random part, decimal pid.
fn validate_process_id(field: &str, id: &str) -> Result<(), CoreError> {
    let mut parts = id.split(':');
    let well_formed = matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (Some(host), Some(pid), Some(random), None)
            if !host.is_empty()
                && !random.is_empty()
                && !pid.is_empty()
                && pid.bytes().all(|b| b.is_ascii_digit())
    );
    if !well_formed {
        return Err(CoreError::invalid_field(
            field,
            format!("expected \"host:pid:random\", got {id:?}"),
        ));
    }
    Ok(())
}

impl Document for ProcessReport {
    const NAME: &'static str = "process report";

    fn validate(&self) -> Result<(), CoreError> {
        check_schema_version(
            "process report schema",
            "schema_version",
            &self.schema_version,
            REPORT_SCHEMA_VERSION,
        )?;
        if self.kind != "consumer" {
            return Err(CoreError::invalid_field("type", "must be \"consumer\""));
        }
        require_time("dispatched_at", self.dispatched_at)?;
        validate_process_id("process.id", &self.process.id)?;
        require_time("process.started_at", self.process.started_at)?;
        if !self.process.cpu_usage.iter().all(|load| load.is_finite()) {
            return Err(CoreError::invalid_field(
                "process.cpu_usage",
                "must be finite",
            ));
        }
        if !(0.0..=100.0).contains(&self.stats.utilization) {
            return Err(CoreError::invalid_field(
                "stats.utilization",
                "must be within 0..=100",
            ));
        }
        for (group_id, group) in &self.consumer_groups {
            let group_path = format!("consumer_groups.{group_id}");
            require_text(&group_path, group_id)?;
            require_key_matches(format!("{group_path}.id"), group_id, &group.id)?;
            for (topic_name, topic) in &group.topics {
                let topic_path = format!("{group_path}.topics.{topic_name}");
                require_text(&topic_path, topic_name)?;
                require_key_matches(format!("{topic_path}.name"), topic_name, &topic.name)?;
                for (partition_id, partition) in &topic.partitions {
                    if *partition_id != partition.id {
                        return Err(CoreError::invalid_field(
                            format!("{topic_path}.partitions.{partition_id}.id"),
                            format!("differs from its map key ({})", partition.id),
                        ));
                    }
                }
            }
        }
        for (i, job) in self.jobs.iter().enumerate() {
            require_text(&format!("jobs[{i}].topic"), &job.topic)?;
            require_text(&format!("jobs[{i}].consumer_group"), &job.consumer_group)?;
            require_time(&format!("jobs[{i}].updated_at"), job.updated_at)?;
        }
        Ok(())
    }
}

impl Document for ErrorReport {
    const NAME: &'static str = "error report";

    fn validate(&self) -> Result<(), CoreError> {
        check_schema_version(
            "error report schema",
            "schema_version",
            &self.schema_version,
            REPORT_SCHEMA_VERSION,
        )?;
        require_text("id", &self.id)?;
        require_text("type", &self.kind)?;
        require_text("error_class", &self.error_class)?;
        if self.error_message.chars().count() > MAX_ERROR_MESSAGE_CHARS {
            return Err(CoreError::invalid_field(
                "error_message",
                format!("longer than {MAX_ERROR_MESSAGE_CHARS} characters (cut it first)"),
            ));
        }
        require_time("occurred_at", self.occurred_at)?;
        validate_process_id("process.id", &self.process.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::json::{decode_document, encode_document};

    /// A small, valid process report (also used by the fuzz tests' seed corpus).
    fn process_report() -> ProcessReport {
        let partition = PartitionReport {
            id: 0,
            lag: 3,
            lag_stored: 2,
            committed_offset: 10,
            stored_offset: 11,
            hi_offset: 13,
            lo_offset: 0,
            fetch_state: "active".into(),
            poll_state: "active".into(),
        };
        let topic = TopicReport {
            name: "orders".into(),
            partitions: BTreeMap::from([(0, partition)]),
        };
        ProcessReport {
            schema_version: REPORT_SCHEMA_VERSION.into(),
            kind: "consumer".into(),
            dispatched_at: 1_700_000_000.5,
            process: ProcessInfo {
                id: "host-1:4242:ab12cd".into(),
                status: ProcessStatus::Running,
                started_at: 1_699_000_000.0,
                memory_usage: 120_000,
                memory_total_usage: 8_000_000,
                memory_size: 16_000_000,
                cpus: 2,
                threads: 9,
                cpu_usage: [0.5, 0.4, 0.3],
                tags: vec!["web".into()],
            },
            stats: ProcessStats {
                busy: 1,
                enqueued: 0,
                utilization: 12.5,
                total: Totals {
                    batches: 5,
                    messages: 50,
                    errors: 1,
                    retries: 1,
                    dead: 0,
                },
                lag: 3,
                lag_stored: 2,
            },
            consumer_groups: BTreeMap::from([(
                "billing".into(),
                ConsumerGroupReport {
                    id: "billing".into(),
                    topics: BTreeMap::from([("orders".into(), topic)]),
                },
            )]),
            jobs: vec![],
            versions: BTreeMap::from([("ferrokafka".into(), "0.1.0".into())]),
        }
    }

    fn error_report(message: &str) -> ErrorReport {
        ErrorReport {
            schema_version: REPORT_SCHEMA_VERSION.into(),
            id: "0f6c1d2e-4b3a-4c5d-8e9f-001122334455".into(),
            kind: "consumer.consume.error".into(),
            error_class: "ValueError".into(),
            error_message: message.into(),
            backtrace: "line 1".into(),
            details: BTreeMap::from([("partition".into(), serde_json::json!(0))]),
            occurred_at: 1_700_000_000.0,
            process: ErrorProcess {
                id: "host-1:4242:ab12cd".into(),
                tags: vec![],
            },
        }
    }

    #[test]
    fn reports_round_trip() {
        let encoded = encode_document(&process_report(), 6).unwrap();
        assert_eq!(decode_document(&encoded, 1 << 20), Ok(process_report()));
        let encoded = encode_document(&error_report("boom"), 6).unwrap();
        assert_eq!(decode_document(&encoded, 1 << 20), Ok(error_report("boom")));
    }

    #[test]
    fn invalid_reports_never_encode() {
        let mut report = process_report();
        report.process.id = "host-1:pid:x".into();
        assert!(encode_document(&report, 6).is_err());
        let mut report = process_report();
        if let Some(group) = report.consumer_groups.get_mut("billing") {
            group.id = "other".into();
        }
        assert!(report.validate().is_err());
        let long = "é".repeat(MAX_ERROR_MESSAGE_CHARS + 1);
        assert!(error_report(&long).validate().is_err());
        let cut = cut_error_message(&long);
        assert_eq!(cut.chars().count(), MAX_ERROR_MESSAGE_CHARS);
        assert_eq!(error_report(&cut).validate(), Ok(()));
    }
}
