//! Conversions from Python arguments to owned Rust values, done while attached so that the
//! work after them can run detached.

use std::collections::BTreeMap;

use ferrokafka_core::PartitionKeyHashing;
use ferrokafka_kafka::record::{HeaderList, OutgoingRecord};
use ferrokafka_kafka::{ClientSettings, KafkaIoError};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString};

use crate::errors::{
    NativeError, NativeResult, bad_config, config_not_utf8, invalid_argument, malformed, not_utf8,
    wrong_type,
};
use crate::token_callback::token_source;

/// A librdkafka config dict: keys are `str`, values `str`, `int`, `float` or `bool`; and
/// `oauth_cb`, a callable making OAUTHBEARER tokens (see [`crate::token_callback`]).
pub fn settings_from_dict(config: &Bound<'_, PyDict>) -> NativeResult<ClientSettings> {
    let mut entries = Vec::with_capacity(config.len());
    let mut oauth_cb = None;
    for (key, value) in config.iter() {
        let key = config_key(&key)?;
        if key == "oauth_cb" {
            if !value.is_callable() {
                let expectation =
                    "oauth_cb must be a callable returning (token, expiry_epoch_seconds)";
                return Err(bad_config(expectation, &value).into());
            }
            oauth_cb = Some(value.unbind());
            continue;
        }
        let value = config_value(&key, &value)?;
        entries.push((key, value));
    }
    let settings = ClientSettings::new(entries)?;
    Ok(match oauth_cb {
        Some(callback) => settings.with_token_source(token_source(callback))?,
        None => settings,
    })
}

