//! Validated JSON documents carried zlib-compressed (the `zlib: true` payloads of scheduler
//! state reports, process reports and error reports), and the schema-version rule they share.
//!
//! A document is written from its typed form ([`encode_document`]) or from JSON a caller gives
//! ([`encode_json_document`]). Reading is lenient where Karafka's older schemas need it (serde
//! defaults fill what an older writer did not send); writing JSON is not: the document is read
//! with those same types, and if what would be written differs from what was given anywhere
//! (a missing field filled with a default, `true` read as `false`, an array read as an object,
//! an unknown field dropped), the document is refused naming the first such field. Only the
//! fields a document lists in [`Document::FILLED_WHEN_MISSING`] may be left out and are written
//! with their default.
//!
//! Invariants: [`encode_document`] and [`encode_json_document`] validate before serialising, so
//! an invalid document never reaches a topic, and [`encode_json_document`] writes the JSON it was
//! given or nothing; [`decode_document`] inflates at most the caller's limit before any JSON
//! parsing, reports JSON syntax or shape errors as [`CoreError::Corrupt`] and validates the result;
//! [`DocumentDecoder`] decodes exactly as it does.

use std::cmp::Ordering;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::CoreError;
use crate::codec::zlib;

/// A JSON document with a schema that can be checked.
pub trait Document: Serialize + DeserializeOwned {
    /// Name used in error messages, e.g. `"state report"`.
    const NAME: &'static str;

    /// Checks the document against its schema (required fields, versions, limits): what any
    /// document read must pass.
    fn validate(&self) -> Result<(), CoreError>;

    /// Dotted paths of the fields that may be missing from the JSON given to
    /// [`encode_json_document`]: they are written with their default (none by default).
    const FILLED_WHEN_MISSING: &'static [&'static str] = &[];

    /// The further checks of a document this build writes, over the JSON to be written (none
    /// by default).
    fn validate_written(_json: &Value) -> Result<(), CoreError> {
        Ok(())
    }
}

/// Validates `document` (as read and as written), serialises it as JSON and compresses it with zlib at `level`.
pub fn encode_document<T: Document>(document: &T, level: u32) -> Result<Vec<u8>, CoreError> {
    document.validate()?;
    let json = serde_json::to_value(document).map_err(|err| {
        CoreError::InvalidArgument(format!("{} is not serialisable as JSON: {err}", T::NAME))
    })?;
    T::validate_written(&json)?;
    pack(&json, level)
}

/// Validates the document `json` (as written, then as read), refuses it if it would not be
/// written exactly as given (see the module docs), and compresses it with zlib at `level`.
pub fn encode_json_document<T: Document>(json: &Value, level: u32) -> Result<Vec<u8>, CoreError> {
    T::validate_written(json)?;
    let document =
        T::deserialize(json).map_err(|err| CoreError::invalid_field(T::NAME, err.to_string()))?;
    let written = serde_json::to_value(&document).map_err(|err| {
        CoreError::InvalidArgument(format!("{} is not serialisable as JSON: {err}", T::NAME))
    })?;
    let mut path = String::new();
    if let Some(reason) = first_change(json, &written, &mut path, T::FILLED_WHEN_MISSING) {
        let field = if path.is_empty() { T::NAME } else { &path };
        return Err(CoreError::invalid_field(field, reason));
    }
    document.validate()?;
    pack(&written, level)
}

fn pack(json: &Value, level: u32) -> Result<Vec<u8>, CoreError> {
    let text = serde_json::to_vec(json)
        .map_err(|err| CoreError::InvalidArgument(format!("not serialisable as JSON: {err}")))?;
    zlib::deflate(&text, level)
}

/// Longest value quoted in a refusal, in characters.
const QUOTED_CHARS: usize = 60;

fn quoted(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text,
    }
}

/// Why `written` is not `given`, with `path` left at the first place they differ; `None` when
/// they are the same document. An integer given where a float is written is the same number.
fn first_change(
    given: &Value,
    written: &Value,
    path: &mut String,
    filled: &[&str],
) -> Option<String> {
    let here = path.len();
    let enter = |path: &mut String, key: &str| {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    };
    match (given, written) {
        (Value::Object(given), Value::Object(written)) => {
            for (key, given_value) in given {
                enter(path, key);
                let Some(written_value) = written.get(key) else {
                    return Some(if given_value.is_null() {
                        "null is not valid here (it would be left out)".into()
                    } else {
                        "not a field of this schema".into()
                    });
                };
                if let Some(reason) = first_change(given_value, written_value, path, filled) {
                    return Some(reason);
                }
                path.truncate(here);
            }
            for key in written.keys().filter(|key| !given.contains_key(*key)) {
                enter(path, key);
                if !filled.contains(&path.as_str()) {
                    return Some("required field missing".into());
                }
                path.truncate(here);
            }
            None
        }
        (Value::Array(given), Value::Array(written)) if given.len() == written.len() => {
            for (i, (given_item, written_item)) in given.iter().zip(written).enumerate() {
                enter(path, &i.to_string());
                if let Some(reason) = first_change(given_item, written_item, path, filled) {
                    return Some(reason);
                }
                path.truncate(here);
            }
            None
        }
        (Value::Number(number), Value::Number(float))
            if !number.is_f64() && float.is_f64() && number.as_f64() == float.as_f64() =>
        {
            None
        }
        _ if given == written => None,
        _ => Some(format!(
            "{} is not valid here (it would be written as {})",
            quoted(given),
            quoted(written)
        )),
    }
}

/// Inflates at most `max_inflated` bytes of `payload`, parses the JSON and validates it.
pub fn decode_document<T: Document>(payload: &[u8], max_inflated: usize) -> Result<T, CoreError> {
    DocumentDecoder::default().decode(payload, max_inflated)
}

/// [`decode_document`] for many documents in a row (a batch's rows): one zlib decompressor and
/// one buffer for the inflated JSON serve them all, where setting up a decompressor costs more
/// than inflating a small document. The buffer keeps the capacity the largest document needed,
/// never more than its limit + 1 bytes (the bomb limit holds per document as in [`zlib::inflate`]).
#[derive(Debug, Default)]
pub struct DocumentDecoder {
    inflater: zlib::Inflater,
    json: Vec<u8>,
}

impl DocumentDecoder {
    /// [`decode_document`] with this decoder's decompressor and buffer.
    pub fn decode<T: Document>(
        &mut self,
        payload: &[u8],
        max_inflated: usize,
    ) -> Result<T, CoreError> {
        self.json.clear();
        self.inflater
            .inflate_into(payload, max_inflated, &mut self.json)?;
        let document: T = serde_json::from_slice(&self.json)
            .map_err(|err| CoreError::corrupt(format!("{} JSON: {err}", T::NAME)))?;
        document.validate()?;
        Ok(document)
    }
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
