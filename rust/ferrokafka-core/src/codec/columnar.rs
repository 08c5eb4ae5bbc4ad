//! Arrow-layout columns for vectorised codecs (the Spark UDFs): reading a binary, string or
//! int64 column from its raw Arrow buffers and building result columns, so that a whole batch
//! is one call.
//!
//! Invariants:
//! - Reading never trusts the buffers: views check buffer sizes when made, and an offset pair
//!   that is decreasing or outside the data buffer is a per-row [`CoreError::Corrupt`], never a
//!   panic or an out-of-bounds read.
//! - Builders write Arrow's layout: LSB-first validity bitmaps (omitted when nothing is null),
//!   little-endian offsets of 32 bits (64 with `large`) and values. Overflowing 32-bit offsets is
//!   a [`CoreError::TooLarge`], not a wrap-around.
//! - A struct row builder pushes exactly one value into every child per row, so children always
//!   have the struct's length.

use crate::CoreError;

/// Reads a little-endian offset of `width` bytes (4 or 8) at index `index`.
fn read_offset(buffer: &[u8], width: usize, index: usize) -> Option<i64> {
    let start = index.checked_mul(width)?;
    let bytes = buffer.get(start..start.checked_add(width)?)?;
    match width {
        4 => Some(i64::from(i32::from_le_bytes(bytes.try_into().ok()?))),
        _ => Some(i64::from_le_bytes(bytes.try_into().ok()?)),
    }
}

/// Whether bit `index` of an LSB-first validity bitmap is set (no bitmap: all valid).
fn is_valid(validity: Option<&[u8]>, index: usize) -> bool {
    validity.is_none_or(|bits| {
        bits.get(index / 8)
            .is_some_and(|b| b & (1 << (index % 8)) != 0)
    })
}

/// Fails unless the Arrow `what` buffer holds the `needed` bytes of `len` rows from row
/// `offset` (`None`: more than any buffer can).
fn require_bytes(
    buffer: &[u8],
    needed: Option<usize>,
    what: &str,
    offset: usize,
    len: usize,
) -> Result<(), CoreError> {
    if needed.is_none_or(|needed| buffer.len() < needed) {
        return Err(CoreError::corrupt(format!(
            "Arrow {what} buffer: too short for {len} rows at offset {offset}"
        )));
    }
    Ok(())
}

/// The rows an array view covers: `len` rows from the array's slice `offset`, with their
/// validity bitmap. What every view shares: the length and which rows hold a value.
#[derive(Debug, Clone, Copy)]
struct Rows<'a> {
    validity: Option<&'a [u8]>,
    offset: usize,
    len: usize,
}

impl<'a> Rows<'a> {
    /// Fails if the bitmap is too short for the rows.
    fn new(validity: Option<&'a [u8]>, offset: usize, len: usize) -> Result<Self, CoreError> {
        let needed = offset.saturating_add(len).div_ceil(8);
        if validity.is_some_and(|bits| bits.len() < needed) {
            return Err(CoreError::corrupt(format!(
                "Arrow validity bitmap: {needed} bytes needed"
            )));
        }
        Ok(Self {
            validity,
            offset,
            len,
        })
    }

    /// The array index of row `row`, `None` when the row is null (or past the end).
    fn index(&self, row: usize) -> Option<usize> {
        let index = self.offset + row;
        (row < self.len && is_valid(self.validity, index)).then_some(index)
    }
}

/// A read-only view of an Arrow `binary`/`utf8` (or `large_*`) array's buffers.
#[derive(Debug, Clone, Copy)]
pub struct BinaryView<'a> {
    rows: Rows<'a>,
    offsets: &'a [u8],
    width: usize,
    data: &'a [u8],
}

