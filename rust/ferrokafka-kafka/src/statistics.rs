//! librdkafka's statistics (`statistics.interval.ms`) as ferrokafka's process reports use them:
//! the consumer group's state, each partition's offsets with Karafka's decorations (the change
//! since the previous statistics and how long a figure has not changed), and the transfer rates
//! over every broker connection.
//!
//! One owner for every group consumer: the [`ConcurrentConsumer`](crate::ConcurrentConsumer)
//! keeps the partition figures in its per-assignment slots and the rest in a [`KeptStatistics`];
//! the daemons (scheduler, redelivery tracker) keep everything in the [`KeptStatistics`] of their
//! consumer's context.
//!
//! Threading: librdkafka's statistics reach the context's `stats` callback inside the
//! consumer's `poll`, on the thread that polls; readers take a copy under the lock.

use std::collections::HashMap;
use std::sync::Mutex;

use ferrokafka_core::tracking::{GroupSample, PartitionStatistics, Tracked, decorate};
use rdkafka::statistics::{Partition, Statistics};

use crate::locks::lock;

/// One partition's offsets as librdkafka's statistics report them; negative values are
/// librdkafka's "not known" (-1001).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrokerOffsets {
    /// Low watermark on the broker.
    pub lo_offset: i64,
    /// High watermark on the broker.
    pub hi_offset: i64,
    /// Last stable offset on the broker (the end a `read_committed` consumer can reach).
    pub ls_offset: i64,
    /// The last offset the broker confirmed committed for the group.
    pub committed_offset: i64,
    /// The offset librdkafka would commit next (its offset store).
    pub stored_offset: i64,
    /// The next offset librdkafka fetches (where a partition with no records yet starts).
    pub next_offset: i64,
    /// librdkafka's fetch state (`active`, `offset-query`, `stopped`, ...).
    pub fetch_state: String,
    /// Offset of the last partition EOF.
    pub eof_offset: i64,
    /// Partitions the topic has (librdkafka's topic statistics, without the internal -1).
    pub partitions_cnt: u64,
    /// Karafka Web's figures: each with its change since the previous statistics and how long
    /// it has not changed (Karafka's statistics decorator).
    pub lag: Tracked,
    /// `consumer_lag_stored`, tracked.
    pub lag_stored: Tracked,
    /// `committed_offset`, tracked.
    pub committed: Tracked,
    /// `stored_offset`, tracked.
    pub stored: Tracked,
    /// `hi_offset`, tracked.
    pub hi: Tracked,
    /// `ls_offset`, tracked.
    pub ls: Tracked,
    /// librdkafka's statistics time (`ts`, microseconds, monotonic).
    pub ts: i64,
}

impl BrokerOffsets {
    /// The figures a process report takes: each tracked figure's value, its change and how
    /// long it has not changed, as Karafka Web names them.
    pub fn statistics(&self) -> PartitionStatistics {
        PartitionStatistics {
            partitions_cnt: self.partitions_cnt,
            next_offset: self.next_offset,
            lag: self.lag.value,
            lag_d: self.lag.delta,
            lag_stored: self.lag_stored.value,
            lag_stored_d: self.lag_stored.delta,
            committed_offset: self.committed_offset,
            committed_offset_fd: self.committed.frozen_ms,
            stored_offset: self.stored_offset,
            stored_offset_fd: self.stored.frozen_ms,
            fetch_state: self.fetch_state.clone(),
            hi_offset: self.hi_offset,
            hi_offset_fd: self.hi.frozen_ms,
            lo_offset: self.lo_offset,
            eof_offset: self.eof_offset,
            ls_offset: self.ls_offset,
            ls_offset_d: self.ls.delta,
            ls_offset_fd: self.ls.frozen_ms,
        }
    }
}

/// One partition in librdkafka's statistics.
pub(crate) struct PartitionFigures<'a> {
    /// Topic name.
    pub(crate) topic: &'a str,
    /// Partition number.
    pub(crate) partition: i32,
    figures: &'a Partition,
    /// Partitions the topic has.
    partitions_cnt: u64,
    /// The statistics' time.
    ts: i64,
}

impl PartitionFigures<'_> {
    /// The partition's offsets, decorated against `before`: its figures in the previous
    /// statistics.
    pub(crate) fn after(&self, before: Option<&BrokerOffsets>) -> BrokerOffsets {
        let (partition, ts) = (self.figures, self.ts);
        let track =
            |old: Option<Tracked>, value: i64| decorate(old.zip(before.map(|b| b.ts)), value, ts);
        BrokerOffsets {
            lo_offset: partition.lo_offset,
            hi_offset: partition.hi_offset,
            ls_offset: partition.ls_offset,
            committed_offset: partition.committed_offset,
            stored_offset: partition.stored_offset,
            next_offset: partition.next_offset,
            fetch_state: partition.fetch_state.clone(),
            eof_offset: partition.eof_offset,
            partitions_cnt: self.partitions_cnt,
            lag: track(before.map(|b| b.lag), partition.consumer_lag),
            lag_stored: track(before.map(|b| b.lag_stored), partition.consumer_lag_stored),
            committed: track(before.map(|b| b.committed), partition.committed_offset),
            stored: track(before.map(|b| b.stored), partition.stored_offset),
            hi: track(before.map(|b| b.hi), partition.hi_offset),
            ls: track(before.map(|b| b.ls), partition.ls_offset),
            ts,
        }
    }
}

