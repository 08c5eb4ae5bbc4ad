//! The report samples as Python objects: what a tracked component hands the `Reporter`
//! (`SourceSample`, with its `PartitionSample`s and `JobSample`s) and the process's own facts
//! (`ProcessFacts`). Each wraps the core's sample itself, so a sample crosses into the report
//! builder as it is, never as a dict parsed again. The engines build theirs in Rust
//! (`_RawConsumer.report_sample`, the daemons' `report_sample`); the constructors serve
//! components written in Python. Where a constructor takes librdkafka's figures as a dict
//! (`statistics`, `group_state`), a field the sample does not know is refused.

use ferrokafka_core::CoreError;
use ferrokafka_core::tracking::{
    GroupSample, JobSample, PartitionSample, PartitionStatistics, ProcessSample, SourceSample,
    SourceTotals,
};
use pyo3::prelude::*;
use serde::de::DeserializeOwned;

use crate::codec::json_of;
use crate::errors::NativeResult;

/// `value` (a dict) decoded into `T`; a CodecError naming `what` and the field otherwise.
pub(crate) fn sample_of<T: DeserializeOwned>(
    what: &str,
    value: &Bound<'_, PyAny>,
) -> NativeResult<T> {
    let mut nodes = 0;
    let json = json_of(value, &mut nodes).map_err(|err| err.into_err(what))?;
    serde_json::from_value(json).map_err(|err| {
        CoreError::InvalidField {
            field: what.to_owned(),
            reason: err.to_string(),
        }
        .into()
    })
}

/// One partition as a tracked component sees it.
#[pyclass(name = "PartitionSample", module = "ferrokafka._native", frozen)]
pub struct PyPartitionSample(pub(crate) PartitionSample);

#[pymethods]
impl PyPartitionSample {
    #[new]
    #[pyo3(signature = (topic, partition, lag=None, lag_stored=None, committed_offset=None, fetch_state=None, paused=false, statistics=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        topic: String,
        partition: u32,
        lag: Option<i64>,
        lag_stored: Option<i64>,
        committed_offset: Option<i64>,
        fetch_state: Option<String>,
        paused: bool,
        statistics: Option<&Bound<'_, PyAny>>,
    ) -> NativeResult<Self> {
        let statistics = statistics
            .map(|figures| sample_of::<PartitionStatistics>("statistics", figures))
            .transpose()?;
        Ok(Self(PartitionSample {
            topic,
            partition,
            lag,
            lag_stored,
            committed_offset,
            fetch_state,
            paused,
            statistics,
        }))
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.0)
    }
}

/// A batch a component's handler is running now.
#[pyclass(name = "JobSample", module = "ferrokafka._native", frozen)]
pub struct PyJobSample(pub(crate) JobSample);

#[pymethods]
impl PyJobSample {
    #[new]
    #[pyo3(signature = (handler, topic, partition, first_offset, last_offset, messages, started_at, last_timestamp_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        handler: String,
        topic: String,
        partition: u32,
        first_offset: i64,
        last_offset: i64,
        messages: u64,
        started_at: f64,
        last_timestamp_ms: Option<i64>,
    ) -> Self {
        Self(JobSample {
            handler,
            topic,
            partition,
            first_offset,
            last_offset,
            messages,
            started_at,
            last_timestamp_ms,
        })
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.0)
    }
}

/// The jobs of `jobs`, copied out of their Python objects.
pub(crate) fn jobs_of(jobs: &[PyRef<'_, PyJobSample>]) -> Vec<JobSample> {
    jobs.iter().map(|job| job.0.clone()).collect()
}

/// What one tracked component contributes to a report.
#[pyclass(name = "SourceSample", module = "ferrokafka._native", frozen)]
pub struct PySourceSample(pub(crate) SourceSample);

#[pymethods]
impl PySourceSample {
    #[new]
    #[pyo3(signature = (group, partitions=Vec::new(), jobs_total=None, batches=0, messages=0, errors=0, retries=0, dead=0, busy=0, enqueued=0, workers=1, listeners=1, busy_seconds=0.0, jobs=Vec::new(), subscription_group=None, instance_id=None, group_state=None, bytes_received=None, bytes_sent=None, poll_age=0.0, poll_interval=300_000))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        group: String,
        partitions: Vec<PyRef<'_, PyPartitionSample>>,
        jobs_total: Option<u64>,
        batches: u64,
        messages: u64,
        errors: u64,
        retries: u64,
        dead: u64,
        busy: u64,
        enqueued: u64,
        workers: u64,
        listeners: u64,
        busy_seconds: f64,
        jobs: Vec<PyRef<'_, PyJobSample>>,
        subscription_group: Option<String>,
        instance_id: Option<String>,
        group_state: Option<&Bound<'_, PyAny>>,
        bytes_received: Option<u64>,
        bytes_sent: Option<u64>,
        poll_age: f64,
        poll_interval: u64,
    ) -> NativeResult<Self> {
        let group_state = group_state
            .map(|state| sample_of::<GroupSample>("group_state", state))
            .transpose()?;
        Ok(Self(SourceSample {
            consumer_group: group,
            subscription_group,
            instance_id,
            group_state,
            poll_age,
            poll_interval,
            listeners,
            workers,
            busy,
            enqueued,
            totals: SourceTotals {
                jobs: jobs_total,
                batches,
                messages,
                errors,
                retries,
                dead,
                busy_seconds,
            },
            bytes_received,
            bytes_sent,
            partitions: partitions.iter().map(|p| p.0.clone()).collect(),
            jobs: jobs_of(&jobs),
        }))
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.0)
    }
}

/// The process's own facts for a report.
#[pyclass(name = "ProcessFacts", module = "ferrokafka._native", frozen)]
pub struct PyProcessFacts(pub(crate) ProcessSample);

/// `CPython 3.12.1`: the running interpreter as Karafka Web's `versions.ruby` shows it.
fn runtime(py: Python<'_>) -> PyResult<String> {
    let platform = py.import("platform")?;
    let name: String = platform.call_method0("python_implementation")?.extract()?;
    let version: String = platform.call_method0("python_version")?.extract()?;
    Ok(format!("{name} {version}"))
}

#[pymethods]
impl PyProcessFacts {
    #[new]
    #[pyo3(signature = (id, status, started_at, rss_kib, host_used_kib, memory_limit_kib, cpus, threads, load_average, tags, runtime=None, ferrokafka=None, librdkafka=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        id: String,
        status: String,
        started_at: f64,
        rss_kib: u64,
        host_used_kib: u64,
        memory_limit_kib: u64,
        cpus: u64,
        threads: u64,
        load_average: Option<[f64; 3]>,
        tags: Vec<String>,
        runtime: Option<String>,
        ferrokafka: Option<String>,
        librdkafka: Option<String>,
    ) -> PyResult<Self> {
        Ok(Self(ProcessSample {
            id,
            status,
            started_at,
            rss_kib,
            host_used_kib,
            memory_limit_kib,
            cpus,
            threads,
            load_average,
            tags,
            runtime: runtime.map_or_else(|| self::runtime(py), Ok)?,
            ferrokafka: ferrokafka.unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned()),
            librdkafka: librdkafka.unwrap_or_else(ferrokafka_kafka::librdkafka_version),
        }))
    }

    /// `"host:pid:random"`.
    #[getter]
    fn id(&self) -> &str {
        &self.0.id
    }

    /// The same facts with process status `status`.
    fn with_status(&self, status: String) -> Self {
        Self(ProcessSample {
            status,
            ..self.0.clone()
        })
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.0)
    }
}
