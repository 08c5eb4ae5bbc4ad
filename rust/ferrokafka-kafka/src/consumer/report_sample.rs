//! The consumer's part of a process report, built from its own snapshot; its caller adds only
//! what the handlers' side knows (the batches running now, the jobs started, handler errors
//! and handler time).

use ferrokafka_core::consumer_lag::ConsumerProgress;
use ferrokafka_core::tracking::{HandlerSample, PartitionSample, SourceSample, SourceTotals};

use super::ConcurrentConsumer;
use crate::report_sample::reported_partition;
use crate::statistics::BrokerOffsets;

impl ConcurrentConsumer {
    /// This consumer's sample for a process report: librdkafka's statistics of each assigned
    /// partition with the lags its own progress knows better, its counters, its group's state,
    /// and `handlers`.
    pub fn report_sample(&self, handlers: HandlerSample) -> SourceSample {
        let stats = self.stats();
        let partitions = stats
            .partitions
            .iter()
            .map(|p| {
                let progress = ConsumerProgress {
                    committed: p.committed,
                    first_received: p.first_received,
                    position: p.position,
                };
                PartitionSample::of_consumer(
                    p.topic.clone(),
                    reported_partition(p.partition),
                    p.paused,
                    p.broker.as_ref().map(BrokerOffsets::statistics),
                    progress,
                    self.read_committed,
                )
            })
            .collect();
        let counters = stats.totals;
        let totals = SourceTotals {
            jobs: Some(handlers.jobs_started),
            batches: counters.batches,
            messages: counters.handled,
            errors: handlers.errors,
            retries: counters.retries,
            dead: counters.dead_lettered,
            busy_seconds: handlers.busy_seconds,
        };
        let source = self.member.source(
            stats.group.as_ref(),
            stats.transfer_rates,
            partitions,
            totals,
        );
        SourceSample {
            poll_age: stats.poll_age.map_or(0.0, |age| age.as_secs_f64()),
            busy: handlers.jobs.len() as u64,
            enqueued: stats.partitions.iter().map(|p| p.queued as u64).sum(),
            jobs: handlers.jobs,
            ..source
        }
    }
}