impl<'a> BinaryView<'a> {
    /// A view of `len` rows starting at row `offset` (the array's slice offset). `large` says
    /// the offsets are 64-bit. Fails if a buffer is too short for the rows.
    pub fn new(
        validity: Option<&'a [u8]>,
        offsets: &'a [u8],
        data: &'a [u8],
        offset: usize,
        len: usize,
        large: bool,
    ) -> Result<Self, CoreError> {
        let width = if large { 8 } else { 4 };
        let needed = offset
            .checked_add(len)
            .and_then(|end| end.checked_add(1))
            .and_then(|count| count.checked_mul(width));
        require_bytes(offsets, needed, "offsets", offset, len)?;
        Ok(Self {
            rows: Rows::new(validity, offset, len)?,
            offsets,
            width,
            data,
        })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len
    }

    /// Whether the view has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.len == 0
    }

    /// Row `row`'s bytes, `None` when null (or past the end).
    pub fn get(&self, row: usize) -> Result<Option<&'a [u8]>, CoreError> {
        let Some(index) = self.rows.index(row) else {
            return Ok(None);
        };
        let bounds = read_offset(self.offsets, self.width, index)
            .zip(read_offset(self.offsets, self.width, index + 1))
            .and_then(|(start, end)| {
                Some((usize::try_from(start).ok()?, usize::try_from(end).ok()?))
            });
        bounds
            .and_then(|(start, end)| self.data.get(start..end))
            .map(Some)
            .ok_or_else(|| CoreError::corrupt(format!("Arrow offsets of row {row}")))
    }

    /// Row `row` as UTF-8 text, `None` when null.
    pub fn get_str(&self, row: usize) -> Result<Option<&'a str>, CoreError> {
        self.get(row)?
            .map(|bytes| {
                std::str::from_utf8(bytes)
                    .map_err(|err| CoreError::corrupt(format!("UTF-8 text of row {row}: {err}")))
            })
            .transpose()
    }
}

/// A read-only view of an Arrow `int64` array's buffers.
#[derive(Debug, Clone, Copy)]
pub struct Int64View<'a> {
    rows: Rows<'a>,
    values: &'a [u8],
}

impl<'a> Int64View<'a> {
    /// A view of `len` rows starting at row `offset`; fails if a buffer is too short.
    pub fn new(
        validity: Option<&'a [u8]>,
        values: &'a [u8],
        offset: usize,
        len: usize,
    ) -> Result<Self, CoreError> {
        let needed = offset.checked_add(len).and_then(|end| end.checked_mul(8));
        require_bytes(values, needed, "int64", offset, len)?;
        Ok(Self {
            rows: Rows::new(validity, offset, len)?,
            values,
        })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len
    }

    /// Whether the view has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.len == 0
    }

    /// Row `row`'s value, `None` when null (or past the end).
    pub fn get(&self, row: usize) -> Option<i64> {
        read_offset(self.values, 8, self.rows.index(row)?)
    }
}

/// An LSB-first validity bitmap being built. The bitmap is written only from a column's first
/// null on: a column without nulls (most of a consumer batch's) costs a count per row, not a
/// bit per row (`benches/record_rows.rs`).
#[derive(Debug, Default, Clone)]
pub struct Validity {
    bits: Vec<u8>,
    len: usize,
    nulls: usize,
}

impl Validity {
    /// Appends one row's validity.
    #[inline]
    pub fn push(&mut self, valid: bool) {
        if valid && self.nulls == 0 {
            self.len += 1;
        } else {
            self.push_bit(valid);
        }
    }

    /// [`Validity::push`] once the bitmap is written, or for the null that starts it.
    #[cold]
    fn push_bit(&mut self, valid: bool) {
        if self.nulls == 0 {
            // The first null: every row before it was valid; the bits past them stay clear.
            self.bits = vec![u8::MAX; self.len.div_ceil(8)];
            if let (Some(last), 1..) = (self.bits.last_mut(), self.len % 8) {
                *last = (1 << (self.len % 8)) - 1;
            }
        }
        if self.len % 8 == 0 {
            self.bits.push(0);
        }
        if valid {
            if let Some(last) = self.bits.last_mut() {
                *last |= 1 << (self.len % 8);
            }
        } else {
            self.nulls += 1;
        }
        self.len += 1;
    }

