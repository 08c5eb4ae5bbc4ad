//! librdkafka's statistics as typed objects, for the concurrent consumer's `stats` and the
//! daemons' `status` and `statistics`: a partition's offsets, the consumer group's state, and
//! what a daemon's group consumer reports beyond its partitions.

use ferrokafka_kafka::{BrokerOffsets, DaemonStatus, GroupStatistics};
use pyo3::prelude::*;

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

flat_record! {
    /// A daemon's group consumer as of librdkafka's latest statistics.
    "DaemonStatistics" PyDaemonStatistics {
        /// Bytes per second received from the brokers between the latest two statistics.
        bytes_received: Option<u64>,
        /// Bytes per second sent to the brokers between the latest two statistics.
        bytes_sent: Option<u64>,
    }
    records {
        /// The group's state; None before the first statistics.
        group: PyGroupStatistics,
    }
}

impl From<BrokerOffsets> for PyBrokerOffsets {
    fn from(b: BrokerOffsets) -> Self {
        Self {
            lo_offset: b.lo_offset,
            hi_offset: b.hi_offset,
            ls_offset: b.ls_offset,
            committed_offset: b.committed_offset,
            stored_offset: b.stored_offset,
            next_offset: b.next_offset,
            fetch_state: b.fetch_state,
            eof_offset: b.eof_offset,
            partitions_cnt: b.partitions_cnt,
            lag: b.lag.value,
            lag_d: b.lag.delta,
            lag_stored: b.lag_stored.value,
            lag_stored_d: b.lag_stored.delta,
            committed_offset_fd: b.committed.frozen_ms,
            stored_offset_fd: b.stored.frozen_ms,
            hi_offset_fd: b.hi.frozen_ms,
            ls_offset_d: b.ls.delta,
            ls_offset_fd: b.ls.frozen_ms,
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

/// A partition's offsets as a Python object, None when unknown.
pub(crate) fn broker_offsets(
    py: Python<'_>,
    offsets: Option<BrokerOffsets>,
) -> PyResult<Option<Py<PyBrokerOffsets>>> {
    offsets
        .map(|b| Py::new(py, PyBrokerOffsets::from(b)))
        .transpose()
}

/// A consumer group's state as a Python object, None when unknown.
pub(crate) fn group_statistics(
    py: Python<'_>,
    group: Option<GroupStatistics>,
) -> PyResult<Option<Py<PyGroupStatistics>>> {
    group
        .map(|g| Py::new(py, PyGroupStatistics::from(g)))
        .transpose()
}

/// What a daemon's `statistics` returns: its status without the partitions' rows.
pub(crate) fn daemon_statistics<P>(
    py: Python<'_>,
    status: DaemonStatus<P>,
) -> PyResult<PyDaemonStatistics> {
    let (bytes_received, bytes_sent) = status.transfer_rates.unzip();
    Ok(PyDaemonStatistics {
        bytes_received,
        bytes_sent,
        group: group_statistics(py, status.group)?,
    })
}
