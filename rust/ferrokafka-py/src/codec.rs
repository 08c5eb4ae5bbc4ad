//! The core's codecs for Python: bounded zlib, the JSON reports, redelivery markers and the
//! Karafka scheduled-message envelope (`ferrokafka.codecs`).
//!
//! GIL: inputs are borrowed (`bytes`) or converted to owned Rust values while attached; the
//! compression work is detached only when it is large enough to be worth it ([`DETACH_ABOVE`]
//! input bytes), because re-attaching after a short call can wait a whole switch interval when
//! other threads want the GIL.

use std::time::{SystemTime, UNIX_EPOCH};

use ferrokafka_core::codec::envelope::{
    self, Envelope, ProxyMessage, ProxyRecord, ScheduleLimits, TargetAddress, TargetMessage,
    WATERDROP_MAX_PAYLOAD_SIZE,
};
use ferrokafka_core::codec::json::{Document, decode_document, encode_json_document};
use ferrokafka_core::codec::marker_codec;
use ferrokafka_core::codec::report::{ConsumerReport, ErrorReport};
use ferrokafka_core::codec::state::StateReport;
use ferrokafka_core::codec::zlib;
use ferrokafka_core::{CoreError, Marker, MessageId, MessagePayload};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

use crate::convert::{self, MaxInflated, MaxOutput, ZlibLevel, headers, optional_bytes};
use crate::errors::{
    NativeError, NativeResult, fractional_epoch, invalid_argument, malformed, missing_field,
    not_json, type_name, unknown_field, wrong_field_type, wrong_type,
};

/// Inputs larger than this are processed detached (about 50 µs of zlib work or more).
const DETACH_ABOVE: usize = 64 << 10;

/// The inflated size every decoder accepts unless its caller sets `max_inflated` or `max_output`
/// (64 MiB): a report or state document is a few KiB, so the limit only stops a zip bomb. Python
/// reads it as `ferrokafka.arrow.DEFAULT_MAX_INFLATED`; PyO3 shows it in `__text_signature__`
/// as `...`, as the stub does.
pub const DEFAULT_MAX_INFLATED: usize = 64 << 20;

pub(crate) fn maybe_detached<T: Send>(
    py: Python<'_>,
    large: bool,
    work: impl FnOnce() -> T + Send,
) -> T {
    if large { py.detach(work) } else { work() }
}

// PyO3 writes only literal defaults into `__text_signature__` (checked by stubtest): an
// argument type of `convert::int_argument!` spells its signature out, a shared constant shows
// as `...`.
#[pyfunction]
#[pyo3(signature = (data, level = ZlibLevel(6)), text_signature = "(data, level=6)")]
pub fn deflate<'py>(
    py: Python<'py>,
    data: &[u8],
    level: ZlibLevel,
) -> NativeResult<Bound<'py, PyBytes>> {
    let level = level.0;
    let packed = maybe_detached(py, data.len() > DETACH_ABOVE, || zlib::deflate(data, level))?;
    Ok(PyBytes::new(py, &packed))
}

#[pyfunction]
#[pyo3(signature = (data, max_output = MaxOutput(DEFAULT_MAX_INFLATED)))]
#[pyo3(text_signature = "(data, max_output=...)")]
pub fn inflate<'py>(
    py: Python<'py>,
    data: &[u8],
    max_output: MaxOutput,
) -> NativeResult<Bound<'py, PyBytes>> {
    let max_output = max_output.0;
    // Compressed input expands several times: a quarter of the threshold is as much work.
    let unpacked = maybe_detached(py, data.len() > DETACH_ABOVE / 4, || {
        zlib::inflate(data, max_output)
    })?;
    Ok(PyBytes::new(py, &unpacked))
}

// ---- JSON documents -------------------------------------------------------------------------

/// A conversion error with the path to the offending value, built on the way back up.
pub(crate) struct Located {
    path: Vec<String>,
    message: String,
    bad_type: bool,
}

impl Located {
    fn new(message: String, bad_type: bool) -> Self {
        Located {
            path: Vec::new(),
            message,
            bad_type,
        }
    }

    fn at(mut self, segment: String) -> Self {
        self.path.push(segment);
        self
    }

    pub(crate) fn into_err(self, root: &str) -> PyErr {
        let path: String = self.path.into_iter().rev().collect();
        not_json(format!("{root}{path}: {}", self.message), self.bad_type)
    }
}