    /// Rows so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no row was pushed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The finished bitmap, `None` when no row is null (Arrow's convention).
    pub fn finish(self) -> Option<Vec<u8>> {
        (self.nulls > 0).then_some(self.bits)
    }
}

/// A finished column in Arrow layout.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    /// `int64` values.
    Int64 {
        /// Rows.
        len: usize,
        /// Validity bitmap (`None`: no nulls).
        validity: Option<Vec<u8>>,
        /// Values, little-endian, 8 bytes per row.
        values: Vec<u8>,
    },
    /// `float64` values.
    Float64 {
        /// Rows.
        len: usize,
        /// Validity bitmap (`None`: no nulls).
        validity: Option<Vec<u8>>,
        /// Values, little-endian, 8 bytes per row.
        values: Vec<u8>,
    },
    /// `binary`/`utf8` and their `large_` forms.
    Bytes {
        /// Rows.
        len: usize,
        /// Validity bitmap (`None`: no nulls).
        validity: Option<Vec<u8>>,
        /// Whether the values are UTF-8 text (`utf8`) rather than `binary`.
        utf8: bool,
        /// Whether the offsets are 64-bit.
        large: bool,
        /// `len + 1` offsets, little-endian.
        offsets: Vec<u8>,
        /// The concatenated values.
        data: Vec<u8>,
    },
    /// A `list` (32-bit offsets) of one child column.
    List {
        /// Rows.
        len: usize,
        /// Validity bitmap (`None`: no nulls).
        validity: Option<Vec<u8>>,
        /// `len + 1` offsets into `item`, little-endian 32-bit.
        offsets: Vec<u8>,
        /// The items of all lists.
        item: Box<Column>,
    },
    /// A `struct` of named children, each `len` rows long.
    Struct {
        /// Rows.
        len: usize,
        /// Validity bitmap (`None`: no nulls).
        validity: Option<Vec<u8>>,
        /// Field names and columns, in order.
        fields: Vec<(&'static str, Column)>,
    },
}

/// Something that builds a column one row at a time.
pub trait ColumnBuilder: Default {
    /// Appends a null row.
    fn push_null(&mut self);
    /// Rows so far.
    fn len(&self) -> usize;
    /// Whether no row was pushed.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The finished column.
    fn finish(self) -> Result<Column, CoreError>;
}

/// A struct-row builder (made by `struct_builder!`).
pub trait StructRows: ColumnBuilder {
    /// Appends a valid row whose fields are all null (a row that failed to decode).
    fn push_empty(&mut self);
}

/// `values` as the concatenated little-endian bytes `encode` gives each, in a buffer allocated
/// once (collecting a `flat_map` grows the buffer as it goes: its size hint is no help).
fn le_bytes<T: Copy, const N: usize>(values: &[T], encode: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(values.len() * N);
    for &value in values {
        bytes.extend_from_slice(&encode(value));
    }
    bytes
}

/// Builds `binary` (`UTF8 = false`) or `utf8` (`UTF8 = true`) columns.
#[derive(Debug, Clone)]
pub struct BytesBuilder<const UTF8: bool> {
    offsets: Vec<u64>,
    data: Vec<u8>,
    validity: Validity,
    large: bool,
}

/// Builds a `utf8` column.
pub type Utf8Builder = BytesBuilder<true>;
/// Builds a `binary` column.
pub type BinaryBuilder = BytesBuilder<false>;

impl<const UTF8: bool> Default for BytesBuilder<UTF8> {
    fn default() -> Self {
        Self::with_capacity(0, 0, false)
    }
}

