//! Karafka Web reports for Python: the report builder the `Reporter` hands its samples to
//! (`report_samples.rs`), the contract check, and the typed views `ferrokafka status` reads
//! reports into. The schema lives in the core (`ferrokafka_core::codec::report`); this only
//! converts.

use std::collections::BTreeMap;

use ferrokafka_core::codec::json::encode_document;
use ferrokafka_core::codec::report::{ConsumerReport, ErrorReport, hybrid_lag};
use ferrokafka_core::codec::report_rules::{
    Violation, consumer_report_violations, error_report_violations,
};
use ferrokafka_core::tracking::{ErrorSample, ReportBuilder, error_report};
use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::Value;

use crate::codec::{json_of, python_of};
use crate::document_view::document_view;
use crate::errors::NativeResult;
use crate::flat_record::frozen_record;
use crate::report_samples::{PyProcessFacts, PySourceSample, sample_of};

/// Builds the Reporter's consumer and error reports from its samples; remembers the counts of
/// the last report.
#[pyclass(name = "ReportBuilder", module = "ferrokafka._native")]
pub struct PyReportBuilder(ReportBuilder);

#[pymethods]
impl PyReportBuilder {
    #[new]
    fn new() -> Self {
        Self(ReportBuilder::new())
    }

    /// The consumer report at `now`, validated against Karafka Web's contracts and
    /// zlib-compressed; raises CodecError naming the first broken rule.
    #[pyo3(signature = (process, sources, now, level = 6))]
    fn consumer_report<'py>(
        &mut self,
        py: Python<'py>,
        process: PyRef<'py, PyProcessFacts>,
        sources: Vec<PyRef<'py, PySourceSample>>,
        now: f64,
        level: u32,
    ) -> NativeResult<Bound<'py, PyBytes>> {
        let sources = sources.iter().map(|source| source.0.clone()).collect();
        let report = self.0.consumer_report(process.0.clone(), sources, now);
        Ok(PyBytes::new(py, &encode_document(&report, level)?))
    }

    /// The error report of `sample`, validated and zlib-compressed.
    #[staticmethod]
    #[pyo3(signature = (sample, level = 6))]
    fn error_report<'py>(
        sample: &Bound<'py, PyAny>,
        level: u32,
    ) -> NativeResult<Bound<'py, PyBytes>> {
        let report = error_report(sample_of::<ErrorSample>("error", sample)?);
        Ok(PyBytes::new(sample.py(), &encode_document(&report, level)?))
    }
}

fn violations_of(
    value: &Bound<'_, PyAny>,
    rules: fn(&Value) -> Vec<Violation>,
) -> PyResult<Vec<(String, String)>> {
    let mut nodes = 0;
    let json = json_of(value, &mut nodes).map_err(|err| err.into_err("report"))?;
    Ok(rules(&json)
        .into_iter()
        .map(|violation| (violation.path, violation.rule.to_owned()))
        .collect())
}

/// `(field, rule)` of every rule of Karafka Web's consumer report contracts `report` (a dict as
/// decoded from JSON) breaks; empty when valid.
#[pyfunction]
pub fn consumer_report_violations_of(report: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    violations_of(report, consumer_report_violations)
}

/// `(field, rule)` of every rule of Karafka Web's error report contract `report` breaks.
#[pyfunction]
pub fn error_report_violations_of(report: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    violations_of(report, error_report_violations)
}

frozen_record! {
    /// One assigned partition of a consumer report.
    "ReportPartition" PyReportPartition {
        consumer_group: String,
        subscription_group: String,
        topic: String,
        partition: u32,
        lag: i64,
        lag_stored: i64,
        lag_hybrid: i64,
        committed_offset: i64,
        stored_offset: i64,
        hi_offset: i64,
        lo_offset: i64,
        ls_offset: i64,
        fetch_state: String,
        poll_state: String,
    }
}

frozen_record! {
    /// A consumer report of any schema read (Karafka Web's or ferrokafka's), as `ferrokafka
    /// status` shows it. `totals_*` count since the process's previous report.
    "ConsumerReportView" PyConsumerReportView {
        schema_version: String,
        newer_schema: bool,
        dispatched_at: f64,
        id: String,
        status: String,
        execution_mode: Option<String>,
        started_at: f64,
        memory_usage: u64,
        memory_total_usage: u64,
        memory_size: u64,
        cpus: u64,
        threads: u64,
        workers: u64,
        listeners_active: u64,
        listeners_standby: u64,
        cpu_usage: Vec<f64>,
        tags: Vec<String>,
        versions: BTreeMap<String, String>,
        busy: u64,
        enqueued: u64,
        waiting: u64,
        utilization: f64,
        lag: i64,
        lag_committed: i64,
        totals: BTreeMap<String, u64>,
        jobs: usize,
        partitions: Vec<Py<PyReportPartition>>,
    }
}