/// Python `dict`/`list`/`tuple`/`str`/`int`/`float`/`bool`/`None` as JSON, counting the nodes
/// (a cheap estimate of the encoding work).
pub(crate) fn json_of(value: &Bound<'_, PyAny>, nodes: &mut usize) -> Result<Value, Located> {
    *nodes += 1;
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut map = Map::new();
        for (key, item) in dict.iter() {
            let key = if let Ok(text) = key.cast::<PyString>() {
                text.to_str()
                    .map_err(|err| Located::new(err.to_string(), false))?
                    .to_owned()
            } else if key.is_instance_of::<PyInt>() && !key.is_instance_of::<PyBool>() {
                key.to_string()
            } else {
                return Err(Located::new(
                    format!("dict keys must be str or int, got {}", type_name(&key)),
                    true,
                ));
            };
            let item = json_of(&item, nodes).map_err(|err| err.at(format!(".{key}")))?;
            map.insert(key, item);
        }
        Ok(Value::Object(map))
    } else if let Ok(text) = value.cast::<PyString>() {
        text.to_str()
            .map(|text| Value::String(text.to_owned()))
            .map_err(|err| Located::new(err.to_string(), false))
    } else if value.is_instance_of::<PyBool>() {
        Ok(Value::Bool(value.is_truthy().unwrap_or(false)))
    } else if value.is_instance_of::<PyInt>() {
        let number = value
            .extract::<i64>()
            .map(Number::from)
            .or_else(|_| value.extract::<u64>().map(Number::from))
            .map_err(|_| Located::new(format!("integer {value} is out of range"), false))?;
        Ok(Value::Number(number))
    } else if let Ok(float) = value.cast::<PyFloat>() {
        Number::from_f64(float.value())
            .map(Value::Number)
            .ok_or_else(|| Located::new(format!("{value} is not valid JSON"), false))
    } else if value.is_none() {
        Ok(Value::Null)
    } else if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items = value
            .try_iter()
            .map_err(|err| Located::new(err.to_string(), true))?;
        items
            .enumerate()
            .map(|(i, item)| {
                item.map_err(|err| Located::new(err.to_string(), true))
                    .and_then(|item| json_of(&item, nodes))
                    .map_err(|err| err.at(format!("[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array)
    } else {
        Err(Located::new(
            format!("{} is not a JSON type", type_name(value)),
            true,
        ))
    }
}

pub(crate) fn python_of<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
        Value::Number(number) => match (number.as_i64(), number.as_u64()) {
            (Some(int), _) => int.into_pyobject(py)?.into_any(),
            (None, Some(int)) => int.into_pyobject(py)?.into_any(),
            (None, None) => PyFloat::new(py, number.as_f64().unwrap_or(f64::NAN)).into_any(),
        },
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => PyList::new(
            py,
            items
                .iter()
                .map(|item| python_of(py, item))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(key, python_of(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// Roughly 64 KiB of JSON: above this many values, encoding is done detached.
const DETACH_ABOVE_NODES: usize = 4096;

fn encode<'py, T: Document + Send + Sync>(
    document: &Bound<'py, PyAny>,
    level: u32,
) -> NativeResult<Bound<'py, PyBytes>> {
    let py = document.py();
    let mut nodes = 0;
    let value = json_of(document, &mut nodes).map_err(|err| err.into_err(T::NAME))?;
    let packed = maybe_detached(py, nodes > DETACH_ABOVE_NODES, || {
        encode_json_document::<T>(&value, level)
    })?;
    Ok(PyBytes::new(py, &packed))
}

fn decode<'py, T: Document>(
    py: Python<'py>,
    data: &[u8],
    max_inflated: usize,
) -> NativeResult<Bound<'py, PyAny>> {
    let value = maybe_detached(py, data.len() > DETACH_ABOVE / 4, || {
        let document: T = decode_document(data, max_inflated)?;
        serde_json::to_value(&document).map_err(|err| CoreError::Corrupt {
            what: format!("{} JSON: {err}", T::NAME),
        })
    })?;
    Ok(python_of(py, &value)?)
}

/// One encode and one decode function per document type.
macro_rules! document_functions {
    ($document:ty, $encode:ident, $decode:ident) => {
        #[pyfunction]
        #[pyo3(signature = (report, level = ZlibLevel(6)), text_signature = "(report, level=6)")]
        pub fn $encode<'py>(
            report: &Bound<'py, PyAny>,
            level: ZlibLevel,
        ) -> NativeResult<Bound<'py, PyBytes>> {
            encode::<$document>(report, level.0)
        }

        #[pyfunction]
        #[pyo3(signature = (data, max_inflated = MaxInflated(DEFAULT_MAX_INFLATED)))]
        #[pyo3(text_signature = "(data, max_inflated=...)")]
        pub fn $decode<'py>(
            py: Python<'py>,
            data: &[u8],
            max_inflated: MaxInflated,
        ) -> NativeResult<Bound<'py, PyAny>> {
            decode::<$document>(py, data, max_inflated.0)
        }
    };
}

