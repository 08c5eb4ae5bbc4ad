//! `document_view!`: a `view_*` function of `ferrokafka._native`, which inflates and decodes a
//! zlib JSON document (a report, a state) of any schema read and hands it to Python as its typed
//! view, the way `ferrokafka status` reads the reports topics.

/// Declares `#[pyfunction] name(data, max_inflated=DEFAULT_MAX_INFLATED)`: `data` inflated (at
/// most `max_inflated` bytes) and decoded as a `Document` by the core, then turned into its view
/// by `view_of(py, document)` (`name: Document => View, by view_of`).
macro_rules! document_view {
    (
        $(#[$meta:meta])*
        $name:ident: $document:ty => $view:ty, by $view_of:path
    ) => {
        $(#[$meta])*
        #[::pyo3::pyfunction]
        #[pyo3(signature = (
            data,
            max_inflated = $crate::convert::MaxInflated($crate::codec::DEFAULT_MAX_INFLATED),
        ))]
        #[pyo3(text_signature = "(data, max_inflated=...)")]
        pub fn $name(
            py: ::pyo3::Python<'_>,
            data: &[u8],
            max_inflated: $crate::convert::MaxInflated,
        ) -> $crate::errors::NativeResult<$view> {
            let document: $document =
                ::ferrokafka_core::codec::json::decode_document(data, max_inflated.0)?;
            Ok($view_of(py, document)?)
        }
    };
}

pub(crate) use document_view;
