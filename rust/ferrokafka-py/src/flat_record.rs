//! `frozen_record!`: a typed value of `ferrokafka._native` (an event, a view, metadata) whose
//! fields Python reads as attributes; and `flat_record!`, such a record that is a snapshot of plain
//! fields (stats, status rows) and whose `as_dict()` gives the same fields as the dict a public
//! `stats()` or `status()` returns, so the field list is written once.

/// Declares a frozen pyclass of `ferrokafka._native` (`"PythonName" RustName { field: Type,
/// ... }`) whose fields are read-only attributes.
macro_rules! frozen_record {
    (
        $(#[$meta:meta])*
        $py_name:literal $name:ident { $($(#[$field_meta:meta])* $field:ident: $ty:ty,)* }
    ) => {
        $(#[$meta])*
        #[::pyo3::pyclass(name = $py_name, module = "ferrokafka._native", frozen, get_all)]
        pub struct $name {
            $($(#[$field_meta])* $field: $ty,)*
        }
    };
}

/// Declares a frozen pyclass (`"PythonName" RustName { field: Type, ... }`) whose fields are
/// read-only attributes, with an `as_dict()` method giving them under the same names. Fields
/// in a trailing `records { field: RecordType, ... }` hold another flat record or None
/// (`Option<Py<RecordType>>`); `as_dict()` gives each as that record's dict, or None.
macro_rules! flat_record {
    (
        $(#[$meta:meta])*
        $py_name:literal $name:ident { $($(#[$field_meta:meta])* $field:ident: $ty:ty,)* }
        $(records { $($(#[$record_meta:meta])* $record:ident: $record_ty:ty,)* })?
    ) => {
        $crate::flat_record::frozen_record! {
            $(#[$meta])*
            $py_name $name {
                $($(#[$field_meta])* $field: $ty,)*
                $($($(#[$record_meta])* $record: Option<::pyo3::Py<$record_ty>>,)*)?
            }
        }

        #[::pyo3::pymethods]
        impl $name {
            /// The fields as a dict.
            pub(crate) fn as_dict<'py>(
                &self,
                py: ::pyo3::Python<'py>,
            ) -> ::pyo3::PyResult<::pyo3::Bound<'py, ::pyo3::types::PyDict>> {
                use ::pyo3::types::PyDictMethods;
                let dict = ::pyo3::types::PyDict::new(py);
                $(dict.set_item(stringify!($field), &self.$field)?;)*
                $($(
                    let record = match &self.$record {
                        Some(record) => Some(record.get().as_dict(py)?),
                        None => None,
                    };
                    dict.set_item(stringify!($record), record)?;
                )*)?
                Ok(dict)
            }
        }
    };
}

pub(crate) use {flat_record, frozen_record};

/// The value of a `records` field: `value` as its record, None when unknown.
pub(crate) fn record_of<T, R>(
    py: ::pyo3::Python<'_>,
    value: Option<T>,
) -> ::pyo3::PyResult<Option<::pyo3::Py<R>>>
where
    R: ::pyo3::PyClass + From<T> + Into<::pyo3::PyClassInitializer<R>>,
{
    value.map(|v| ::pyo3::Py::new(py, R::from(v))).transpose()
}