fn consumer_view(py: Python<'_>, report: ConsumerReport) -> PyResult<PyConsumerReportView> {
    let partitions = report
        .partitions()
        .map(|place| {
            let p = place.partition;
            Py::new(
                py,
                PyReportPartition {
                    consumer_group: place.consumer_group.to_owned(),
                    subscription_group: place.subscription_group.to_owned(),
                    topic: place.topic.to_owned(),
                    partition: p.id,
                    lag: p.lag,
                    lag_stored: p.lag_stored,
                    lag_hybrid: hybrid_lag(p),
                    committed_offset: p.committed_offset,
                    stored_offset: p.stored_offset,
                    hi_offset: p.hi_offset,
                    lo_offset: p.lo_offset,
                    ls_offset: p.ls_offset,
                    fetch_state: p.fetch_state.clone(),
                    poll_state: p.poll_state.clone(),
                },
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    let total = report.stats.total;
    let mut totals = BTreeMap::from([
        ("batches".to_owned(), total.batches),
        ("messages".to_owned(), total.messages),
        ("errors".to_owned(), total.errors),
        ("retries".to_owned(), total.retries),
        ("dead".to_owned(), total.dead),
    ]);
    if let Some(jobs) = total.jobs {
        totals.insert("jobs".to_owned(), jobs);
    }
    let versions = serde_json::to_value(&report.versions)
        .ok()
        .and_then(|value| serde_json::from_value(value).ok())
        .unwrap_or_default();
    Ok(PyConsumerReportView {
        newer_schema: report.newer_schema(),
        lag: report.lag(),
        lag_committed: report.lag_committed(),
        jobs: report.jobs.len(),
        schema_version: report.schema_version,
        dispatched_at: report.dispatched_at,
        id: report.process.id,
        status: report.process.status,
        execution_mode: report.process.execution_mode,
        started_at: report.process.started_at,
        memory_usage: report.process.memory_usage,
        memory_total_usage: report.process.memory_total_usage,
        memory_size: report.process.memory_size,
        cpus: report.process.cpus,
        threads: report.process.threads,
        workers: report.process.workers,
        listeners_active: report.process.listeners.active,
        listeners_standby: report.process.listeners.standby,
        cpu_usage: report.process.cpu_usage.to_vec(),
        tags: report.process.tags,
        versions,
        busy: report.stats.busy,
        enqueued: report.stats.enqueued,
        waiting: report.stats.waiting,
        utilization: report.stats.utilization,
        totals,
        partitions,
    })
}

document_view! {
    /// Decodes a zlib JSON consumer report of any schema read into its view.
    view_consumer_report: ConsumerReport => PyConsumerReportView, by consumer_view
}

frozen_record! {
    /// An error report of any schema read (1.0.0 and 1.1.0 have no `id`: `None`).
    "ErrorReportView" PyErrorReportView {
        schema_version: String,
        id: Option<String>,
        kind: String,
        error_class: String,
        error_message: String,
        backtrace: String,
        details: Py<PyAny>,
        occurred_at: f64,
        process_id: String,
        tags: Vec<String>,
    }
}

#[pymethods]
impl PyErrorReportView {
    // `details` is a dict the caller may put anything in, the view itself included.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.details)
    }
}

document_view! {
    /// Decodes a zlib JSON error report of any schema read into its view.
    view_error_report: ErrorReport => PyErrorReportView, by error_view
}

fn error_view(py: Python<'_>, report: ErrorReport) -> PyResult<PyErrorReportView> {
    let details = Value::Object(report.details.into_iter().collect());
    Ok(PyErrorReportView {
        details: python_of(py, &details)?.unbind(),
        schema_version: report.schema_version,
        id: report.id,
        kind: report.kind,
        error_class: report.error_class,
        error_message: report.error_message,
        backtrace: report.backtrace,
        occurred_at: report.occurred_at,
        process_id: report.process.id,
        tags: report.process.tags,
    })
}