impl<const UTF8: bool> BytesBuilder<UTF8> {
    /// A builder with room for `rows` rows of `bytes` bytes in all; `large` selects 64-bit
    /// offsets in the finished column.
    pub fn with_capacity(rows: usize, bytes: usize, large: bool) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Self {
            offsets,
            data: Vec::with_capacity(bytes),
            validity: Validity::default(),
            large,
        }
    }

    fn close_row(&mut self, valid: bool) {
        self.offsets.push(self.data.len() as u64);
        self.validity.push(valid);
    }

    /// Appends a row (`None`: null).
    pub fn push(&mut self, value: Option<&[u8]>) {
        if let Some(value) = value {
            self.data.extend_from_slice(value);
        }
        self.close_row(value.is_some());
    }

    /// Appends a row written by `write` into the data buffer; on error the row becomes null
    /// (whatever `write` wrote is discarded) and the error is returned.
    pub fn push_with(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), CoreError>,
    ) -> Result<(), CoreError> {
        let start = self.data.len();
        let written = write(&mut self.data);
        if written.is_err() {
            self.data.truncate(start);
        }
        self.close_row(written.is_ok());
        written
    }
}

impl Utf8Builder {
    /// Appends a text row (`None`: null).
    pub fn push_str(&mut self, value: Option<&str>) {
        self.push(value.map(str::as_bytes));
    }
}

impl<const UTF8: bool> ColumnBuilder for BytesBuilder<UTF8> {
    fn push_null(&mut self) {
        self.close_row(false);
    }

    fn len(&self) -> usize {
        self.validity.len()
    }

    fn finish(self) -> Result<Column, CoreError> {
        let offsets = if self.large {
            le_bytes(&self.offsets, u64::to_le_bytes)
        } else {
            if self.data.len() > i32::MAX as usize {
                return Err(CoreError::TooLarge {
                    what: "32-bit Arrow column (bytes); use large_binary",
                    limit: i32::MAX as u64,
                });
            }
            le_bytes(&self.offsets, |o| (o as u32).to_le_bytes())
        };
        Ok(Column::Bytes {
            len: self.validity.len(),
            validity: self.validity.finish(),
            utf8: UTF8,
            large: self.large,
            offsets,
            data: self.data,
        })
    }
}

/// Builds `int64` (`FLOAT = false`) or `float64` (`FLOAT = true`) columns; values are stored as
/// their little-endian bytes.
#[derive(Debug, Default, Clone)]
pub struct NumberBuilder<const FLOAT: bool> {
    values: Vec<u8>,
    validity: Validity,
}

/// Builds an `int64` column.
pub type Int64Builder = NumberBuilder<false>;
/// Builds a `float64` column.
pub type Float64Builder = NumberBuilder<true>;

impl<const FLOAT: bool> NumberBuilder<FLOAT> {
    /// A builder with room for `rows` rows.
    pub fn with_capacity(rows: usize) -> Self {
        Self {
            values: Vec::with_capacity(rows * 8),
            validity: Validity::default(),
        }
    }
}

impl Int64Builder {
    /// Appends a row (`None`: null).
    pub fn push(&mut self, value: Option<i64>) {
        self.values
            .extend_from_slice(&value.unwrap_or(0).to_le_bytes());
        self.validity.push(value.is_some());
    }

    /// Appends an unsigned value; one beyond `i64::MAX` becomes null.
    pub fn push_u64(&mut self, value: Option<u64>) {
        self.push(value.and_then(|v| i64::try_from(v).ok()));
    }
}

impl Float64Builder {
    /// Appends a row (`None`: null).
    pub fn push(&mut self, value: Option<f64>) {
        self.values
            .extend_from_slice(&value.unwrap_or(0.0).to_le_bytes());
        self.validity.push(value.is_some());
    }
}

impl<const FLOAT: bool> ColumnBuilder for NumberBuilder<FLOAT> {
    fn push_null(&mut self) {
        self.values.extend_from_slice(&[0; 8]);
        self.validity.push(false);
    }

    fn len(&self) -> usize {
        self.validity.len()
    }

    fn finish(self) -> Result<Column, CoreError> {
        let (len, validity, values) = (self.validity.len(), self.validity.finish(), self.values);
        Ok(if FLOAT {
            Column::Float64 {
                len,
                validity,
                values,
            }
        } else {
            Column::Int64 {
                len,
                validity,
                values,
            }
        })
    }
}

