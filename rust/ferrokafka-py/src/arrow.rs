//! The batch codecs over Arrow buffers (`ferrokafka.arrow`, used by the Spark UDFs): one call per
//! Arrow batch, whatever its row count.
//!
//! GIL: the input buffers are borrowed (read in place at pyarrow's address, no copy) and held for
//! the whole call; the row loop always runs detached (a batch is thousands of rows). The result
//! columns go back as Arrow C data interface capsules (`arrow_c`), which `ferrokafka/arrow.py`
//! imports into pyarrow arrays without a copy.

use ferrokafka_core::codec::columnar::{
    BatchResult, BinaryView, Column, ColumnBuilder, Int64View, StructRows,
};
use ferrokafka_core::codec::envelope::{ScheduleLimits, WATERDROP_MAX_PAYLOAD_SIZE};
use ferrokafka_core::codec::rows::{self, ScheduleColumns};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::arrow_c::Node;
use crate::codec::{DEFAULT_MAX_INFLATED, now_secs};
use crate::convert::{self, MaxInflated, MaxOutput, PartitionCount, ZlibLevel};
use crate::errors::{NativeResult, invalid_argument, wrong_type};

/// The bytes of a CPU `pyarrow.Buffer`, read at its `address` for `size` bytes and kept alive by
/// the reference held here for as long as this value lives. pyarrow's own address and size
/// rather than the buffer protocol: that protocol is not in CPython 3.10's limited API, which the
/// abi3 wheel targets, and pyarrow buffers are contiguous by construction.
struct ByteBuffer(Option<(Py<PyAny>, usize, usize)>);

impl ByteBuffer {
    fn get(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let Some(value) = value.filter(|value| !value.is_none()) else {
            return Ok(ByteBuffer(None));
        };
        let fields = (
            value.getattr("is_cpu"),
            value.getattr("address"),
            value.getattr("size"),
        );
        let (Ok(is_cpu), Ok(address), Ok(size)) = fields else {
            let expectation = format!("{name} buffers must be pyarrow.Buffer objects");
            return Err(wrong_type(expectation, value));
        };
        if !is_cpu.extract::<bool>()? {
            return Err(invalid_argument(format!(
                "{name} buffers must be in CPU memory"
            )));
        }
        Ok(ByteBuffer(Some((
            value.clone().unbind(),
            address.extract()?,
            size.extract()?,
        ))))
    }

    fn bytes(&self) -> Option<&[u8]> {
        let (_, address, len) = self.0.as_ref()?;
        if *len == 0 || *address == 0 {
            return Some(&[]);
        }
        // SAFETY: a CPU pyarrow.Buffer owns `size` readable bytes at `address` for as long as
        // it lives, and `self` holds a reference to it; the slice borrows `self`. Arrow buffers
        // are immutable once built, so nothing writes to them while we read.
        Some(unsafe { std::slice::from_raw_parts(*address as *const u8, *len) })
    }
}

/// The buffers of one Arrow array, as `ferrokafka/arrow.py` passes them: `(validity, values or
/// offsets, data, offset, length, large)`.
struct ArrayBuffers {
    validity: ByteBuffer,
    values: ByteBuffer,
    data: ByteBuffer,
    offset: usize,
    len: usize,
    large: bool,
}

impl ArrayBuffers {
    fn extract(name: &str, parts: &Bound<'_, PyAny>) -> PyResult<Self> {
        let parts = parts.cast::<PyTuple>().map_err(|_| {
            invalid_argument(format!(
                "{name} must be a (validity, offsets, data, offset, length, large) tuple"
            ))
        })?;
        if parts.len() != 6 {
            return Err(invalid_argument(format!(
                "{name} must have 6 parts, got {}",
                parts.len()
            )));
        }
        Ok(ArrayBuffers {
            validity: ByteBuffer::get(name, Some(&parts.get_item(0)?))?,
            values: ByteBuffer::get(name, Some(&parts.get_item(1)?))?,
            data: ByteBuffer::get(name, Some(&parts.get_item(2)?))?,
            offset: parts.get_item(3)?.extract()?,
            len: parts.get_item(4)?.extract()?,
            large: parts.get_item(5)?.extract()?,
        })
    }

