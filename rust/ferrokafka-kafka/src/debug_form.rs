//! The `Debug` form of an engine handle: its name and the one field worth showing (its
//! settings, options or topic), the rest (clients, threads, locks) elided as `..`, so a handle
//! prints without a lock taken and never shows a secret its clients hold.

/// Implements `Debug` for `$handle` showing only its `$field`.
macro_rules! debug_showing {
    ($handle:ident, $field:ident) => {
        impl std::fmt::Debug for $handle {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($handle))
                    .field(stringify!($field), &self.$field)
                    .finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use debug_showing;
