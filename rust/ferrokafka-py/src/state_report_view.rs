//! A scheduler's state report as `ferrokafka status` reads it: the core decodes and checks the
//! document (`ferrokafka_core::codec::state`), this hands its fields to Python as attributes.

use std::collections::BTreeMap;

use ferrokafka_core::codec::state::StateReport;
use pyo3::prelude::*;

use crate::document_view::document_view;
use crate::flat_record::frozen_record;

frozen_record! {
    /// One scheduler state report (ferrokafka's counters 0 where an older tracker wrote none;
    /// `low`/`high` -1 where it reported no offsets).
    "StateReportView" PyStateReportView {
        schema_version: String,
        dispatched_at: f64,
        state: String,
        low: i64,
        high: i64,
        daily: BTreeMap<String, u64>,
        started_at: i64,
        reloads: u64,
        skipped_records: u64,
        dispatched: u64,
        failed: u64,
    }
}

document_view! {
    /// Decodes a zlib JSON scheduler state report into its view.
    view_state_report: StateReport => PyStateReportView, by state_view
}

fn state_view(_: Python<'_>, report: StateReport) -> PyResult<PyStateReportView> {
    Ok(PyStateReportView {
        schema_version: report.schema_version,
        dispatched_at: report.dispatched_at,
        state: report.state.as_str().to_owned(),
        low: report.offsets.low,
        high: report.offsets.high,
        daily: report.daily,
        started_at: report.started_at,
        reloads: report.reloads,
        skipped_records: report.skipped_records,
        dispatched: report.dispatched,
        failed: report.failed,
    })
}
