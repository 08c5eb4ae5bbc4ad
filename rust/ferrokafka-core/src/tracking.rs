//! Builds Karafka Web consumer reports and error reports from what a process samples: the
//! process's own facts ([`ProcessSample`]) and one [`SourceSample`] per tracked component (a
//! consumer, or a daemon's consumer), each a subscription group of its consumer group.
//!
//! Karafka Web sums `stats.total` over reports, so a report carries the counts since the
//! previous one: the builder keeps each source's cumulative counts and handler time from the
//! last report and sends the differences (`utilization` is the handler share of the worker
//! time since then). [`decorate`] turns two consecutive librdkafka statistics of a partition
//! into the `_d` (change) and `_fd` (unchanged for, ms) figures Karafka's statistics
//! decorator adds.
//!
//! Invariants: the builder never invents a figure: a partition figure librdkafka did not
//! give stays librdkafka's "unknown" (`-1001` offsets, `-1` lags); counts never go negative
//! (a restarted source counts from zero again).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::codec::partition_figures::with_partition_figures;
use crate::codec::report::{
    CONSUMER_SCHEMA_VERSION, ConsumerGroupReport, ConsumerReport, ERROR_SCHEMA_VERSION,
    ErrorProcess, ErrorReport, GroupState, JobReport, Listeners, PartitionReport, ProcessInfo,
    ProcessStats, SubscriptionGroupReport, TopicReport, Totals, UNKNOWN_OFFSET, Versions,
    cut_error_message,
};

/// The process's own facts, as a Python process knows them.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSample {
    /// `"host:pid:random"`.
    pub id: String,
    /// Karafka process state (`running`, `stopping`, `stopped`, ...).
    pub status: String,
    /// Start time, Unix seconds.
    pub started_at: f64,
    /// Resident memory of the process, KiB.
    pub rss_kib: u64,
    /// Memory in use on the host, KiB.
    pub host_used_kib: u64,
    /// Host memory, or the container's limit, KiB.
    pub memory_limit_kib: u64,
    /// CPUs.
    pub cpus: u64,
    /// OS threads of the process.
    pub threads: u64,
    /// 1/5/15-minute load average; `None` where the platform has none.
    pub load_average: Option<[f64; 3]>,
    /// Free-form tags.
    pub tags: Vec<String>,
    /// The language runtime, e.g. `CPython 3.12.1`.
    pub runtime: String,
    /// ferrokafka's version.
    pub ferrokafka: String,
    /// librdkafka's version.
    pub librdkafka: String,
}

impl ProcessSample {
    /// Karafka Web's `versions`: the runtime as `ruby`; the framework, its core, the reporter,
    /// the producer and the librdkafka binding are all ferrokafka.
    fn versions(&self) -> Versions {
        let ferrokafka = format!("ferrokafka {}", self.ferrokafka);
        Versions {
            ruby: self.runtime.clone(),
            karafka: ferrokafka.clone(),
            karafka_core: ferrokafka.clone(),
            karafka_web: ferrokafka.clone(),
            waterdrop: ferrokafka.clone(),
            rdkafka: ferrokafka,
            librdkafka: self.librdkafka.clone(),
        }
    }
}

/// A subscription group's librdkafka `cgrp` statistics (decoded where a source gives them
/// itself, refusing a field this does not know).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSample {
    /// Group state.
    pub state: String,
    /// Join state.
    pub join_state: String,
    /// Milliseconds in `state`.
    pub stateage: u64,
    /// Milliseconds since the last rebalance.
    pub rebalance_age: u64,
    /// Rebalances so far.
    pub rebalance_cnt: u64,
    /// Why the last rebalance happened.
    pub rebalance_reason: String,
}

with_partition_figures! {
    /// librdkafka's statistics of a partition as the engines keep them: Karafka Web's partition
    /// figures under their own names (`_d`: change since the previous statistics, `_fd`:
    /// milliseconds unchanged), the next fetch offset and the topic's partition count. A field
    /// not given is librdkafka's "unknown"; a field this does not know is refused, so a misspelt
    /// figure never silently reports as unknown.
    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    pub struct PartitionStatistics {
        /// Partitions the topic has (0: not known).
        pub partitions_cnt: u64 = 0,
        /// The next offset librdkafka fetches (where a partition with no records yet starts).
        pub next_offset: i64 = UNKNOWN_OFFSET,
        ..position,
        ..bounds,
    }
}

