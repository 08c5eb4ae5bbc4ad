//! Columns handed to pyarrow through the Arrow C data interface: the buffers Rust built move
//! into pyarrow as they are, with one Python call per batch, instead of being copied into
//! `bytes` and rebuilt column by column in Python (`ferrokafka/arrow.py`'s `_to_arrow`).
//!
//! An exported column is a tree of `ArrowSchema` / `ArrowArray` structs (the C structs of the
//! specification, <https://arrow.apache.org/docs/format/CDataInterface.html>) whose private data
//! owns the format strings, the buffers and the children. Ownership passes to pyarrow when it
//! imports them; its release callbacks free what we allocated. Each top-level struct travels in
//! a PyCapsule named `arrow_schema` / `arrow_array` (the PyCapsule interface), whose destructor
//! releases a struct nobody imported.
//!
//! Invariants: a struct's release callback frees its private data and its children (calling
//! the children's own release first unless the importer moved them out) and then marks the
//! struct released; it never reads the struct's own address, so the capsule may hand it over
//! by value. Buffers are `Vec<u8>` from Rust's allocator (8-byte aligned or better for the
//! sizes of Arrow buffers); an empty buffer is given as a static, aligned, non-null pointer.

use std::ffi::{CStr, CString, c_char, c_void};
use std::ptr;

use ferrokafka_core::codec::columnar::Column;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// `ArrowSchema` of the C data interface.
#[repr(C)]
pub(crate) struct ArrowSchema {
    format: *const c_char,
    name: *const c_char,
    metadata: *const c_char,
    flags: i64,
    n_children: i64,
    children: *mut *mut ArrowSchema,
    dictionary: *mut ArrowSchema,
    release: Option<unsafe extern "C" fn(*mut ArrowSchema)>,
    private_data: *mut c_void,
}

/// `ArrowArray` of the C data interface.
#[repr(C)]
pub(crate) struct ArrowArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *mut *const c_void,
    children: *mut *mut ArrowArray,
    dictionary: *mut ArrowArray,
    release: Option<unsafe extern "C" fn(*mut ArrowArray)>,
    private_data: *mut c_void,
}

/// A top-level struct on its way into a capsule. The raw pointers it holds point only to
/// memory it owns (through its private data), so it may move to the thread that drops it.
#[repr(transparent)]
struct Exported<T>(T);
// SAFETY: see the type's documentation: nothing it points to is shared.
unsafe impl<T> Send for Exported<T> {}

const ARROW_FLAG_NULLABLE: i64 = 2;
/// What an empty buffer points to: non-null and aligned for any Arrow type.
static EMPTY: [u64; 1] = [0];

/// One column of the tree to export, its type given as the C data interface's format string.
pub(crate) struct Node {
    format: &'static CStr,
    name: CString,
    len: usize,
    null_count: i64,
    buffers: Vec<Option<Vec<u8>>>,
    children: Vec<Node>,
}

impl Node {
    /// `column` as it is, named `name`.
    pub(crate) fn new(name: &str, column: Column) -> Self {
        let name = CString::new(name).unwrap_or_default();
        match column {
            Column::Int64 {
                len,
                validity,
                values,
            } => Node::leaf(c"l", name, len, validity, vec![values]),
            Column::Float64 {
                len,
                validity,
                values,
            } => Node::leaf(c"g", name, len, validity, vec![values]),
            Column::Bytes {
                len,
                validity,
                utf8,
                large,
                offsets,
                data,
            } => {
                let format = match (utf8, large) {
                    (true, false) => c"u",
                    (true, true) => c"U",
                    (false, false) => c"z",
                    (false, true) => c"Z",
                };
                Node::leaf(format, name, len, validity, vec![offsets, data])
            }
            Column::List {
                len,
                validity,
                offsets,
                item,
            } => {
                let mut node = Node::leaf(c"+l", name, len, validity, vec![offsets]);
                node.children.push(Node::new("item", *item));
                node
            }
            Column::Struct {
                len,
                validity,
                fields,
            } => {
                let mut node = Node::leaf(c"+s", name, len, validity, Vec::new());
                node.children = fields
                    .into_iter()
                    .map(|(field, column)| Node::new(field, column))
                    .collect();
                node
            }
        }
    }

    fn leaf(
        format: &'static CStr,
        name: CString,
        len: usize,
        validity: Option<Vec<u8>>,
        buffers: Vec<Vec<u8>>,
    ) -> Self {
        // Unknown (-1) lets pyarrow count the nulls when asked; none without a bitmap.
        let null_count = if validity.is_some() { -1 } else { 0 };
        Node {
            format,
            name,
            len,
            null_count,
            buffers: std::iter::once(validity)
                .chain(buffers.into_iter().map(Some))
                .collect(),
            children: Vec::new(),
        }
    }

