//! Validated JSON documents carried zlib-compressed (the `zlib: true` payloads of scheduler
//! state reports, process reports and error reports), and the schema-version rule they share.
//!
//! Invariants: [`encode_document`] validates before serialising, so an invalid document never
//! reaches a topic; [`decode_document`] inflates at most the caller's limit before any JSON
//! parsing, reports JSON syntax or shape errors as [`CoreError::Corrupt`] and validates the result.

use std::cmp::Ordering;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::CoreError;
use crate::codec::zlib;

/// A JSON document with a schema that can be checked.
pub trait Document: Serialize + DeserializeOwned {
    /// Name used in error messages, e.g. `"state report"`.
    const NAME: &'static str;

    /// Checks the document against its schema (required fields, versions, limits): what any
    /// document read must pass.
    fn validate(&self) -> Result<(), CoreError>;

    /// The further checks of a document this build writes (none by default).
    fn validate_for_write(&self) -> Result<(), CoreError> {
        Ok(())
    }
}

/// Validates `document` (as read and as written), serialises it as JSON and compresses it with zlib at `level`.
pub fn encode_document<T: Document>(document: &T, level: u32) -> Result<Vec<u8>, CoreError> {
    document.validate()?;
    document.validate_for_write()?;
    let json = serde_json::to_vec(document).map_err(|err| {
        CoreError::InvalidArgument(format!("{} is not serialisable as JSON: {err}", T::NAME))
    })?;
    zlib::deflate(&json, level)
}

/// Inflates at most `max_inflated` bytes of `payload`, parses the JSON and validates it.
pub fn decode_document<T: Document>(payload: &[u8], max_inflated: usize) -> Result<T, CoreError> {
    let json = zlib::inflate(payload, max_inflated)?;
    let document: T = serde_json::from_slice(&json)
        .map_err(|err| CoreError::corrupt(format!("{} JSON: {err}", T::NAME)))?;
    document.validate()?;
    Ok(document)
}

/// Checks a `"major.minor.patch"` schema version against the newest one supported: malformed is
/// an [`CoreError::InvalidField`] on `field`, newer is [`CoreError::UnsupportedVersion`].
pub fn check_schema_version(
    what: &'static str,
    field: &str,
    found: &str,
    supported: &'static str,
) -> Result<(), CoreError> {
    match compare_versions(found, supported) {
        None => Err(CoreError::invalid_field(
            field,
            format!("not a major.minor.patch version: {found:?}"),
        )),
        Some(Ordering::Greater) => Err(CoreError::UnsupportedVersion {
            what,
            found: found.to_owned(),
            supported,
        }),
        Some(_) => Ok(()),
    }
}

/// Orders two `"major.minor.patch"` versions numerically; `None` if either is malformed.
pub(crate) fn compare_versions(left: &str, right: &str) -> Option<Ordering> {
    let parse = |text: &str| -> Option<[u64; 3]> {
        let mut parts = text.split('.');
        let mut version = [0u64; 3];
        for slot in &mut version {
            let part = parts.next()?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            *slot = part.parse().ok()?;
        }
        parts.next().is_none().then_some(version)
    };
    Some(parse(left)?.cmp(&parse(right)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(compare_versions("1.10.0", "1.9.9"), Some(Ordering::Greater));
        assert_eq!(compare_versions("1.0.0", "1.0.0"), Some(Ordering::Equal));
        assert_eq!(compare_versions("1.0", "1.0.0"), None);
        assert_eq!(compare_versions("1.0.0.0", "1.0.0"), None);
        assert_eq!(compare_versions("1.+0.0", "1.0.0"), None);
    }
}
