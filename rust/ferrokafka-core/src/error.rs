//! The one error type of the core. Every fallible core operation returns [`CoreError`].
//!
//! Invariants: variants describe *what* was wrong with the input (never how the caller should
//! react); each carries enough context (a field or header name, a limit) for a clear message at the
//! Python boundary, where `ferrokafka-py` maps them to the exception hierarchy.

/// Errors raised by pure core logic: bad input, corrupt or oversized encoded data.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CoreError {
    /// An argument is outside the accepted domain; the message names it.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// An operation was called in a lifecycle state that does not allow it.
    #[error("cannot {operation} while {state}")]
    InvalidState {
        /// The refused operation, e.g. `"apply a record"`.
        operation: &'static str,
        /// The state the object was in, e.g. `"stopped"`.
        state: &'static str,
    },

    /// Encoded data is malformed (corrupt zlib stream, truncated marker, bad JSON, ...).
    #[error("corrupt {what}")]
    Corrupt {
        /// What was corrupt and, where known, how.
        what: String,
    },

    /// Data exceeds a size or count limit.
    #[error("{what} exceeds the limit of {limit}")]
    TooLarge {
        /// What was too large, e.g. `"inflated output (bytes)"`.
        what: &'static str,
        /// The limit that was exceeded.
        limit: u64,
    },

    /// Data was written by a newer (or unknown) schema or format version.
    #[error("unsupported {what} version {found} (supported: {supported})")]
    UnsupportedVersion {
        /// Which format, e.g. `"schedule schema"`.
        what: &'static str,
        /// The version found in the data.
        found: String,
        /// The newest version this build understands.
        supported: &'static str,
    },

    /// A required header is absent.
    #[error("missing header {name}")]
    MissingHeader {
        /// The header name.
        name: &'static str,
    },

    /// A header is present but its value is not acceptable.
    #[error("invalid header {name}: {reason}")]
    InvalidHeader {
        /// The header name.
        name: &'static str,
        /// Why the value was refused.
        reason: String,
    },

    /// A decoded or to-be-encoded document fails schema validation.
    #[error("invalid {field}: {reason}")]
    InvalidField {
        /// Dotted path of the field, e.g. `"process.id"`.
        field: String,
        /// Why the value was refused.
        reason: String,
    },
}

impl CoreError {
    /// Shorthand for [`CoreError::Corrupt`].
    pub(crate) fn corrupt(what: impl Into<String>) -> Self {
        Self::Corrupt { what: what.into() }
    }

    /// Shorthand for [`CoreError::InvalidField`].
    pub(crate) fn invalid_field(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidField {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