    /// The child named `name`, if any.
    pub(crate) fn child_mut(&mut self, name: &str) -> Option<&mut Node> {
        self.children
            .iter_mut()
            .find(|child| child.name.as_bytes() == name.as_bytes())
    }

    /// Gives an `int64` column the logical type `format` over the same buffer (e.g. `tsm:`,
    /// a timestamp in milliseconds).
    pub(crate) fn view_int64_as(&mut self, format: &'static CStr) {
        if self.format == c"l" {
            self.format = format;
        }
    }

    /// Narrows an `int64` column to `int32` (values that do not fit are truncated: callers
    /// narrow only values that fit, such as partition numbers).
    pub(crate) fn narrow_int64_to_int32(&mut self) {
        if self.format != c"l" {
            return;
        }
        if let Some(Some(values)) = self.buffers.get_mut(1) {
            // Allocated once: collecting a `flat_map` grew the buffer byte by byte.
            let mut narrow = Vec::with_capacity(values.len() / 2);
            for chunk in values.chunks_exact(8) {
                let mut wide = [0u8; 8];
                wide.copy_from_slice(chunk);
                #[allow(clippy::cast_possible_truncation)]
                narrow.extend_from_slice(&(i64::from_le_bytes(wide) as i32).to_le_bytes());
            }
            *values = narrow;
        }
        self.format = c"i";
    }

    /// The tree as the two C structs; the caller owns both (each must be released once).
    fn export(self) -> (ArrowSchema, ArrowArray) {
        let Node {
            format,
            name,
            len,
            null_count,
            buffers,
            children,
        } = self;
        let (schemas, arrays): (Vec<_>, Vec<_>) = children
            .into_iter()
            .map(|child| {
                let (schema, array) = child.export();
                (
                    Box::into_raw(Box::new(schema)),
                    Box::into_raw(Box::new(array)),
                )
            })
            .unzip();
        let n_children = i64::try_from(schemas.len()).unwrap_or(i64::MAX);
        let mut schema_data = Box::new(SchemaData {
            name,
            children: schemas,
        });
        let schema = ArrowSchema {
            format: format.as_ptr(),
            name: schema_data.name.as_ptr(),
            metadata: ptr::null(),
            flags: ARROW_FLAG_NULLABLE,
            n_children,
            children: schema_data.children.as_mut_ptr(),
            dictionary: ptr::null_mut(),
            release: Some(release::<ArrowSchema>),
            private_data: Box::into_raw(schema_data).cast(),
        };
        let pointers = buffers
            .iter()
            .enumerate()
            .map(|(index, buffer)| match buffer {
                // Only the validity bitmap (the first buffer) may be absent.
                None if index == 0 => ptr::null(),
                Some(bytes) if !bytes.is_empty() => bytes.as_ptr().cast(),
                _ => EMPTY.as_ptr().cast(),
            })
            .collect();
        let mut array_data = Box::new(ArrayData {
            _buffers: buffers,
            pointers,
            children: arrays,
        });
        let array = ArrowArray {
            length: i64::try_from(len).unwrap_or(i64::MAX),
            null_count,
            offset: 0,
            n_buffers: i64::try_from(array_data.pointers.len()).unwrap_or(i64::MAX),
            n_children,
            buffers: array_data.pointers.as_mut_ptr(),
            children: array_data.children.as_mut_ptr(),
            dictionary: ptr::null_mut(),
            release: Some(release::<ArrowArray>),
            private_data: Box::into_raw(array_data).cast(),
        };
        (schema, array)
    }

    /// The tree as the two capsules of the PyCapsule interface (`arrow_schema`, `arrow_array`).
    pub(crate) fn into_capsules(
        self,
        py: Python<'_>,
    ) -> PyResult<(Bound<'_, PyCapsule>, Bound<'_, PyCapsule>)> {
        let (schema, array) = self.export();
        Ok((
            capsule(py, schema, c"arrow_schema")?,
            capsule(py, array, c"arrow_array")?,
        ))
    }
}

/// `exported` in a capsule named `name`, whose destructor releases it unless it was imported.
fn capsule<'py, T: CStruct + 'static>(
    py: Python<'py>,
    exported: T,
    name: &'static CStr,
) -> PyResult<Bound<'py, PyCapsule>> {
    PyCapsule::new_with_value_and_destructor(py, Exported(exported), name, |mut exported, _| {
        if let Some(release) = *exported.0.release_slot() {
            // SAFETY: not imported (release still set): ours to release, once.
            unsafe { release(&raw mut exported.0) };
        }
    })
}

/// What an exported `ArrowSchema` owns.
struct SchemaData {
    name: CString,
    children: Vec<*mut ArrowSchema>,
}