/// One partition of a source: librdkafka's statistics where the source has them, and what the
/// source knows better (a daemon's pending work as `lag`, its own fetch state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSample {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// Lag to the committed offset, overriding the statistics'.
    pub lag: Option<i64>,
    /// Lag to the stored offset, overriding the statistics'.
    pub lag_stored: Option<i64>,
    /// Committed offset, overriding the statistics'.
    pub committed_offset: Option<i64>,
    /// Fetch state, overriding the statistics'.
    pub fetch_state: Option<String>,
    /// Whether the source holds the partition paused.
    pub paused: bool,
    /// librdkafka's statistics of the partition, when the source has them.
    pub statistics: Option<PartitionStatistics>,
}

impl PartitionSample {
    /// The topic's partition count (when known) and Karafka Web's figures of the partition:
    /// the statistics, then what the source set; unknown stays librdkafka's unknown.
    pub fn into_report(self) -> (Option<u64>, PartitionReport) {
        let partitions_cnt = self.statistics.as_ref().map(|s| s.partitions_cnt);
        let s = self.statistics.unwrap_or_default();
        let mut fetch_state = self.fetch_state.unwrap_or(s.fetch_state);
        if fetch_state.is_empty() {
            // librdkafka's state of a partition it does not fetch.
            fetch_state = "none".into();
        }
        let figures = PartitionReport {
            id: self.partition,
            lag: self.lag.unwrap_or(s.lag),
            lag_d: s.lag_d,
            lag_stored: self.lag_stored.unwrap_or(s.lag_stored),
            lag_stored_d: s.lag_stored_d,
            committed_offset: self.committed_offset.unwrap_or(s.committed_offset),
            committed_offset_fd: s.committed_offset_fd,
            stored_offset: s.stored_offset,
            stored_offset_fd: s.stored_offset_fd,
            fetch_state,
            poll_state: if self.paused { "paused" } else { "active" }.into(),
            poll_state_ch: 0,
            hi_offset: s.hi_offset,
            hi_offset_fd: s.hi_offset_fd,
            lo_offset: s.lo_offset,
            eof_offset: s.eof_offset,
            ls_offset: s.ls_offset,
            ls_offset_d: s.ls_offset_d,
            ls_offset_fd: s.ls_offset_fd,
            transactional: Some(false),
        };
        (partitions_cnt, figures)
    }
}

/// A batch a source's handler is running now.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSample {
    /// The handler's name (Karafka Web shows its consumer class there).
    pub handler: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// First offset of the batch.
    pub first_offset: i64,
    /// Last offset of the batch.
    pub last_offset: i64,
    /// Records in the batch.
    pub messages: u64,
    /// When the handler started, Unix seconds.
    pub started_at: f64,
    /// The last record's timestamp, Unix ms, when it has one.
    pub last_timestamp_ms: Option<i64>,
}

impl JobSample {
    /// Karafka Web's job: running, `committed_offset` the offset before the batch (Karafka's
    /// seek offset - 1), `consumption_lag` from the last record's timestamp to the start,
    /// `processing_lag` unknown (-1: ferrokafka does not time the wait for a worker).
    fn into_report(self, consumer_group: &str) -> JobReport {
        let started_ms = (self.started_at * 1000.0) as i64;
        JobReport {
            consumer: self.handler,
            consumer_group: consumer_group.to_owned(),
            updated_at: self.started_at,
            topic: self.topic,
            partition: self.partition,
            first_offset: self.first_offset,
            last_offset: self.last_offset,
            committed_offset: self.first_offset - 1,
            messages: self.messages,
            kind: "consume".into(),
            tags: Vec::new(),
            consumption_lag: self
                .last_timestamp_ms
                .map_or(-1, |stamp| (started_ms - stamp).max(0)),
            processing_lag: -1,
            status: "running".into(),
        }
    }
}