document_functions!(StateReport, encode_state_report, decode_state_report);
document_functions!(ConsumerReport, encode_process_report, decode_process_report);
document_functions!(ErrorReport, encode_error_report, decode_error_report);

// ---- redelivery markers ---------------------------------------------------------------------

/// A redelivery marker (START, KEEPALIVE or END) of the KMQ markers topic.
#[pyclass(name = "Marker", module = "ferrokafka._native", frozen, eq)]
#[derive(Debug, PartialEq)]
pub struct PyMarker(Marker);

impl PyMarker {
    fn message_id(&self) -> MessageId {
        match &self.0 {
            Marker::Start { message_id, .. }
            | Marker::KeepAlive { message_id, .. }
            | Marker::End { message_id } => *message_id,
        }
    }

    fn payload(&self) -> Option<&MessagePayload> {
        match &self.0 {
            Marker::Start { payload, .. } => Some(payload),
            _ => None,
        }
    }
}

fn optional_py_bytes<'py>(py: Python<'py>, data: Option<&Vec<u8>>) -> Option<Bound<'py, PyBytes>> {
    data.map(|data| PyBytes::new(py, data))
}

#[pymethods]
impl PyMarker {
    #[staticmethod]
    #[pyo3(signature = (partition, offset, deadline, key = None, value = None, headers = None))]
    fn start(
        partition: u32,
        offset: u64,
        deadline: u64,
        key: Option<&Bound<'_, PyAny>>,
        value: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        Ok(PyMarker(Marker::Start {
            message_id: MessageId { partition, offset },
            deadline,
            payload: MessagePayload {
                key: optional_bytes("key", key)?,
                value: optional_bytes("value", value)?,
                headers: crate::convert::headers(headers)?,
            },
        }))
    }

    #[staticmethod]
    fn keepalive(partition: u32, offset: u64, deadline: u64) -> Self {
        PyMarker(Marker::KeepAlive {
            message_id: MessageId { partition, offset },
            deadline,
        })
    }

    #[staticmethod]
    fn end(partition: u32, offset: u64) -> Self {
        PyMarker(Marker::End {
            message_id: MessageId { partition, offset },
        })
    }

    #[getter]
    fn kind(&self) -> &'static str {
        match self.0 {
            Marker::Start { .. } => "start",
            Marker::KeepAlive { .. } => "keepalive",
            Marker::End { .. } => "end",
        }
    }

    #[getter]
    fn partition(&self) -> u32 {
        self.message_id().partition
    }

    #[getter]
    fn offset(&self) -> u64 {
        self.message_id().offset
    }

    #[getter]
    fn deadline(&self) -> Option<u64> {
        match self.0 {
            Marker::Start { deadline, .. } | Marker::KeepAlive { deadline, .. } => Some(deadline),
            Marker::End { .. } => None,
        }
    }

    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        optional_py_bytes(py, self.payload()?.key.as_ref())
    }

    #[getter]
    fn value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        optional_py_bytes(py, self.payload()?.value.as_ref())
    }

    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> Vec<(String, Option<Bound<'py, PyBytes>>)> {
        self.payload().map_or_else(Vec::new, |payload| {
            payload
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), optional_py_bytes(py, value.as_ref())))
                .collect()
        })
    }

    fn __repr__(&self) -> String {
        let id = self.message_id();
        match &self.0 {
            Marker::Start {
                deadline, payload, ..
            } => format!(
                "Marker.start(partition={}, offset={}, deadline={deadline}, value_len={}, headers={})",
                id.partition,
                id.offset,
                payload.value.as_ref().map_or(0, Vec::len),
                payload.headers.len()
            ),
            Marker::KeepAlive { deadline, .. } => format!(
                "Marker.keepalive(partition={}, offset={}, deadline={deadline})",
                id.partition, id.offset
            ),
            Marker::End { .. } => {
                format!(
                    "Marker.end(partition={}, offset={})",
                    id.partition, id.offset
                )
            }
        }
    }
}

#[pyfunction]
pub fn encode_marker<'py>(py: Python<'py>, marker: &PyMarker) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &marker_codec::encode_marker(&marker.0))
}