/// Builds a `list` column whose items are built by `B`.
#[derive(Debug, Default, Clone)]
pub struct ListBuilder<B> {
    offsets: Vec<u64>,
    validity: Validity,
    /// The item builder: push a row's items here, then call [`ListBuilder::close_row`].
    pub items: B,
}

impl<B: ColumnBuilder> ListBuilder<B> {
    /// Ends the current list row, which holds the items pushed since the previous row.
    pub fn close_row(&mut self) {
        self.close(true);
    }

    fn close(&mut self, valid: bool) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.offsets.push(self.items.len() as u64);
        self.validity.push(valid);
    }
}

impl<B: ColumnBuilder> ColumnBuilder for ListBuilder<B> {
    fn push_null(&mut self) {
        self.close(false);
    }

    fn len(&self) -> usize {
        self.validity.len()
    }

    fn finish(self) -> Result<Column, CoreError> {
        if self.items.len() > i32::MAX as usize {
            return Err(CoreError::TooLarge {
                what: "list items of one Arrow batch",
                limit: i32::MAX as u64,
            });
        }
        let mut offsets = self.offsets;
        if offsets.is_empty() {
            offsets.push(0);
        }
        Ok(Column::List {
            len: self.validity.len(),
            validity: self.validity.finish(),
            offsets: le_bytes(&offsets, |o| (o as u32).to_le_bytes()),
            item: Box::new(self.items.finish()?),
        })
    }
}