/// Cumulative counts of a source since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SourceTotals {
    /// Jobs run (batches plus revocations and shutdowns); `None`: one per batch.
    pub jobs: Option<u64>,
    /// Batches handled.
    pub batches: u64,
    /// Messages handled.
    pub messages: u64,
    /// Handler errors.
    pub errors: u64,
    /// Retries.
    pub retries: u64,
    /// Dead-lettered messages.
    pub dead: u64,
    /// Seconds spent in handlers.
    pub busy_seconds: f64,
}

/// What only a consumer's handler side knows, for its part of a process report (the engine
/// knows the rest).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HandlerSample {
    /// Batches the handlers are running now.
    pub jobs: Vec<JobSample>,
    /// Jobs started since the consumer started.
    pub jobs_started: u64,
    /// Handler errors since the consumer started.
    pub errors: u64,
    /// Seconds spent in handlers since the consumer started.
    pub busy_seconds: f64,
}

/// A tracked component: one subscription group of a consumer group.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSample {
    /// Consumer group id.
    pub consumer_group: String,
    /// Subscription group id, unique in the process; `None`: `<group>_<n>`, n counting the
    /// sources of that group from 0 (Karafka's own ids end the same way).
    pub subscription_group: Option<String>,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// librdkafka group statistics; `None` for a group-less consumer.
    pub group_state: Option<GroupSample>,
    /// Seconds since the source last polled.
    pub poll_age: f64,
    /// `max.poll.interval.ms`.
    pub poll_interval: u64,
    /// Listener threads that poll now.
    pub listeners: u64,
    /// Worker threads that run handlers.
    pub workers: u64,
    /// Jobs running now.
    pub busy: u64,
    /// Records waiting for a worker.
    pub enqueued: u64,
    /// Counts since the source started.
    pub totals: SourceTotals,
    /// Bytes per second received from the brokers, when the source measures it.
    pub bytes_received: Option<u64>,
    /// Bytes per second sent to the brokers, when the source measures it.
    pub bytes_sent: Option<u64>,
    /// Assigned partitions.
    pub partitions: Vec<PartitionSample>,
    /// Jobs running now.
    pub jobs: Vec<JobSample>,
}

/// What an error report is made of; decoded from what the reporter gives, refusing a field it
/// does not know.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorSample {
    /// Unique id (a UUID).
    pub id: String,
    /// Where it happened, e.g. `consumer.consume.error`.
    pub kind: String,
    /// Exception class.
    pub error_class: String,
    /// Message (cut to the schema's limit here).
    pub error_message: String,
    /// Backtrace.
    pub backtrace: String,
    /// Context.
    pub details: BTreeMap<String, serde_json::Value>,
    /// Unix seconds.
    pub occurred_at: f64,
    /// Process id.
    pub process_id: String,
    /// Process tags.
    pub tags: Vec<String>,
}

/// Turns samples into reports; keeps what the previous report counted.
#[derive(Debug, Default)]
pub struct ReportBuilder {
    previous: BTreeMap<String, (SourceTotals, f64)>,
}

impl ReportBuilder {
    /// A builder whose first report counts everything since each source started.
    pub fn new() -> Self {
        Self::default()
    }

