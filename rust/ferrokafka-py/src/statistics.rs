//! librdkafka's statistics as typed objects, for the concurrent consumer's `stats` and the
//! daemons' `status`: a partition's offsets and the consumer group's state.

use ferrokafka_kafka::{BrokerOffsets, GroupStatistics};

use crate::flat_record::flat_record;

flat_record! {
    /// One partition's offsets from librdkafka's latest statistics, negative when unknown, and
    /// Karafka Web's tracked figures (`_d`: change since the previous statistics, `_fd`:
    /// milliseconds unchanged).
    "BrokerOffsets" PyBrokerOffsets {
        lo_offset: i64,
        hi_offset: i64,
        ls_offset: i64,
        committed_offset: i64,
        stored_offset: i64,
        next_offset: i64,
        fetch_state: String,
        eof_offset: i64,
        partitions_cnt: u64,
        lag: i64,
        lag_d: i64,
        lag_stored: i64,
        lag_stored_d: i64,
        committed_offset_fd: u64,
        stored_offset_fd: u64,
        hi_offset_fd: u64,
        ls_offset_d: i64,
        ls_offset_fd: u64,
    }
}

flat_record! {
    /// The consumer group's state from librdkafka's `cgrp` statistics.
    "GroupStatistics" PyGroupStatistics {
        state: String,
        join_state: String,
        stateage: i64,
        rebalance_age: i64,
        rebalance_cnt: i64,
        rebalance_reason: String,
    }
}

impl From<BrokerOffsets> for PyBrokerOffsets {
    /// The figures under the names process reports use (`BrokerOffsets::statistics`).
    fn from(b: BrokerOffsets) -> Self {
        let s = b.statistics();
        Self {
            lo_offset: s.lo_offset,
            hi_offset: s.hi_offset,
            ls_offset: s.ls_offset,
            committed_offset: s.committed_offset,
            stored_offset: s.stored_offset,
            next_offset: s.next_offset,
            fetch_state: s.fetch_state,
            eof_offset: s.eof_offset,
            partitions_cnt: s.partitions_cnt,
            lag: s.lag,
            lag_d: s.lag_d,
            lag_stored: s.lag_stored,
            lag_stored_d: s.lag_stored_d,
            committed_offset_fd: s.committed_offset_fd,
            stored_offset_fd: s.stored_offset_fd,
            hi_offset_fd: s.hi_offset_fd,
            ls_offset_d: s.ls_offset_d,
            ls_offset_fd: s.ls_offset_fd,
        }
    }
}

impl From<GroupStatistics> for PyGroupStatistics {
    fn from(g: GroupStatistics) -> Self {
        Self {
            state: g.state,
            join_state: g.join_state,
            stateage: g.stateage,
            rebalance_age: g.rebalance_age,
            rebalance_cnt: g.rebalance_cnt,
            rebalance_reason: g.rebalance_reason,
        }
    }
}