/// What an exported `ArrowArray` owns.
struct ArrayData {
    _buffers: Vec<Option<Vec<u8>>>,
    pointers: Vec<*const c_void>,
    children: Vec<*mut ArrowArray>,
}

/// A C data interface struct as `export` builds it: its private data is a boxed `Self::Data`,
/// which owns the struct's children (boxed structs of the same kind).
trait CStruct: Sized {
    type Data;
    fn release_slot(&mut self) -> &mut Option<unsafe extern "C" fn(*mut Self)>;
    fn private_data(&self) -> *mut c_void;
    fn children(data: &Self::Data) -> &[*mut Self];
}

/// Implements [`CStruct`] for a C struct whose private data is a boxed `$data`.
macro_rules! c_struct {
    ($struct:ty, $data:ty) => {
        impl CStruct for $struct {
            type Data = $data;
            fn release_slot(&mut self) -> &mut Option<unsafe extern "C" fn(*mut Self)> {
                &mut self.release
            }
            fn private_data(&self) -> *mut c_void {
                self.private_data
            }
            fn children(data: &$data) -> &[*mut Self] {
                &data.children
            }
        }
    };
}

c_struct!(ArrowSchema, SchemaData);
c_struct!(ArrowArray, ArrayData);

/// The release callback of every struct `export` makes (schemas and arrays alike).
unsafe extern "C" fn release<T: CStruct>(exported: *mut T) {
    // SAFETY: called once by the struct's owner on a struct `export` made, whose private data
    // is a boxed `T::Data` and whose children are boxed structs of ours.
    unsafe {
        let Some(exported) = exported.as_mut() else {
            return;
        };
        let data = Box::from_raw(exported.private_data().cast::<T::Data>());
        for &child in T::children(&data) {
            if let Some(release) = *(*child).release_slot() {
                release(child);
            }
            drop(Box::from_raw(child));
        }
        drop(data);
        *exported.release_slot() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records() -> Column {
        Column::Struct {
            len: 2,
            validity: None,
            fields: vec![
                (
                    "partition",
                    Column::Int64 {
                        len: 2,
                        validity: None,
                        values: [3i64, 4].iter().flat_map(|v| v.to_le_bytes()).collect(),
                    },
                ),
                (
                    "value",
                    Column::Bytes {
                        len: 2,
                        validity: Some(vec![0b01]),
                        utf8: false,
                        large: false,
                        offsets: [0i32, 1, 1].iter().flat_map(|v| v.to_le_bytes()).collect(),
                        data: b"x".to_vec(),
                    },
                ),
            ],
        }
    }

    #[test]
    fn a_tree_exports_with_its_formats_buffers_and_children_and_releases_once() {
        let mut node = Node::new("", records());
        if let Some(partition) = node.child_mut("partition") {
            partition.narrow_int64_to_int32();
        }
        let (mut schema, mut array) = node.export();
        // SAFETY: the structs and their children were just made by `export` and not released.
        unsafe {
            assert_eq!(CStr::from_ptr(schema.format), c"+s");
            assert_eq!(schema.n_children, 2);
            let partition = &**schema.children;
            assert_eq!(CStr::from_ptr(partition.format), c"i");
            assert_eq!(CStr::from_ptr(partition.name), c"partition");
            assert_eq!(CStr::from_ptr((**schema.children.add(1)).format), c"z");
            assert_eq!((array.length, array.n_buffers, array.n_children), (2, 1, 2));
            let partition = &**array.children;
            assert_eq!((partition.n_buffers, partition.null_count), (2, 0));
            let narrowed = std::slice::from_raw_parts((*partition.buffers.add(1)).cast::<i32>(), 2);
            assert_eq!(narrowed, [3, 4]);
            let bytes = &**array.children.add(1);
            assert_eq!((bytes.n_buffers, bytes.null_count), (3, -1));
            assert!(!(*bytes.buffers).is_null(), "the validity bitmap travels");
            release(&raw mut schema);
            release(&raw mut array);
        }
        assert!(schema.release.is_none() && array.release.is_none());
    }

    #[test]
    fn an_empty_buffer_points_somewhere_aligned_and_an_absent_bitmap_nowhere() {
        let column = Column::Bytes {
            len: 0,
            validity: None,
            utf8: true,
            large: false,
            offsets: 0i32.to_le_bytes().to_vec(),
            data: Vec::new(),
        };
        let (mut schema, mut array) = Node::new("empty", column).export();
        // SAFETY: as above.
        unsafe {
            assert!((*array.buffers).is_null());
            let data = *array.buffers.add(2);
            assert!(!data.is_null() && data.cast::<u64>().is_aligned());
            release(&raw mut schema);
            release(&raw mut array);
        }
    }
}