    /// The consumer report at `now` (Unix seconds); remembers the counts it sent.
    pub fn consumer_report(
        &mut self,
        process: ProcessSample,
        sources: Vec<SourceSample>,
        now: f64,
    ) -> ConsumerReport {
        let mut groups: BTreeMap<String, ConsumerGroupReport> = BTreeMap::new();
        let mut total = Totals {
            jobs: Some(0),
            ..Totals::default()
        };
        let (mut listeners, mut workers, mut busy, mut enqueued) = (0, 0, 0, 0);
        let (mut busy_seconds, mut worker_seconds) = (0.0, 0.0);
        let mut jobs = Vec::new();
        let mut seen = Vec::new();
        let mut per_group: BTreeMap<String, usize> = BTreeMap::new();
        let (mut bytes_received, mut bytes_sent) = (None::<u64>, None::<u64>);
        for mut source in sources {
            let index = per_group.entry(source.consumer_group.clone()).or_default();
            let subscription_id = source
                .subscription_group
                .take()
                .unwrap_or_else(|| format!("{}_{index}", source.consumer_group));
            *index += 1;
            let (before, since) = self
                .previous
                .get(&subscription_id)
                .copied()
                .unwrap_or((SourceTotals::default(), process.started_at));
            let now_totals = source.totals;
            let diff = |now: u64, then: u64| now.checked_sub(then).unwrap_or(now);
            let jobs_now = now_totals.jobs.unwrap_or(now_totals.batches);
            let jobs_before = before.jobs.unwrap_or(before.batches);
            total.jobs = total.jobs.map(|jobs| jobs + diff(jobs_now, jobs_before));
            total.batches += diff(now_totals.batches, before.batches);
            total.messages += diff(now_totals.messages, before.messages);
            total.errors += diff(now_totals.errors, before.errors);
            total.retries += diff(now_totals.retries, before.retries);
            total.dead += diff(now_totals.dead, before.dead);
            let handled = now_totals.busy_seconds - before.busy_seconds;
            busy_seconds += if handled >= 0.0 {
                handled
            } else {
                now_totals.busy_seconds
            };
            worker_seconds += (now - since).max(0.0) * source.workers as f64;
            if let Some(rate) = source.bytes_received {
                bytes_received = Some(bytes_received.unwrap_or(0) + rate);
            }
            if let Some(rate) = source.bytes_sent {
                bytes_sent = Some(bytes_sent.unwrap_or(0) + rate);
            }
            listeners += source.listeners;
            workers += source.workers;
            busy += source.busy;
            enqueued += source.enqueued;
            let group_id = &source.consumer_group;
            jobs.extend(source.jobs.into_iter().map(|job| job.into_report(group_id)));
            seen.push((subscription_id.clone(), (now_totals, now)));
            let group = groups
                .entry(source.consumer_group.clone())
                .or_insert_with(|| ConsumerGroupReport {
                    id: source.consumer_group.clone(),
                    subscription_groups: BTreeMap::new(),
                });
            let mut topics: BTreeMap<String, TopicReport> = BTreeMap::new();
            for sample in source.partitions {
                let topic = topics
                    .entry(sample.topic.clone())
                    .or_insert_with(|| TopicReport {
                        name: sample.topic.clone(),
                        partitions_cnt: Some(0),
                        partitions: BTreeMap::new(),
                    });
                let (known, figures) = sample.into_report();
                let counted = topic.partitions_cnt.unwrap_or(0);
                topic.partitions_cnt = Some(counted.max(known.unwrap_or(0)));
                topic.partitions.insert(figures.id, figures);
            }
            for topic in topics.values_mut() {
                // At least the partitions assigned here, when metadata did not say more.
                let assigned = topic.partitions.keys().map(|id| u64::from(*id) + 1).max();
                topic.partitions_cnt = topic.partitions_cnt.max(assigned);
            }
            let state = source.group_state.map_or_else(
                || GroupState {
                    // A consumer without a group has no librdkafka group state.
                    state: "none".into(),
                    join_state: "none".into(),
                    stateage: 0,
                    rebalance_age: 0,
                    rebalance_cnt: 0,
                    rebalance_reason: String::new(),
                    poll_age: 0.0,
                    poll_interval: 0,
                },
                |group| GroupState {
                    state: group.state,
                    join_state: group.join_state,
                    stateage: group.stateage,
                    rebalance_age: group.rebalance_age,
                    rebalance_cnt: group.rebalance_cnt,
                    rebalance_reason: group.rebalance_reason,
                    poll_age: 0.0,
                    poll_interval: 0,
                },
            );
            group.subscription_groups.insert(
                subscription_id.clone(),
                SubscriptionGroupReport {
                    id: subscription_id,
                    instance_id: source.instance_id,
                    state: GroupState {
                        poll_age: (source.poll_age.max(0.0) * 100.0).round() / 100.0,
                        poll_interval: source.poll_interval,
                        ..state
                    },
                    topics,
                },
            );
        }
        self.previous = seen.into_iter().collect();
        let versions = process.versions();
        let utilization = if worker_seconds > 0.0 {
            (100.0 * busy_seconds / worker_seconds).clamp(0.0, 100.0)
        } else {
            0.0
        };
        ConsumerReport {
            schema_version: CONSUMER_SCHEMA_VERSION.into(),
            kind: "consumer".into(),
            dispatched_at: now,
            process: ProcessInfo {
                id: process.id,
                started_at: process.started_at,
                status: process.status,
                // Consumers run inside the application's own process.
                execution_mode: Some("embedded".into()),
                listeners: Listeners {
                    active: listeners,
                    standby: 0,
                },
                workers,
                memory_usage: process.rss_kib,
                memory_total_usage: process.host_used_kib,
                memory_size: process.memory_limit_kib,
                cpus: process.cpus,
                threads: process.threads,
                // Karafka Web's "not known".
                cpu_usage: process.load_average.unwrap_or([-1.0; 3]),
                tags: process.tags,
                bytes_received,
                bytes_sent,
            },
            versions,
            stats: ProcessStats {
                busy,
                enqueued,
                waiting: 0,
                utilization: (utilization * 100.0).round() / 100.0,
                total,
            },
            consumer_groups: groups,
            jobs,
        }
    }
}

