//! What the scheduler tells: state reports to the states topics, and the rows of `status()`.

use std::time::Instant;

use ferrokafka_core::codec::json::encode_document;
use rdkafka::consumer::Consumer;
use rdkafka::producer::BaseRecord;

use super::SchedulerLoop;
use crate::daemon::{DaemonStatus, now_ms};
use crate::statistics::BrokerOffsets;

/// A partition's figures, for `status()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionStatus {
    /// Schedules topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Tracker state name: fresh, loading, loaded, stopped; or blocked (a record with a newer
    /// schema stopped the partition until the daemon is upgraded).
    pub state: &'static str,
    /// Schedules pending in memory (with payload) and beyond the horizon.
    pub pending: usize,
    /// Schedules dispatched by this daemon since it started (over every assignment of
    /// the partition).
    pub dispatched: u64,
    /// Records skipped as undecodable.
    pub skipped: u64,
    /// Schedules whose target was refused for good (dead-lettered when a topic is set).
    pub failed: u64,
    /// Records applied.
    pub applied: u64,
    /// The partition's offsets from the group consumer's latest statistics; `None` before
    /// the first.
    pub broker: Option<BrokerOffsets>,
}

impl SchedulerLoop {
    /// Sends the state report of every partition whose interval passed (or all, when `force`).
    pub(super) fn report_states(&mut self, force: bool) {
        let now = Instant::now();
        let interval = self.options.state_interval;
        let postfix = self.options.states_postfix.clone();
        for ((topic, partition), run) in &mut self.runs {
            let due = force
                || run
                    .last_report
                    .is_none_or(|last| now.duration_since(last) >= interval);
            if !due {
                continue;
            }
            run.last_report = Some(now);
            let report = run.tracker.state_report(now_ms());
            let payload = match encode_document(&report, 6) {
                Ok(payload) => payload,
                Err(e) => {
                    log::error!("state report of {topic}-{partition} is invalid, not sent: {e}");
                    continue;
                }
            };
            let states_topic = format!("{topic}{postfix}");
            let key = format!("{}_state", report.state.as_str());
            let record = BaseRecord::to(&states_topic)
                .partition(*partition)
                .key(key.as_bytes())
                .payload(&payload)
                .headers(
                    rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
                        key: "zlib",
                        value: Some("true"),
                    }),
                );
            match self.reporter.send(record) {
                Err((e, _)) => {
                    let why = e.to_string();
                    if run.state_report_failing.as_deref() == Some(why.as_str()) {
                        log::debug!("state report for {states_topic}-{partition} not sent: {why}");
                    } else {
                        let hint = if e.rdkafka_error_code()
                            == Some(rdkafka::types::RDKafkaErrorCode::UnknownPartition)
                        {
                            format!("; {states_topic} needs as many partitions as {topic}")
                        } else {
                            String::new()
                        };
                        log::warn!(
                            "state report for {states_topic}-{partition} not sent: {why}{hint} \
                             (said once while it lasts)"
                        );
                        run.state_report_failing = Some(why);
                    }
                }
                Ok(()) => {
                    if run.state_report_failing.take().is_some() {
                        log::info!("state reports for {states_topic}-{partition} are sent again");
                    }
                }
            }
        }
    }

    pub(super) fn status(&self) -> DaemonStatus<PartitionStatus> {
        let context = self.consumer.context();
        let rows = self
            .runs
            .iter()
            .map(|((topic, partition), run)| {
                let report = run.tracker.state_report(now_ms());
                PartitionStatus {
                    topic: topic.clone(),
                    partition: *partition,
                    state: if run.blocked.is_some() {
                        "blocked"
                    } else {
                        run.tracker.state().as_str()
                    },
                    pending: run.tracker.len(),
                    dispatched: report.dispatched,
                    skipped: report.skipped_records,
                    failed: report.failed,
                    applied: run.applied,
                    broker: context.offsets(topic, *partition),
                }
            })
            .collect();
        context.status(rows)
    }
}
