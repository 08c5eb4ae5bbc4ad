//! Codecs: bounded zlib, JSON documents (state and process reports), the scheduled-message
//! header envelope and the binary redelivery marker format.
//!
//! Invariants: every decoder is total: any input bytes give a value or a [`crate::CoreError`],
//! never a panic, and never an allocation beyond the caller's size limit.

pub mod columnar;
pub mod envelope;
pub mod json;
pub mod marker_codec;
pub mod records;
pub mod report;
pub mod report_rules;
pub mod rows;
pub mod state;
pub mod zlib;

pub(crate) mod partition_figures;