#[pyfunction]
pub fn decode_marker(data: &[u8]) -> NativeResult<PyMarker> {
    Ok(PyMarker(marker_codec::decode_marker(data)?))
}

// ---- scheduled-message envelope -------------------------------------------------------------

/// A record to produce to the schedules topic (a schedule or a cancel).
#[pyclass(name = "ProxyMessage", module = "ferrokafka._native", frozen)]
#[derive(Debug)]
pub struct PyProxyMessage(ProxyMessage);

#[pymethods]
impl PyProxyMessage {
    #[getter]
    fn topic(&self) -> &str {
        &self.0.topic
    }

    #[getter]
    fn key(&self) -> &str {
        &self.0.key
    }

    #[getter]
    fn partition(&self) -> Option<i32> {
        self.0.partition
    }

    #[getter]
    fn partition_key(&self) -> Option<&str> {
        self.0.partition_key.as_deref()
    }

    #[getter]
    fn value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        optional_py_bytes(py, self.0.payload.as_ref())
    }

    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> Vec<(String, Bound<'py, PyBytes>)> {
        self.0
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), PyBytes::new(py, value)))
            .collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "ProxyMessage(topic={:?}, key={:?}, partition={:?}, value_len={}, headers={})",
            self.0.topic,
            self.0.key,
            self.0.partition,
            self.0.payload.as_ref().map_or(0, Vec::len),
            self.0.headers.len()
        )
    }
}

/// The meaning of a schedules-topic record, from its `schedule_*` headers.
#[pyclass(
    name = "ProxyRecord",
    module = "ferrokafka._native",
    frozen,
    get_all,
    eq
)]
#[derive(Debug, PartialEq)]
pub struct PyProxyRecord {
    kind: &'static str,
    epoch: Option<i64>,
    target_topic: Option<String>,
    target_partition: Option<i32>,
    target_key: Option<String>,
    target_partition_key: Option<String>,
    source_offset: Option<u64>,
}

impl From<ProxyRecord> for PyProxyRecord {
    fn from(record: ProxyRecord) -> Self {
        let empty = PyProxyRecord {
            kind: "cancel",
            epoch: None,
            target_topic: None,
            target_partition: None,
            target_key: None,
            target_partition_key: None,
            source_offset: None,
        };
        match record {
            ProxyRecord::Schedule { epoch_secs, target } => PyProxyRecord {
                kind: "schedule",
                epoch: Some(epoch_secs),
                target_topic: Some(target.topic),
                target_partition: target.partition,
                target_key: target.key,
                target_partition_key: target.partition_key,
                ..empty
            },
            ProxyRecord::Cancel => empty,
            ProxyRecord::Tombstone { source_offset } => PyProxyRecord {
                kind: "tombstone",
                source_offset,
                ..empty
            },
        }
    }
}

#[pymethods]
impl PyProxyRecord {
    fn __repr__(&self) -> String {
        fn field<T: std::fmt::Debug>(value: Option<&T>) -> String {
            value.map_or_else(|| "None".to_owned(), |value| format!("{value:?}"))
        }
        format!(
            "ProxyRecord(kind={:?}, epoch={}, target_topic={}, target_partition={}, \
             target_key={}, target_partition_key={}, source_offset={})",
            self.kind,
            field(self.epoch.as_ref()),
            field(self.target_topic.as_ref()),
            field(self.target_partition.as_ref()),
            field(self.target_key.as_ref()),
            field(self.target_partition_key.as_ref()),
            field(self.source_offset.as_ref())
        )
    }
}

/// Reads the Karafka-style dicts `message` and `envelope`, refusing unknown fields (typos).
struct Fields<'a, 'py> {
    dict: &'a Bound<'py, PyDict>,
    what: &'static str,
}

impl<'a, 'py> Fields<'a, 'py> {
    fn new(
        value: &'a Bound<'py, PyAny>,
        what: &'static str,
        allowed: &[&str],
    ) -> NativeResult<Self> {
        let dict = value
            .cast::<PyDict>()
            .map_err(|_| wrong_type(format!("{what} must be a dict"), value))?;
        if let Some(key) = convert::unknown_keys(dict, allowed).first() {
            return Err(unknown_field(what, key, allowed).into());
        }
        Ok(Fields { dict, what })
    }

    fn get<T: FromPyObjectOwned<'py>>(&self, name: &str) -> PyResult<Option<T>> {
        match self.dict.get_item(name)? {
            Some(value) if !value.is_none() => match value.extract::<T>() {
                Ok(value) => Ok(Some(value)),
                Err(err) => Err(wrong_field_type(self.what, name, err.into())),
            },
            _ => Ok(None),
        }
    }

    fn required(&self, name: &str) -> PyResult<String> {
        self.get(name)?
            .ok_or_else(|| missing_field(self.what, name))
    }
}

