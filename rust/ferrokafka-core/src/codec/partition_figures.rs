//! Karafka Web's figures of one partition (librdkafka's partition statistics under Karafka's
//! names, with the `_d` and `_fd` decorations), declared once for the two structs that carry
//! them: the process report's partition ([`crate::codec::report::PartitionReport`], the wire
//! schema) and the engines' statistics of a partition
//! ([`crate::tracking::PartitionStatistics`], what a report is built from).
//!
//! A macro rather than two shared structs flattened into both: the figures stay plain fields
//! (no `.position.lag` at every reader), and serde's derive stays the flat one, so decoding a
//! report does not go through flatten's buffered map and `deny_unknown_fields` keeps working.
//! The figures come in two runs, `..position` (the consumer's lags, offsets and fetch state)
//! and `..bounds` (the log's watermarks, EOF and last stable offset), because the report puts
//! `poll_state` between them and its JSON field order is Karafka Web's.
//!
//! Invariants: every figure defaults to librdkafka's "unknown" (`-1001` offsets, `-1` lags,
//! `0` changes and freeze durations, an empty fetch state).

/// Declares `pub struct $name` with its own fields (`pub name: Type = default,`) and the
/// partition figures where `..position,` and `..bounds,` stand, plus its `Default` (each own
/// field's given default, each figure's "unknown").
macro_rules! with_partition_figures {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$head_meta:meta])* pub $head:ident: $head_type:ty = $head_default:expr,)*
            ..position,
            $($(#[$middle_meta:meta])* pub $middle:ident: $middle_type:ty = $middle_default:expr,)*
            ..bounds,
            $($(#[$tail_meta:meta])* pub $tail:ident: $tail_type:ty = $tail_default:expr,)*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$head_meta])* pub $head: $head_type,)*
            /// librdkafka `consumer_lag`: lag to the committed offset (-1: unknown).
            pub lag: i64,
            /// Change of `lag`.
            pub lag_d: i64,
            /// librdkafka `consumer_lag_stored`: lag to the stored offset (-1: unknown).
            pub lag_stored: i64,
            /// Change of `lag_stored`.
            pub lag_stored_d: i64,
            /// The last offset the broker confirmed committed for the group.
            pub committed_offset: i64,
            /// Milliseconds `committed_offset` has not changed.
            pub committed_offset_fd: u64,
            /// The offset librdkafka would commit next (its offset store).
            pub stored_offset: i64,
            /// Milliseconds `stored_offset` has not changed.
            pub stored_offset_fd: u64,
            /// librdkafka's fetch state (`active`, `offset-query`, `stopped`, ...).
            pub fetch_state: String,
            $($(#[$middle_meta])* pub $middle: $middle_type,)*
            /// High watermark.
            pub hi_offset: i64,
            /// Milliseconds `hi_offset` has not changed.
            pub hi_offset_fd: u64,
            /// Low watermark.
            pub lo_offset: i64,
            /// Offset of the last partition EOF.
            pub eof_offset: i64,
            /// Last stable offset (the end a `read_committed` consumer can reach).
            pub ls_offset: i64,
            /// Change of `ls_offset`.
            pub ls_offset_d: i64,
            /// Milliseconds `ls_offset` has not changed.
            pub ls_offset_fd: u64,
            $($(#[$tail_meta])* pub $tail: $tail_type,)*
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $($head: $head_default,)*
                    lag: -1,
                    lag_d: 0,
                    lag_stored: -1,
                    lag_stored_d: 0,
                    committed_offset: $crate::codec::report::UNKNOWN_OFFSET,
                    committed_offset_fd: 0,
                    stored_offset: $crate::codec::report::UNKNOWN_OFFSET,
                    stored_offset_fd: 0,
                    fetch_state: String::new(),
                    $($middle: $middle_default,)*
                    hi_offset: $crate::codec::report::UNKNOWN_OFFSET,
                    hi_offset_fd: 0,
                    lo_offset: $crate::codec::report::UNKNOWN_OFFSET,
                    eof_offset: $crate::codec::report::UNKNOWN_OFFSET,
                    ls_offset: $crate::codec::report::UNKNOWN_OFFSET,
                    ls_offset_d: 0,
                    ls_offset_fd: 0,
                    $($tail: $tail_default,)*
                }
            }
        }
    };
}
pub(crate) use with_partition_figures;