    fn binary(&self) -> NativeResult<BinaryView<'_>> {
        Ok(BinaryView::new(
            self.validity.bytes(),
            self.values.bytes().unwrap_or_default(),
            self.data.bytes().unwrap_or_default(),
            self.offset,
            self.len,
            self.large,
        )?)
    }

    fn int64(&self) -> NativeResult<Int64View<'_>> {
        Ok(Int64View::new(
            self.validity.bytes(),
            self.values.bytes().unwrap_or_default(),
            self.offset,
            self.len,
        )?)
    }
}

/// A finished column as the Arrow C data interface's `(schema, array)` capsules, which
/// `ferrokafka/arrow.py` imports into pyarrow without a copy.
fn column_capsules<'py>(py: Python<'py>, column: Column) -> PyResult<Bound<'py, PyTuple>> {
    Node::new("", column).into_capsules(py)?.into_pyobject(py)
}

/// `(output, errors)` of a batch whose output is a plain column.
fn output_and_errors<'py, B: ColumnBuilder>(
    py: Python<'py>,
    result: BatchResult<B>,
) -> NativeResult<(Bound<'py, PyTuple>, Bound<'py, PyTuple>)> {
    let (output, errors) = result.finish()?;
    Ok((column_capsules(py, output)?, column_capsules(py, errors)?))
}

/// Runs `work` detached over the rows of the binary `column`, read in place.
fn over_binary<T: Send>(
    py: Python<'_>,
    column: &Bound<'_, PyAny>,
    work: impl FnOnce(&BinaryView<'_>) -> T + Send,
) -> NativeResult<T> {
    let buffers = ArrayBuffers::extract("column", column)?;
    let input = buffers.binary()?;
    Ok(py.detach(|| work(&input)))
}

/// Decodes the binary `column` with `decode` (detached) into a struct column with its `error`
/// field.
fn decode_struct<'py, B: StructRows + Send>(
    py: Python<'py>,
    column: &Bound<'py, PyAny>,
    decode: impl FnOnce(&BinaryView<'_>) -> BatchResult<B> + Send,
) -> NativeResult<Bound<'py, PyTuple>> {
    let result = over_binary(py, column, decode)?;
    Ok(column_capsules(py, result.finish_with_error_field()?)?)
}

#[pyfunction]
#[pyo3(signature = (column, max_output = MaxOutput(DEFAULT_MAX_INFLATED), large = false))]
#[pyo3(text_signature = "(column, max_output=..., large=False)")]
pub fn inflate_batch<'py>(
    py: Python<'py>,
    column: &Bound<'py, PyAny>,
    max_output: MaxOutput,
    large: bool,
) -> NativeResult<(Bound<'py, PyTuple>, Bound<'py, PyTuple>)> {
    let max_output = max_output.0;
    let result = over_binary(py, column, |input| {
        rows::inflate_batch(input, max_output, large)
    })?;
    output_and_errors(py, result)
}

#[pyfunction]
#[pyo3(signature = (column, level = ZlibLevel(6), large = false))]
#[pyo3(text_signature = "(column, level=6, large=False)")]
pub fn deflate_batch<'py>(
    py: Python<'py>,
    column: &Bound<'py, PyAny>,
    level: ZlibLevel,
    large: bool,
) -> NativeResult<(Bound<'py, PyTuple>, Bound<'py, PyTuple>)> {
    let level = level.0;
    let result = over_binary(py, column, |input| rows::deflate_batch(input, level, large))??;
    output_and_errors(py, result)
}

#[pyfunction]
#[pyo3(signature = (column, partition_count, partition_key_hashing = "waterdrop"))]
pub fn partition_key_batch<'py>(
    py: Python<'py>,
    column: &Bound<'py, PyAny>,
    partition_count: PartitionCount,
    partition_key_hashing: &str,
) -> NativeResult<(Bound<'py, PyTuple>, Bound<'py, PyTuple>)> {
    let partition_count = partition_count.0;
    let hashing = convert::partition_key_hashing(partition_key_hashing)?;
    let result = over_binary(py, column, |input| {
        rows::partition_key_batch(input, partition_count, hashing)
    })??;
    output_and_errors(py, result)
}

