//! Reading a component's options: each native constructor takes its options as one value (the
//! attributes of a Python options object such as `ferrokafka.ConsumerOptions`, or its keyword
//! arguments, read by the engine options' [`FromKeywords`] impl in the component's binding) and
//! converts it once into the engine's options type, whose `validate` holds the rules. Here each
//! field is converted to its Rust type, with errors that name the field:
//! `TypeError` for a value of the wrong kind, `ValueError` for one the Rust type cannot hold (a
//! negative count) or a name that is not one of a choice. Python keeps only the keyword
//! arguments, their defaults and their docs.

use std::cell::RefCell;
use std::time::Duration;

use ferrokafka_core::PartitionKeyHashing;
use ferrokafka_kafka::{ClientSettings, KafkaResult};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};

use crate::blocking::{run_detached, seconds_or_off, timeout_arg};
use crate::convert::{self, int_within, settings_from_dict, utf8_text};
use crate::errors::NativeResult;
use crate::errors::{invalid_argument, malformed, wrong_type};

/// The librdkafka `config` dict of a native constructor.
pub type Config<'a, 'py> = &'a Bound<'py, PyDict>;
/// The `**options` of a native constructor.
pub type Keywords<'a, 'py> = &'a Bound<'py, PyDict>;

/// An engine's options, read from a native constructor's keyword arguments.
pub trait FromKeywords: Sized {
    /// Converts each field; the engine validates the whole when it is created.
    fn read(fields: &Fields<'_, '_>) -> PyResult<Self>;
}

/// The engine a native constructor makes from its `config` and `**options` (every keyword
/// argument read, an unknown one refused): `build` runs detached and interruptible
/// ([`run_detached`]), as creating librdkafka clients takes milliseconds and a transactional
/// producer waits for the broker (`init_transactions`, up to 30 s when it is unreachable), which
/// Ctrl-C or a daemon's signal handler must be able to cut short. An engine whose constructor
/// was interrupted is dropped once made, which closes it (a daemon is asked to stop).
pub fn build_engine<T: FromKeywords + Send + 'static, E: Send + 'static>(
    py: Python<'_>,
    config: Config<'_, '_>,
    options: Option<Keywords<'_, '_>>,
    build: impl FnOnce(ClientSettings, T) -> KafkaResult<E> + Send + 'static,
) -> NativeResult<E> {
    let settings = settings_from_dict(config)?;
    let fields = Fields::keywords(options);
    let options = T::read(&fields)?;
    fields.finish()?;
    Ok(run_detached(py, move || build(settings, options))??)
}

/// The fields of one component's options, read by name.
pub struct Fields<'a, 'py> {
    source: Source<'a, 'py>,
    /// The names read so far: a keyword argument left over is an unknown option.
    read: RefCell<Vec<String>>,
}

enum Source<'a, 'py> {
    Attributes(&'a Bound<'py, PyAny>),
    Keywords(Option<Keywords<'a, 'py>>),
}

impl<'a, 'py> Fields<'a, 'py> {
    /// The attributes of a Python options object.
    pub fn attributes(object: &'a Bound<'py, PyAny>) -> Self {
        Fields {
            source: Source::Attributes(object),
            read: RefCell::default(),
        }
    }

    /// The keyword arguments of a native constructor.
    fn keywords(options: Option<Keywords<'a, 'py>>) -> Self {
        Fields {
            source: Source::Keywords(options),
            read: RefCell::default(),
        }
    }