/// Every partition of every topic in `statistics`, librdkafka's internal partition -1 left out.
pub(crate) fn partitions(statistics: &Statistics) -> impl Iterator<Item = PartitionFigures<'_>> {
    statistics.topics.iter().flat_map(move |(topic, stats)| {
        let partitions_cnt = stats.partitions.keys().filter(|id| **id >= 0).count() as u64;
        stats
            .partitions
            .iter()
            .filter(|(id, _)| **id >= 0)
            .map(move |(id, figures)| PartitionFigures {
                topic,
                partition: *id,
                figures,
                partitions_cnt,
                ts: statistics.ts,
            })
    })
}

/// The consumer group's state from librdkafka's `cgrp` statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupStatistics {
    /// Group state (`up`, `wait-coord`, ...).
    pub state: String,
    /// Join state (`steady`, ...).
    pub join_state: String,
    /// Milliseconds in `state`.
    pub stateage: i64,
    /// Milliseconds since the last rebalance.
    pub rebalance_age: i64,
    /// Rebalances so far.
    pub rebalance_cnt: i64,
    /// Why the last rebalance happened.
    pub rebalance_reason: String,
}

impl GroupStatistics {
    /// The group's state as a process report takes it (a negative age or count, which
    /// librdkafka never gives, as 0).
    pub fn sample(&self) -> GroupSample {
        let count = |value: i64| u64::try_from(value).unwrap_or(0);
        GroupSample {
            state: self.state.clone(),
            join_state: self.join_state.clone(),
            stateage: count(self.stateage),
            rebalance_age: count(self.rebalance_age),
            rebalance_cnt: count(self.rebalance_cnt),
            rebalance_reason: self.rebalance_reason.clone(),
        }
    }

    /// The group's state in `statistics`; `None` for a client without a group.
    fn of(statistics: &Statistics) -> Option<Self> {
        statistics.cgrp.as_ref().map(|group| GroupStatistics {
            state: group.state.clone(),
            join_state: group.join_state.clone(),
            stateage: group.stateage,
            rebalance_age: group.rebalance_age,
            rebalance_cnt: group.rebalance_cnt,
            rebalance_reason: group.rebalance_reason.clone(),
        })
    }
}

/// The statistics of one consumer a report needs, as of the latest statistics: the group's
/// state, the transfer rates and, for a consumer that keeps them nowhere else, each partition's
/// figures.
#[derive(Debug, Default)]
pub(crate) struct KeptStatistics {
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    group: Option<GroupStatistics>,
    transfers: Transfers,
    /// By topic, then partition.
    partitions: HashMap<String, HashMap<i32, BrokerOffsets>>,
}

impl Kept {
    fn record_client(&mut self, statistics: &Statistics) {
        self.group = GroupStatistics::of(statistics);
        self.transfers.record(statistics);
    }
}

impl KeptStatistics {
    /// Keeps the group's state and the transfer rates of `statistics`.
    pub(crate) fn record_client(&self, statistics: &Statistics) {
        lock(&self.kept).record_client(statistics);
    }

    /// Keeps the group's state, the transfer rates and every partition's figures of
    /// `statistics`.
    pub(crate) fn record(&self, statistics: &Statistics) {
        let mut kept = lock(&self.kept);
        kept.record_client(statistics);
        for figures in partitions(statistics) {
            let topic = kept.partitions.entry(figures.topic.to_owned()).or_default();
            let next = figures.after(topic.get(&figures.partition));
            topic.insert(figures.partition, next);
        }
    }

    /// The group's state as of the latest statistics; `None` without a group or before the
    /// first statistics.
    pub(crate) fn group(&self) -> Option<GroupStatistics> {
        lock(&self.kept).group.clone()
    }

    /// A partition's figures as of the latest statistics that listed it (kept by
    /// [`KeptStatistics::record`]).
    pub(crate) fn partition(&self, topic: &str, partition: i32) -> Option<BrokerOffsets> {
        lock(&self.kept)
            .partitions
            .get(topic)?
            .get(&partition)
            .cloned()
    }

    /// Bytes per second received from and sent to the brokers between the latest two
    /// statistics; `None` before the second.
    pub(crate) fn transfer_rates(&self) -> Option<(u64, u64)> {
        lock(&self.kept).transfers.rates
    }
}

/// Byte counters of the latest two statistics, for the transfer rates (Karafka Web's
/// `bytes_received` and `bytes_sent`: per second, over every broker connection).
#[derive(Debug, Default)]
struct Transfers {
    /// `(ts µs, received, sent)` of the latest statistics.
    latest: Option<(i64, u64, u64)>,
    /// Bytes per second received and sent between the latest two.
    rates: Option<(u64, u64)>,
}

impl Transfers {
    fn record(&mut self, statistics: &Statistics) {
        let received = statistics.brokers.values().map(|b| b.rxbytes).sum::<u64>();
        let sent = statistics.brokers.values().map(|b| b.txbytes).sum::<u64>();
        if let Some((before, received_before, sent_before)) = self.latest {
            let seconds = (statistics.ts - before) as f64 / 1e6;
            if seconds > 0.0 {
                let rate = |now: u64, then: u64| (now.saturating_sub(then) as f64 / seconds) as u64;
                self.rates = Some((rate(received, received_before), rate(sent, sent_before)));
            }
        }
        self.latest = Some((statistics.ts, received, sent));
    }
}