/// A decoder of a column of zlib JSON documents, each inflated to at most `max_inflated` bytes
/// by the core's batch function of the same name.
macro_rules! document_batch_decoder {
    ($name:ident) => {
        #[pyfunction]
        #[pyo3(signature = (column, max_inflated = MaxInflated(DEFAULT_MAX_INFLATED)))]
        #[pyo3(text_signature = "(column, max_inflated=...)")]
        pub fn $name<'py>(
            py: Python<'py>,
            column: &Bound<'py, PyAny>,
            max_inflated: MaxInflated,
        ) -> NativeResult<Bound<'py, PyTuple>> {
            let max_inflated = max_inflated.0;
            decode_struct(py, column, |input| rows::$name(input, max_inflated))
        }
    };
}

document_batch_decoder!(decode_state_batch);
document_batch_decoder!(decode_report_batch);

#[pyfunction]
pub fn decode_marker_batch<'py>(
    py: Python<'py>,
    column: &Bound<'py, PyAny>,
) -> NativeResult<Bound<'py, PyTuple>> {
    decode_struct(py, column, rows::decode_marker_batch)
}

fn optional_buffers(
    name: &str,
    column: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<ArrayBuffers>> {
    column
        .filter(|column| !column.is_none())
        .map(|column| ArrayBuffers::extract(name, column))
        .transpose()
}

#[pyfunction]
#[pyo3(signature = (target_topic, epoch, key = None, partition = None, partition_key = None, payload_size = None, max_payload_size = WATERDROP_MAX_PAYLOAD_SIZE))]
#[allow(clippy::too_many_arguments)]
pub fn schedule_headers_batch<'py>(
    py: Python<'py>,
    target_topic: &Bound<'py, PyAny>,
    epoch: &Bound<'py, PyAny>,
    key: Option<&Bound<'py, PyAny>>,
    partition: Option<&Bound<'py, PyAny>>,
    partition_key: Option<&Bound<'py, PyAny>>,
    payload_size: Option<&Bound<'py, PyAny>>,
    max_payload_size: usize,
) -> NativeResult<(Bound<'py, PyTuple>, Bound<'py, PyTuple>)> {
    let topic = ArrayBuffers::extract("target_topic", target_topic)?;
    let epoch = ArrayBuffers::extract("epoch", epoch)?;
    let key = optional_buffers("key", key)?;
    let partition = optional_buffers("partition", partition)?;
    let partition_key = optional_buffers("partition_key", partition_key)?;
    let payload_size = optional_buffers("payload_size", payload_size)?;
    let columns = ScheduleColumns {
        target_topic: topic.binary()?,
        epoch: epoch.int64()?,
        key: key.as_ref().map(ArrayBuffers::binary).transpose()?,
        partition: partition.as_ref().map(ArrayBuffers::int64).transpose()?,
        partition_key: partition_key
            .as_ref()
            .map(ArrayBuffers::binary)
            .transpose()?,
        payload_size: payload_size.as_ref().map(ArrayBuffers::int64).transpose()?,
    };
    let rows = columns.target_topic.len();
    let lengths = [
        Some(columns.epoch.len()),
        columns.key.map(|c| c.len()),
        columns.partition.map(|c| c.len()),
        columns.partition_key.map(|c| c.len()),
        columns.payload_size.map(|c| c.len()),
    ];
    if lengths.into_iter().flatten().any(|len| len != rows) {
        return Err(invalid_argument("all columns must have the same length").into());
    }
    let now = now_secs();
    let limits = ScheduleLimits {
        max_payload_bytes: max_payload_size,
        ..ScheduleLimits::default()
    };
    let result = py.detach(|| rows::schedule_headers_batch(&columns, now, &limits));
    output_and_errors(py, result)
}