fn envelope_of(value: &Bound<'_, PyAny>) -> NativeResult<Envelope> {
    let fields = Fields::new(
        value,
        "envelope",
        &["topic", "key", "partition", "partition_key"],
    )?;
    Ok(Envelope {
        topic: fields.required("topic")?,
        key: fields.get("key")?,
        partition: fields.get("partition")?,
        partition_key: fields.get("partition_key")?,
    })
}

/// The wall clock in Unix seconds (the core takes time as an argument).
pub(crate) fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64)
}

#[pyfunction]
#[pyo3(signature = (message, epoch, envelope, *, max_payload_size = WATERDROP_MAX_PAYLOAD_SIZE))]
pub fn schedule_proxy(
    message: &Bound<'_, PyAny>,
    epoch: &Bound<'_, PyAny>,
    envelope: &Bound<'_, PyAny>,
    max_payload_size: usize,
) -> NativeResult<PyProxyMessage> {
    let py = message.py();
    let epoch = epoch_secs(epoch)?;
    let fields = Fields::new(
        message,
        "message",
        &[
            "topic",
            "payload",
            "key",
            "partition",
            "partition_key",
            "headers",
        ],
    )?;
    let target = TargetMessage {
        address: TargetAddress {
            topic: fields.required("topic")?,
            partition: fields.get("partition")?,
            key: fields.get("key")?,
            partition_key: fields.get("partition_key")?,
        },
        payload: optional_bytes(
            "message['payload']",
            fields.dict.get_item("payload")?.as_ref(),
        )?,
        headers: headers(fields.dict.get_item("headers")?.as_ref())?
            .into_iter()
            .map(|(name, value)| {
                value.map(|value| (name, value)).ok_or_else(|| {
                    malformed("scheduled message headers must be bytes or str, not None")
                })
            })
            .collect::<PyResult<_>>()?,
    };
    let envelope = envelope_of(envelope)?;
    // The default key's UUID needs entropy; the core is pure, so it comes from os.urandom.
    let mut random = [0u8; 16];
    if envelope.key.is_none() {
        let bytes = py.import("os")?.call_method1("urandom", (16,))?;
        random = bytes
            .extract::<&[u8]>()
            .map_err(PyErr::from)?
            .try_into()
            .map_err(|_| invalid_argument("os.urandom(16) did not return 16 bytes"))?;
    }
    let proxy = envelope::schedule_proxy(
        &target,
        epoch,
        &envelope,
        random,
        now_secs(),
        &ScheduleLimits {
            max_payload_bytes: max_payload_size,
            ..ScheduleLimits::default()
        },
    )
    .map_err(NativeError::Schedule)?;
    Ok(PyProxyMessage(proxy))
}

/// An epoch in whole seconds: an int, or a float with no fraction (Karafka calls `epoch.to_i`
/// on whatever numeric it gets; a fraction here is more likely a mistake, so it is refused).
fn epoch_secs(epoch: &Bound<'_, PyAny>) -> PyResult<i64> {
    if let Ok(seconds) = epoch.extract::<i64>() {
        return Ok(seconds);
    }
    match epoch.extract::<f64>() {
        Ok(seconds) if seconds.fract() == 0.0 && seconds.abs() < 9.0e18 => Ok(seconds as i64),
        Ok(seconds) => Err(fractional_epoch(seconds)),
        Err(_) => Err(wrong_type(
            "epoch must be an int or an integral float",
            epoch,
        )),
    }
}

#[pyfunction]
pub fn cancel_proxy(key: &str, envelope: &Bound<'_, PyAny>) -> NativeResult<PyProxyMessage> {
    let envelope = envelope_of(envelope)?;
    let proxy = envelope::cancel_proxy(key, &envelope).map_err(NativeError::Schedule)?;
    Ok(PyProxyMessage(proxy))
}

#[pyfunction]
pub fn parse_proxy_headers(headers: &Bound<'_, PyAny>) -> NativeResult<PyProxyRecord> {
    // A header with a null value carries nothing: treat it as absent.
    let present: Vec<(String, Vec<u8>)> = crate::convert::headers(Some(headers))?
        .into_iter()
        .filter_map(|(name, value)| Some((name, value?)))
        .collect();
    Ok(envelope::parse_proxy_headers(&present)?.into())
}
