//! `flat_record!`: a typed snapshot of plain fields (stats, status rows) that Python reads as
//! attributes, and whose `as_dict()` gives the same fields as the dict a public `stats()` or
//! `status()` returns, so the field list is written once.

/// Declares a frozen pyclass (`"PythonName" RustName { field: Type, ... }`) whose fields are
/// read-only attributes, with an `as_dict()` method giving them under the same names.
macro_rules! flat_record {
    (
        $(#[$meta:meta])*
        $py_name:literal $name:ident { $($(#[$field_meta:meta])* $field:ident: $ty:ty,)* }
    ) => {
        $(#[$meta])*
        #[::pyo3::pyclass(name = $py_name, module = "ferrokafka._native", frozen, get_all)]
        pub struct $name {
            $($(#[$field_meta])* $field: $ty,)*
        }

        #[::pyo3::pymethods]
        impl $name {
            /// The fields as a dict.
            fn as_dict<'py>(
                &self,
                py: ::pyo3::Python<'py>,
            ) -> ::pyo3::PyResult<::pyo3::Bound<'py, ::pyo3::types::PyDict>> {
                use ::pyo3::types::PyDictMethods;
                let dict = ::pyo3::types::PyDict::new(py);
                $(dict.set_item(stringify!($field), &self.$field)?;)*
                Ok(dict)
            }
        }
    };
}

pub(crate) use flat_record;