    fn value(&self, name: &str) -> PyResult<Bound<'py, PyAny>> {
        match &self.source {
            Source::Attributes(object) => object.getattr(name),
            Source::Keywords(options) => {
                let value = options.map(|o| o.get_item(name)).transpose()?.flatten();
                self.read.borrow_mut().push(name.to_owned());
                value.ok_or_else(|| malformed(format!("missing option {name:?}")))
            }
        }
    }

    /// Refuses keyword arguments that no field read: a misspelt option is never ignored.
    fn finish(self) -> PyResult<()> {
        if let Source::Keywords(Some(options)) = self.source {
            let read = self.read.borrow();
            for name in options.keys() {
                let name: String = name.extract()?;
                if !read.contains(&name) {
                    return Err(malformed(format!("unexpected option {name:?}")));
                }
            }
        }
        Ok(())
    }

    /// A count or size: an `int` (not a `bool`) that `T` holds.
    pub fn count<T: TryFrom<u64>>(&self, name: &str) -> PyResult<T> {
        count_of(name, &self.value(name)?)
    }

    /// A count that may be `None` (unbounded).
    pub fn optional_count<T: TryFrom<u64>>(&self, name: &str) -> PyResult<Option<T>> {
        let value = self.value(name)?;
        if value.is_none() {
            return Ok(None);
        }
        count_of(name, &value).map(Some)
    }

    /// A signed `int` (not a `bool`).
    pub fn int(&self, name: &str) -> PyResult<i64> {
        int_within(&self.value(name)?, name, i64::MIN, i64::MAX)
    }

    /// Seconds that must be positive.
    pub fn seconds(&self, name: &str) -> PyResult<Duration> {
        timeout_arg(name, self.number_of_seconds(name)?)
    }

    /// Seconds where 0 means off.
    pub fn seconds_or_off(&self, name: &str) -> PyResult<Duration> {
        seconds_or_off(name, self.number_of_seconds(name)?)
    }

    fn number_of_seconds(&self, name: &str) -> PyResult<f64> {
        let value = self.value(name)?;
        if value.is_instance_of::<PyBool>()
            || !(value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>())
        {
            return Err(malformed(format!(
                "{name} must be a number of seconds, got {}",
                value.repr()?
            )));
        }
        value.extract()
    }

    /// A `bool`.
    pub fn flag(&self, name: &str) -> PyResult<bool> {
        let value = self.value(name)?;
        value
            .extract()
            .map_err(|_| wrong_type(format_args!("{name} must be a bool"), &value))
    }

    /// A `str`.
    pub fn text(&self, name: &str) -> PyResult<String> {
        let value = self.value(name)?;
        utf8_text(name, &value)
    }

    /// A `str` or `None`.
    pub fn optional_text(&self, name: &str) -> PyResult<Option<String>> {
        let value = self.value(name)?;
        if value.is_none() {
            return Ok(None);
        }
        utf8_text(name, &value).map(Some)
    }

    /// A list of topic names (a single `str` is refused, not read as its characters).
    pub fn topics(&self, name: &str) -> PyResult<Vec<String>> {
        let value = self.value(name)?;
        let refused = || wrong_type(format_args!("{name} must be a list of topic names"), &value);
        if value.is_instance_of::<PyString>() {
            return Err(refused());
        }
        value.extract().map_err(|_| refused())
    }

    /// `partition_key_hashing`: a rule of the core's, by its name.
    pub fn partition_key_hashing(&self) -> PyResult<PartitionKeyHashing> {
        let name = self.text("partition_key_hashing")?;
        Ok(convert::partition_key_hashing(&name)?)
    }

    /// One of `choices`, by its name: the one place a Python string becomes the engine's enum.
    pub fn choice<T: Copy>(&self, name: &str, choices: &[(&str, T)]) -> PyResult<T> {
        let value = self.value(name)?;
        let given: Option<String> = value.extract().ok();
        if let Some(found) = choices
            .iter()
            .find(|(choice, _)| given.as_deref() == Some(*choice))
        {
            return Ok(found.1);
        }
        let names: Vec<String> = choices.iter().map(|(n, _)| format!("'{n}'")).collect();
        let listed = match names.as_slice() {
            [first @ .., last] if !first.is_empty() => format!("{} or {last}", first.join(", ")),
            only => only.join(""),
        };
        Err(invalid_argument(format!(
            "{name} must be {listed}, got {}",
            value.repr()?
        )))
    }
}

/// A count `T` holds: from 0 to the largest `T` (or i64's), by the bindings' one int rule.
fn count_of<T: TryFrom<u64>>(name: &str, value: &Bound<'_, PyAny>) -> PyResult<T> {
    let count = int_within(value, name, 0, largest::<T>())?;
    u64::try_from(count)
        .ok()
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| invalid_argument(format!("{name} is too large, got {count}")))
}

/// The largest value of the unsigned type `T` that an i64 also holds (the counts here are u8 to
/// u64 and usize).
fn largest<T: TryFrom<u64>>() -> i64 {
    [
        i64::MAX as u64,
        u64::from(u32::MAX),
        u64::from(u16::MAX),
        u64::from(u8::MAX),
    ]
    .into_iter()
    .find(|&n| T::try_from(n).is_ok())
    .map_or(0, |n| n as i64)
}