/// The error report of `sample` (message cut to the schema's limit).
pub fn error_report(sample: ErrorSample) -> ErrorReport {
    ErrorReport {
        schema_version: ERROR_SCHEMA_VERSION.into(),
        id: Some(sample.id),
        kind: sample.kind,
        error_class: sample.error_class,
        error_message: cut_error_message(&sample.error_message),
        backtrace: sample.backtrace,
        details: sample.details,
        occurred_at: sample.occurred_at,
        process: ErrorProcess {
            id: sample.process_id,
            tags: sample.tags,
        },
    }
}

/// A figure as two consecutive statistics saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tracked {
    /// The value now.
    pub value: i64,
    /// Change since the previous statistics (0 on the first).
    pub delta: i64,
    /// Milliseconds the value has not changed (0 on the first, and when it just changed).
    pub frozen_ms: u64,
}

/// The next [`Tracked`] of a figure: `previous` as of `previous_ts`, `value` as of `ts` (both
/// librdkafka statistics `ts`, microseconds).
pub fn decorate(previous: Option<(Tracked, i64)>, value: i64, ts: i64) -> Tracked {
    match previous {
        None => Tracked {
            value,
            delta: 0,
            frozen_ms: 0,
        },
        Some((before, before_ts)) if before.value == value => Tracked {
            value,
            delta: 0,
            frozen_ms: before.frozen_ms + u64::try_from((ts - before_ts) / 1000).unwrap_or(0),
        },
        Some((before, _)) => Tracked {
            value,
            delta: value - before.value,
            frozen_ms: 0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decorate_counts_changes_and_frozen_time() {
        let first = decorate(None, 10, 1_000_000);
        assert_eq!((first.delta, first.frozen_ms), (0, 0));
        let same = decorate(Some((first, 1_000_000)), 10, 3_500_000);
        assert_eq!((same.delta, same.frozen_ms), (0, 2500));
        let moved = decorate(Some((same, 3_500_000)), 14, 4_000_000);
        assert_eq!((moved.delta, moved.frozen_ms), (4, 0));
    }

    #[test]
    fn decoded_samples_refuse_a_field_they_do_not_know() {
        let statistics: PartitionStatistics =
            serde_json::from_value(serde_json::json!({"lag": 5, "partitions_cnt": 2})).unwrap();
        assert_eq!((statistics.lag, statistics.hi_offset), (5, -1001));
        let misspelt = serde_json::from_value::<PartitionStatistics>(
            serde_json::json!({"lag": 5, "hi_ofset": 9}),
        )
        .unwrap_err();
        assert!(misspelt.to_string().contains("hi_ofset"), "{misspelt}");
        let error = serde_json::json!({
            "id": "0f6c1d2e-4b3a-4c5d-8e9f-001122334455", "kind": "consumer.consume.error",
            "error_class": "ValueError", "error_message": "bad", "backtrace": "",
            "details": {}, "occurred_at": 1.5, "process_id": "host:1:ab", "tags": [],
        });
        serde_json::from_value::<ErrorSample>(error.clone()).unwrap();
        let mut unknown = error;
        unknown["severity"] = serde_json::json!("high");
        let refused = serde_json::from_value::<ErrorSample>(unknown).unwrap_err();
        assert!(refused.to_string().contains("severity"), "{refused}");
    }
}