/// `bytes`, `str` (encoded as UTF-8) or `None`, for the argument called `name`.
pub fn optional_bytes(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<u8>>> {
    match value {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => {
            if let Ok(bytes) = v.cast::<PyBytes>() {
                Ok(Some(bytes.as_bytes().to_vec()))
            } else if let Ok(text) = v.cast::<PyString>() {
                Ok(Some(text.to_str()?.as_bytes().to_vec()))
            } else {
                Err(wrong_type(format!("{name} must be bytes, str or None"), v))
            }
        }
    }
}

/// A record's `partition_key`: bytes or str like [`optional_bytes`], never empty (WaterDrop
/// refuses an empty one, and it would choose no partition).
pub fn partition_key(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<u8>>> {
    let key = optional_bytes("partition_key", value)?;
    if key.as_ref().is_some_and(Vec::is_empty) {
        return Err(invalid_argument(
            "partition_key must not be empty (WaterDrop refuses an empty one too)",
        ));
    }
    Ok(key)
}

/// The `partition_key_hashing` rule named `name` ("waterdrop" or "bytes").
pub fn partition_key_hashing(name: &str) -> NativeResult<PartitionKeyHashing> {
    Ok(PartitionKeyHashing::from_name(name)?)
}

/// Headers as a dict or as a list of `(str, bytes | str | None)` pairs (repeated names allowed).
pub fn headers(value: Option<&Bound<'_, PyAny>>) -> PyResult<HeaderList> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    let pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = if let Ok(dict) = value.cast::<PyDict>()
    {
        dict.iter().collect()
    } else {
        value
            .try_iter()
            .map_err(|_| {
                wrong_type(
                    "headers must be a dict or a list of (name, value) pairs",
                    value,
                )
            })?
            .map(|item| {
                item?
                    .extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>()
                    .map_err(|_| malformed("each header must be a (name, value) pair"))
            })
            .collect::<PyResult<_>>()?
    };
    pairs
        .into_iter()
        .map(|(name, value)| {
            let name: String = name
                .extract()
                .map_err(|_| wrong_type("header names must be str", &name))?;
            // Sent whole, but every librdkafka consumer (ours, confluent's, rdkafka's) reads a
            // header name as a C string, cut at the first NUL byte.
            if name.contains('\0') {
                return Err(invalid_argument(format!(
                    "header name {name:?} contains a NUL byte"
                )));
            }
            let value = optional_bytes(&format!("header {name:?}"), Some(&value))?;
            Ok((name, value))
        })
        .collect()
}

/// The arguments of a `produce` call, checked and copied.
#[allow(clippy::too_many_arguments)]
pub fn outgoing_record(
    topic: &Bound<'_, PyAny>,
    value: Option<&Bound<'_, PyAny>>,
    key: Option<&Bound<'_, PyAny>>,
    partition: Option<PartitionArg>,
    header_arg: Option<&Bound<'_, PyAny>>,
    timestamp: Option<TimestampArg>,
) -> PyResult<OutgoingRecord> {
    let topic = utf8_text("topic", topic)?;
    KafkaIoError::check_topic("topic", &topic).map_err(NativeError::from)?;
    let (partition, timestamp) = (partition.map(|p| p.0), timestamp.map(|t| t.0));
    Ok(OutgoingRecord {
        topic,
        partition,
        key: optional_bytes("key", key)?,
        value: optional_bytes("value", value)?,
        headers: headers(header_arg)?,
        timestamp_ms: timestamp,
    })
}

/// The str `value` of the argument `name`, as UTF-8: a str with a lone surrogate is refused as
/// such ([`not_utf8`]), not as a wrong type ("must be a str, got str").
pub fn utf8_text(name: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    match value.cast::<PyString>() {
        Ok(text) => Ok(text.to_str().map_err(|_| not_utf8(name))?.to_owned()),
        Err(_) => Err(wrong_type(format_args!("{name} must be a str"), value)),
    }
}

/// A config dict's key: a str.
fn config_key(key: &Bound<'_, PyAny>) -> PyResult<String> {
    match key.cast::<PyString>() {
        Ok(text) => Ok(text
            .to_str()
            .map_err(|_| config_not_utf8("a config key"))?
            .to_owned()),
        Err(_) => Err(bad_config("config keys must be str", key)),
    }
}

/// A config dict's value for `key` as the text librdkafka (or the broker) reads: a str, an int or
/// a float as Python writes it, a bool as `true`/`false`.
fn config_value(key: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    if value.is_instance_of::<PyBool>() {
        Ok(if value.is_truthy()? { "true" } else { "false" }.to_owned())
    } else if let Ok(text) = value.cast::<PyString>() {
        // Never replaced by U+FFFD: a path (ssl.ca.location) would name another file.
        Ok(text
            .to_str()
            .map_err(|_| config_not_utf8(format_args!("config value for {key:?}")))?
            .to_owned())
    } else if let Ok(number) = value.cast::<PyFloat>() {
        // librdkafka reads "nan" as a number, and NaN passes every range check it makes.
        if !number.value().is_finite() {
            let expectation = format!("config value for {key:?} must be a finite number");
            return Err(bad_config(expectation, value));
        }
        Ok(value.str()?.to_string())
    } else if value.is_instance_of::<PyInt>() {
        Ok(value.str()?.to_string())
    } else {
        let expectation = format!("config value for {key:?} must be str, int, float or bool");
        Err(bad_config(expectation, value))
    }
}

/// A topic's config dict (`NewTopic(config=...)`): keys and values as for a client's config.
pub fn topic_config(config: &Bound<'_, PyDict>) -> PyResult<BTreeMap<String, String>> {
    config
        .iter()
        .map(|(key, value)| {
            let key = config_key(&key)?;
            let value = config_value(&key, &value)?;
            Ok((key, value))
        })
        .collect()
}

/// A list of topic names (`delete_topics`): a single str is refused, not read as its letters.
pub fn topic_names(topics: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    refuse_single_name(topics)?;
    topics
        .try_iter()
        .map_err(|_| wrong_type("topics must be a list of topic names", topics))?
        .map(|topic| utf8_text("each topic", &topic?))
        .collect()
}

/// Refuses a single str (or bytes) where a list of topics is expected.
pub fn refuse_single_name(topics: &Bound<'_, PyAny>) -> PyResult<()> {
    if topics.is_instance_of::<PyString>() || topics.is_instance_of::<PyBytes>() {
        return Err(malformed(
            "topics must be a list, e.g. ['orders'], not a single name",
        ));
    }
    Ok(())
}

/// Declares an int argument type that names itself and its range when refused: PyO3's own
/// extraction of a fixed-size int names neither the argument nor the range of one that does not
/// fit (`OverflowError: can't convert negative int to unsigned`). A default of such a type is
/// not a literal, so a function taking one spells its `text_signature` out.
macro_rules! int_argument {
    ($(#[$meta:meta])* $type:ident($inner:ty): $name:literal from $low:expr, to $high:expr) => {
        $(#[$meta])*
        pub struct $type(pub $inner);

        impl<'a, 'py> FromPyObject<'a, 'py> for $type {
            type Error = PyErr;

            fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
                let n = int_within(&obj, $name, $low, $high)?;
                // In range, so it fits (a usize of 32 bits takes the most it holds).
                Ok($type(<$inner>::try_from(n).unwrap_or(<$inner>::MAX)))
            }
        }
    };
}

int_argument!(
    /// `partition=`: an int from 0 to 2^31 - 1.
    PartitionArg(i32): "partition" from 0, to i64::from(i32::MAX)
);
int_argument!(
    /// `timestamp=`: milliseconds since the epoch.
    TimestampArg(i64): "timestamp" from 0, to i64::MAX
);
int_argument!(
    /// `max_messages=`: a count.
    CountArg(usize): "max_messages" from 0, to i64::MAX
);
int_argument!(
    /// `level=` of the zlib functions: 0 (stored) to 9 (smallest).
    ZlibLevel(u32): "level" from 0, to 9
);
int_argument!(
    /// `max_output=` of `inflate`: bytes.
    MaxOutput(usize): "max_output" from 0, to i64::MAX
);
int_argument!(
    /// `max_inflated=` of the document decoders: bytes.
    MaxInflated(usize): "max_inflated" from 0, to i64::MAX
);
int_argument!(
    /// `num_partitions=` of `NewTopic`: a count, or -1 for the broker's default (0 is refused
    /// where it is used, naming both).
    TopicPartitions(i32): "num_partitions" from -1, to i64::from(i32::MAX)
);
int_argument!(
    /// `replication_factor=` of `NewTopic`: a count (an INT16 on the wire), or -1 for the
    /// broker's default.
    ReplicationFactor(i32): "replication_factor" from -1, to i64::from(i16::MAX)
);
int_argument!(
    /// `partition_count=` of `partition_key_batch`: at least one partition.
    PartitionCount(u32): "partition_count" from 1, to i64::from(i32::MAX)
);

/// The int `value` of the argument `name` (an int, or what has `__index__`: a numpy integer),
/// refused by name unless from `low` to `high`.
pub fn int_within(value: &Bound<'_, PyAny>, name: &str, low: i64, high: i64) -> PyResult<i64> {
    let out_of_range = || {
        invalid_argument(format!(
            "{name} must be an int from {low} to {high}, got {value}"
        ))
    };
    if value.is_instance_of::<PyBool>() {
        return Err(wrong_type(format_args!("{name} must be an int"), value));
    }
    match value.extract::<i64>() {
        Ok(n) if (low..=high).contains(&n) => Ok(n),
        Ok(_) => Err(out_of_range()),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => Err(out_of_range()),
        Err(_) => Err(wrong_type(format_args!("{name} must be an int"), value)),
    }
}

/// The keys of `dict` that are not one of `allowed` (a misspelled field, most likely), in the
/// dict's order; none on the way the dict should be (no allocation, no list of the keys).
pub fn unknown_keys<'py>(dict: &Bound<'py, PyDict>, allowed: &[&str]) -> Vec<Bound<'py, PyAny>> {
    dict.iter()
        .map(|(key, _)| key)
        .filter(|key| {
            !key.extract::<&str>()
                .is_ok_and(|key| allowed.contains(&key))
        })
        .collect()
}