/// Defines a struct-row builder: one child builder per field, `push_null` and `finish` for
/// all of them, and `close_row` to mark a row valid after each field got its value.
macro_rules! struct_builder {
    ($(#[$doc:meta])* $name:ident { $($(#[$field_doc:meta])* $field:ident : $builder:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Default, Clone)]
        pub struct $name {
            $($(#[$field_doc])* pub $field: $builder,)*
            validity: $crate::codec::columnar::Validity,
        }

        impl $name {
            /// Marks the row whose fields were just pushed as valid (not null).
            pub fn close_row(&mut self) {
                self.validity.push(true);
            }
        }

        impl $crate::codec::columnar::StructRows for $name {
            fn push_empty(&mut self) {
                $(self.$field.push_null();)*
                self.validity.push(true);
            }
        }

        impl $crate::codec::columnar::ColumnBuilder for $name {
            fn push_null(&mut self) {
                $(self.$field.push_null();)*
                self.validity.push(false);
            }

            fn len(&self) -> usize {
                self.validity.len()
            }

            fn finish(self) -> Result<$crate::codec::columnar::Column, $crate::CoreError> {
                Ok($crate::codec::columnar::Column::Struct {
                    len: self.validity.len(),
                    validity: self.validity.finish(),
                    fields: vec![$((stringify!($field), self.$field.finish()?),)*],
                })
            }
        }
    };
}
pub(crate) use struct_builder;

struct_builder! {
    /// Kafka headers as Spark's Kafka source and sink type them:
    /// `array<struct<key: string, value: binary>>` items.
    HeaderRows {
        /// Header name.
        key: Utf8Builder,
        /// Header value (nullable).
        value: BinaryBuilder,
    }
}

impl HeaderRows {
    /// Appends one header.
    pub fn push(&mut self, key: &str, value: Option<&[u8]>) {
        self.key.push_str(Some(key));
        self.value.push(value);
        self.close_row();
    }
}

/// The result of a vectorised codec over a batch: one output row per input row, and an error
/// message (a `utf8` column) for each row that failed (whose output is null).
#[derive(Debug)]
pub struct BatchResult<B> {
    /// The output rows.
    pub output: B,
    /// Per row: `None`, or why the row failed.
    pub errors: Utf8Builder,
}

impl<B: ColumnBuilder> BatchResult<B> {
    /// Runs `row` over `rows` rows: each call pushes exactly one output row (a null on error).
    pub fn run(
        output: B,
        rows: usize,
        mut row: impl FnMut(&mut B, usize) -> Result<(), CoreError>,
    ) -> Self {
        let mut result = Self {
            output,
            errors: Utf8Builder::with_capacity(rows, 0, false),
        };
        for index in 0..rows {
            match row(&mut result.output, index) {
                Ok(()) => result.errors.push_null(),
                Err(err) => result.errors.push_str(Some(&err.to_string())),
            }
            debug_assert_eq!(result.output.len(), index + 1);
        }
        result
    }

    /// The finished output and error columns.
    pub fn finish(self) -> Result<(Column, Column), CoreError> {
        Ok((self.output.finish()?, self.errors.finish()?))
    }
}

impl<B: StructRows> BatchResult<B> {
    /// The finished output struct with the errors as its last field, `error`.
    pub fn finish_with_error_field(self) -> Result<Column, CoreError> {
        let (output, errors) = self.finish()?;
        match output {
            Column::Struct {
                len,
                validity,
                mut fields,
            } => {
                fields.push(("error", errors));
                Ok(Column::Struct {
                    len,
                    validity,
                    fields,
                })
            }
            other => Ok(other),
        }
    }
}

/// Applies `codec` to every non-null row of `input` (null stays null), writing into a `binary`
/// column with 64-bit offsets if `large`.
pub fn map_binary(
    input: &BinaryView<'_>,
    large: bool,
    mut codec: impl FnMut(&[u8], &mut Vec<u8>) -> Result<(), CoreError>,
) -> BatchResult<BinaryBuilder> {
    let capacity = input.data.len();
    BatchResult::run(
        BinaryBuilder::with_capacity(input.len(), capacity, large),
        input.len(),
        |out, row| match input.get(row) {
            Ok(Some(value)) => out.push_with(|buffer| codec(value, buffer)),
            Ok(None) => {
                out.push_null();
                Ok(())
            }
            Err(err) => {
                out.push_null();
                Err(err)
            }
        },
    )
}

/// Runs `decode` on every non-null row of `input` and `push`es what it decoded; a null input row
/// gives a null struct, a row that fails to decode a valid struct whose fields are all null (and
/// its error). Decoding finishes before anything is pushed, so a row is never half-written.
pub fn decode_rows<B: StructRows, T>(
    input: &BinaryView<'_>,
    mut decode: impl FnMut(&[u8]) -> Result<T, CoreError>,
    mut push: impl FnMut(&mut B, T),
) -> BatchResult<B> {
    BatchResult::run(B::default(), input.len(), |out, row| {
        match input
            .get(row)
            .and_then(|value| value.map(&mut decode).transpose())
        {
            Ok(Some(decoded)) => {
                push(out, decoded);
                Ok(())
            }
            Ok(None) => {
                out.push_null();
                Ok(())
            }
            Err(err) => {
                out.push_empty();
                Err(err)
            }
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn binary(values: &[Option<&[u8]>]) -> (Option<Vec<u8>>, Vec<u8>, Vec<u8>) {
        let mut builder = BinaryBuilder::default();
        for value in values {
            builder.push(*value);
        }
        buffers_of(builder)
    }

    /// The validity, offsets and data buffers a binary builder wrote.
    pub(crate) fn buffers_of(builder: BinaryBuilder) -> (Option<Vec<u8>>, Vec<u8>, Vec<u8>) {
        match builder.finish().unwrap() {
            Column::Bytes {
                validity,
                offsets,
                data,
                ..
            } => (validity, offsets, data),
            other => panic!("unexpected {other:?}"),
        }
    }

    proptest::proptest! {
        /// The bitmap written only from the first null on is the one a bit per row writes:
        /// bit i set exactly when row i is valid, whole bytes, none at all without a null.
        #[test]
        fn the_validity_bitmap_has_a_bit_per_row_once_any_row_is_null(
            rows in proptest::collection::vec(proptest::bool::weighted(0.9), 0..100)
        ) {
            let mut validity = Validity::default();
            for &valid in &rows {
                validity.push(valid);
            }
            proptest::prop_assert_eq!(validity.len(), rows.len());
            let expected = rows.contains(&false).then(|| {
                let mut bits = vec![0u8; rows.len().div_ceil(8)];
                for (index, _) in rows.iter().enumerate().filter(|(_, valid)| **valid) {
                    bits[index / 8] |= 1 << (index % 8);
                }
                bits
            });
            proptest::prop_assert_eq!(validity.finish(), expected);
        }
    }

    #[test]
    fn views_read_what_builders_wrote_including_slices() {
        let rows: Vec<Option<&[u8]>> = vec![Some(b"a"), None, Some(b""), Some(b"xyz")];
        let (validity, offsets, data) = binary(&rows);
        let view = BinaryView::new(validity.as_deref(), &offsets, &data, 0, 4, false).unwrap();
        let read: Vec<_> = (0..4).map(|i| view.get(i).unwrap()).collect();
        assert_eq!(read, rows);
        let sliced = BinaryView::new(validity.as_deref(), &offsets, &data, 1, 3, false).unwrap();
        assert_eq!(sliced.get(0).unwrap(), None);
        assert_eq!(sliced.get(2).unwrap(), Some(&b"xyz"[..]));
        assert!(BinaryView::new(None, &offsets, &data, 2, 3, false).is_err());
    }

    #[test]
    fn corrupt_offsets_fail_the_row_not_the_batch() {
        let offsets: Vec<u8> = [0i32, 2, 1, 100]
            .iter()
            .flat_map(|o| o.to_le_bytes())
            .collect();
        let view = BinaryView::new(None, &offsets, b"abc", 0, 3, false).unwrap();
        let result = map_binary(&view, false, |value, out| {
            out.extend_from_slice(value);
            Ok(())
        });
        let (output, errors) = result.finish().unwrap();
        let Column::Bytes { validity, .. } = output else {
            panic!("bytes expected")
        };
        assert_eq!(validity, Some(vec![0b001]));
        let Column::Bytes { validity, .. } = errors else {
            panic!("bytes expected")
        };
        assert_eq!(validity, Some(vec![0b110]));
    }

    #[test]
    fn large_offsets_and_int64_views() {
        let mut builder = BinaryBuilder::with_capacity(2, 4, true);
        builder.push(Some(b"ab"));
        builder.push(Some(b"cd"));
        let Column::Bytes {
            offsets,
            data,
            validity,
            ..
        } = builder.finish().unwrap()
        else {
            panic!("bytes expected")
        };
        assert_eq!(validity, None);
        let view = BinaryView::new(None, &offsets, &data, 1, 1, true).unwrap();
        assert_eq!(view.get(0).unwrap(), Some(&b"cd"[..]));
        let values: Vec<u8> = [5i64, -7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let ints = Int64View::new(Some(&[0b10]), &values, 0, 2).unwrap();
        assert_eq!(
            (ints.get(0), ints.get(1), ints.get(2)),
            (None, Some(-7), None)
        );
        assert!(Int64View::new(None, &values, 1, 2).is_err());
    }

    #[test]
    fn lists_of_structs_keep_lengths_aligned() {
        let mut lists = ListBuilder::<HeaderRows>::default();
        lists.items.push("a", Some(b"1"));
        lists.items.push("b", None);
        lists.close_row();
        lists.push_null();
        lists.close_row();
        let Column::List {
            len,
            offsets,
            item,
            validity,
        } = lists.finish().unwrap()
        else {
            panic!("list expected")
        };
        assert_eq!((len, validity), (3, Some(vec![0b101])));
        let offsets: Vec<u32> = offsets
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(offsets, [0, 2, 2, 2]);
        let Column::Struct { len, fields, .. } = *item else {
            panic!("struct expected")
        };
        assert_eq!((len, fields.len(), fields[0].0), (2, 2, "key"));
    }
}
