//! The Karafka-compatible scheduled-message envelope: proxy messages for the schedules topic and
//! their `schedule_*` headers, built and parsed.
//!
//! Invariants:
//! - Header names and values are exactly Karafka Pro's (schema "1.0.0"), so Ruby and Python
//!   producers and schedulers interoperate: numbers are decimal ASCII, epochs are Unix *seconds*.
//! - Building validates (non-empty key, epoch within [now - 10 s, now + 100 years], which also
//!   refuses millisecond epochs, payload size: WaterDrop's `max_payload_size` by default);
//!   parsing checks structure and schema version only, because a schedule read back by the
//!   daemon may legitimately be past due.
//! - A header name given twice resolves to its last value (Karafka reads headers as a hash).
//! - Pure: the random part of a default key (a UUID v4) comes from the caller's 16 bytes.

use std::cmp::Ordering;

use crate::CoreError;
use crate::topic_name::require_topic_name;

/// The schedule schema version this build writes and the newest it reads.
pub const SCHEMA_VERSION: &str = "1.0.0";
/// Header: schema version of the proxy message.
pub const SCHEMA_VERSION_HEADER: &str = "schedule_schema_version";
/// Header: when to dispatch, Unix seconds as a decimal string.
pub const TARGET_EPOCH_HEADER: &str = "schedule_target_epoch";
/// Header: the proxy's kind: `schedule`, `cancel` or `tombstone`.
pub const SOURCE_TYPE_HEADER: &str = "schedule_source_type";
/// Header: topic of the message to dispatch.
pub const TARGET_TOPIC_HEADER: &str = "schedule_target_topic";
/// Header: partition of the message to dispatch (optional).
pub const TARGET_PARTITION_HEADER: &str = "schedule_target_partition";
/// Header: key of the message to dispatch (optional).
pub const TARGET_KEY_HEADER: &str = "schedule_target_key";
/// Header: partition key of the message to dispatch (optional).
pub const TARGET_PARTITION_KEY_HEADER: &str = "schedule_target_partition_key";
/// Dispatch-time header: the schedules topic the proxy came from.
pub const SOURCE_TOPIC_HEADER: &str = "schedule_source_topic";
/// Dispatch-time header: the schedules partition the proxy came from.
pub const SOURCE_PARTITION_HEADER: &str = "schedule_source_partition";
/// Dispatch-time header: the proxy's offset (also on the tombstone that retires it).
pub const SOURCE_OFFSET_HEADER: &str = "schedule_source_offset";
/// Dispatch-time header: the proxy's key.
pub const SOURCE_KEY_HEADER: &str = "schedule_source_key";

/// Seconds in 100 Julian years: the farthest ahead a schedule may be.
const HUNDRED_YEARS_SECS: i64 = 3_155_760_000;

/// A Kafka header list: names with byte values, in record order.
pub type Headers = Vec<(String, Vec<u8>)>;

/// What a record on the schedules topic means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceType {
    /// A message to dispatch at an epoch.
    Schedule,
    /// The user cancelled the schedule with this key.
    Cancel,
    /// The scheduler dispatched the schedule with this key (or compaction removed it).
    Tombstone,
}

impl SourceType {
    /// The header value naming this kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Schedule => "schedule",
            Self::Cancel => "cancel",
            Self::Tombstone => "tombstone",
        }
    }
}

/// WaterDrop's default `max_payload_size`: the largest payload (the message value alone, in
/// bytes) its producer accepts, so the largest a Karafka fleet's proxy can carry.
pub const WATERDROP_MAX_PAYLOAD_SIZE: usize = 1_000_012;

/// Limits applied when building a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleLimits {
    /// Largest accepted payload in bytes (default: [`WATERDROP_MAX_PAYLOAD_SIZE`]).
    pub max_payload_bytes: usize,
    /// How far in the past an epoch may be, in seconds (default: 10).
    pub max_past_secs: i64,
    /// How far ahead an epoch may be, in seconds (default: 100 years).
    pub max_future_secs: i64,
}

impl Default for ScheduleLimits {
    fn default() -> Self {
        Self {
            max_payload_bytes: WATERDROP_MAX_PAYLOAD_SIZE,
            max_past_secs: 10,
            max_future_secs: HUNDRED_YEARS_SECS,
        }
    }
}

/// Where and how the scheduled message is finally produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetAddress {
    /// Target topic.
    pub topic: String,
    /// Explicit target partition.
    pub partition: Option<i32>,
    /// Target message key.
    pub key: Option<String>,
    /// Target partition key (chooses the partition by hash).
    pub partition_key: Option<String>,
}

/// The message the user wants delivered later.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetMessage {
    /// Where it goes.
    pub address: TargetAddress,
    /// Its payload (`None` produces a null value).
    pub payload: Option<Vec<u8>>,
    /// Its own headers; they travel on the proxy and are restored at dispatch.
    pub headers: Headers,
}

/// Where the proxy goes: the schedules topic, and optionally the proxy's key and partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Envelope {
    /// The schedules topic.
    pub topic: String,
    /// Proxy key; it identifies the schedule for replacement and cancellation.
    pub key: Option<String>,
    /// Explicit schedules partition.
    pub partition: Option<i32>,
    /// Partition key for the schedules topic.
    pub partition_key: Option<String>,
}

/// A message ready to be produced to the schedules topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyMessage {
    /// The schedules topic.
    pub topic: String,
    /// The proxy key (never empty).
    pub key: String,
    /// Explicit schedules partition.
    pub partition: Option<i32>,
    /// Partition key for the schedules topic.
    pub partition_key: Option<String>,
    /// The target payload for a schedule; `None` for a cancel.
    pub payload: Option<Vec<u8>>,
    /// User headers plus the `schedule_*` headers.
    pub headers: Headers,
}

/// The meaning of a parsed proxy record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyRecord {
    /// Dispatch to `target` at `epoch_secs`.
    Schedule {
        /// Unix seconds.
        epoch_secs: i64,
        /// The target message's address.
        target: TargetAddress,
    },
    /// Cancel the schedule with the record's key.
    Cancel,
    /// The schedule with the record's key was dispatched; `source_offset` is the dispatched
    /// proxy's offset when the header is present.
    Tombstone {
        /// Offset of the dispatched proxy.
        source_offset: Option<u64>,
    },
}

/// Where a proxy record was read, for the dispatch-time headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxySource<'a> {
    /// The schedules topic.
    pub topic: &'a str,
    /// The schedules partition.
    pub partition: i32,
    /// The proxy's offset.
    pub offset: u64,
    /// The proxy's key.
    pub key: &'a str,
}

/// Checks an epoch read from a schedules topic at `now_secs`, with Karafka's bounds: not
/// negative and at most 100 years ahead. A millisecond epoch or `i64::MAX` fails; past epochs pass
/// (they are due at once). Without this check such a record would stay pending with a day no state
/// report can carry.
pub fn validate_stored_epoch(epoch_secs: i64, now_secs: i64) -> Result<(), CoreError> {
    if epoch_secs < 0 || epoch_secs > now_secs.saturating_add(HUNDRED_YEARS_SECS) {
        return Err(CoreError::InvalidArgument(format!(
            "epoch {epoch_secs} is outside 0..=now+100 years (now {now_secs}); epochs are in seconds, not milliseconds"
        )));
    }
    Ok(())
}

/// Checks that `epoch_secs` is a plausible schedule time at `now_secs`: at most
/// `limits.max_past_secs` in the past and `limits.max_future_secs` ahead (a millisecond epoch is
/// thousands of years ahead and so refused).
pub fn validate_epoch(
    epoch_secs: i64,
    now_secs: i64,
    limits: &ScheduleLimits,
) -> Result<(), CoreError> {
    if epoch_secs < now_secs.saturating_sub(limits.max_past_secs) {
        return Err(CoreError::InvalidArgument(format!(
            "epoch {epoch_secs} is more than {} s in the past (now {now_secs})",
            limits.max_past_secs
        )));
    }
    if epoch_secs > now_secs.saturating_add(limits.max_future_secs) {
        return Err(CoreError::InvalidArgument(format!(
            "epoch {epoch_secs} is more than {} s ahead (now {now_secs}); epochs are in seconds, not milliseconds",
            limits.max_future_secs
        )));
    }
    Ok(())
}

/// Formats 16 random bytes as a UUID version 4 string (the version and variant bits are set).
pub fn format_uuid_v4(random: [u8; 16]) -> String {
    let mut bytes = random;
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(36);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    text
}

/// The default proxy key: `"<target_topic>-<uuid4>"`.
pub fn default_proxy_key(target_topic: &str, random: [u8; 16]) -> String {
    format!("{target_topic}-{}", format_uuid_v4(random))
}

/// The headers of a proxy that schedules a message to `address` at `epoch_secs`: the target
/// message's own `headers` followed by the `schedule_*` headers.
///
/// Fails with [`CoreError::InvalidArgument`] for an empty target topic or an out-of-range epoch.
pub fn schedule_headers(
    address: &TargetAddress,
    epoch_secs: i64,
    now_secs: i64,
    limits: &ScheduleLimits,
    mut headers: Headers,
) -> Result<Headers, CoreError> {
    require_topic_name("target topic", &address.topic)?;
    require_partition("target partition", address.partition)?;
    require_non_empty_if_given("target key", address.key.as_deref())?;
    require_non_empty_if_given("target partition_key", address.partition_key.as_deref())?;
    validate_epoch(epoch_secs, now_secs, limits)?;
    set_header(&mut headers, SCHEMA_VERSION_HEADER, SCHEMA_VERSION);
    set_header(&mut headers, TARGET_EPOCH_HEADER, &epoch_secs.to_string());
    set_header(
        &mut headers,
        SOURCE_TYPE_HEADER,
        SourceType::Schedule.as_str(),
    );
    set_header(&mut headers, TARGET_TOPIC_HEADER, &address.topic);
    if let Some(partition) = address.partition {
        set_header(
            &mut headers,
            TARGET_PARTITION_HEADER,
            &partition.to_string(),
        );
    }
    if let Some(target_key) = &address.key {
        set_header(&mut headers, TARGET_KEY_HEADER, target_key);
    }
    if let Some(partition_key) = &address.partition_key {
        set_header(&mut headers, TARGET_PARTITION_KEY_HEADER, partition_key);
    }
    Ok(headers)
}

/// Builds the proxy that schedules `message` for `epoch_secs` (Unix seconds).
///
/// The proxy key is `envelope.key`, else [`default_proxy_key`] from `random`; with a default key
/// the proxy's partition key is, as Karafka's proxy sets it, the target's partition, else its
/// partition_key, else its key (else the envelope's), so a Karafka producer and this one put the
/// schedules of one target key on the same schedules partition. Fails with
/// [`CoreError::InvalidArgument`] for an empty topic or key or an out-of-range epoch, and with
/// [`CoreError::TooLarge`] for an oversized payload.
pub fn schedule_proxy(
    message: &TargetMessage,
    epoch_secs: i64,
    envelope: &Envelope,
    random: [u8; 16],
    now_secs: i64,
    limits: &ScheduleLimits,
) -> Result<ProxyMessage, CoreError> {
    let address = &message.address;
    require_envelope(envelope)?;
    require_target_elsewhere(&address.topic, &envelope.topic)?;
    let headers = schedule_headers(
        address,
        epoch_secs,
        now_secs,
        limits,
        message.headers.clone(),
    )?;
    check_payload_size(message.payload.as_ref().map_or(0, Vec::len), limits)?;
    let (key, partition_key) = match &envelope.key {
        Some(key) => (key.clone(), envelope.partition_key.clone()),
        None => {
            let from_target = address
                .partition
                .map(|partition| partition.to_string())
                .or_else(|| address.partition_key.clone())
                .or_else(|| address.key.clone());
            (
                default_proxy_key(&address.topic, random),
                from_target.or_else(|| envelope.partition_key.clone()),
            )
        }
    };
    Ok(ProxyMessage {
        topic: envelope.topic.clone(),
        key,
        partition: envelope.partition,
        partition_key,
        payload: message.payload.clone(),
        headers,
    })
}

/// Refuses a schedule whose target is `schedules_topic`, the topic the proxy travels on: the
/// dispatched message keeps the proxy's `schedule_*` headers (as Karafka's does), so the daemon
/// would read it back as a schedule already due and dispatch it again, forever.
pub fn require_target_elsewhere(
    target_topic: &str,
    schedules_topic: &str,
) -> Result<(), CoreError> {
    if target_topic == schedules_topic {
        return Err(CoreError::InvalidArgument(format!(
            "target topic {target_topic:?} is the schedules topic itself: the dispatched message \
             would be read back as a due schedule and dispatched again, forever"
        )));
    }
    Ok(())
}

/// Refuses a scheduled payload of `bytes` over `limits.max_payload_bytes`, as WaterDrop refuses
/// a message whose payload (the value alone; a null one is 0 bytes) is over `max_payload_size`.
pub fn check_payload_size(bytes: usize, limits: &ScheduleLimits) -> Result<(), CoreError> {
    if bytes > limits.max_payload_bytes {
        return Err(CoreError::TooLarge {
            what: "scheduled payload (bytes, max_payload_size)",
            limit: limits.max_payload_bytes as u64,
        });
    }
    Ok(())
}

/// Builds the proxy that cancels the schedule with `key`.
pub fn cancel_proxy(key: &str, envelope: &Envelope) -> Result<ProxyMessage, CoreError> {
    require_envelope(envelope)?;
    require_non_empty("proxy key", key)?;
    let mut headers = Headers::new();
    set_header(&mut headers, SCHEMA_VERSION_HEADER, SCHEMA_VERSION);
    set_header(
        &mut headers,
        SOURCE_TYPE_HEADER,
        SourceType::Cancel.as_str(),
    );
    Ok(ProxyMessage {
        topic: envelope.topic.clone(),
        key: key.to_owned(),
        partition: envelope.partition,
        partition_key: envelope.partition_key.clone(),
        payload: None,
        headers,
    })
}

/// Hands `emit` the headers of the dispatched target message in record order, borrowed: the
/// proxy's headers except any `schedule_source_*` ones, then those four set from `source`. Lets
/// the daemon write them straight into its client's header list, with no owned copy per header.
pub fn visit_dispatch_headers<'h>(
    proxy_headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
    source: &ProxySource<'_>,
    mut emit: impl FnMut(&str, &[u8]),
) {
    const SET: [&str; 4] = [
        SOURCE_TOPIC_HEADER,
        SOURCE_PARTITION_HEADER,
        SOURCE_OFFSET_HEADER,
        SOURCE_KEY_HEADER,
    ];
    for (name, value) in proxy_headers {
        if !SET.contains(&name) {
            emit(name, value);
        }
    }
    emit(SOURCE_TOPIC_HEADER, source.topic.as_bytes());
    emit(
        SOURCE_PARTITION_HEADER,
        Decimal::of(source.partition).as_bytes(),
    );
    emit(SOURCE_OFFSET_HEADER, Decimal::of(source.offset).as_bytes());
    emit(SOURCE_KEY_HEADER, source.key.as_bytes());
}

/// Hands `emit` the headers of the tombstone that retires a dispatched proxy in record order,
/// borrowed (see [`visit_dispatch_headers`]): the proxy's headers except its schema version,
/// type and source offset, then those three (schema [`SCHEMA_VERSION`], type `tombstone`).
pub fn visit_tombstone_headers<'h>(
    proxy_headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
    proxy_offset: u64,
    mut emit: impl FnMut(&str, &[u8]),
) {
    const SET: [&str; 3] = [
        SCHEMA_VERSION_HEADER,
        SOURCE_TYPE_HEADER,
        SOURCE_OFFSET_HEADER,
    ];
    for (name, value) in proxy_headers {
        if !SET.contains(&name) {
            emit(name, value);
        }
    }
    emit(SCHEMA_VERSION_HEADER, SCHEMA_VERSION.as_bytes());
    emit(
        SOURCE_TYPE_HEADER,
        SourceType::Tombstone.as_str().as_bytes(),
    );
    emit(SOURCE_OFFSET_HEADER, Decimal::of(proxy_offset).as_bytes());
}

/// The decimal ASCII text of an integer header value, formatted on the stack.
struct Decimal {
    /// Room for `u64::MAX` and for `i64::MIN` with its sign.
    digits: [u8; 20],
    len: usize,
}

impl Decimal {
    fn of(number: impl std::fmt::Display) -> Self {
        use std::io::Write;
        let mut digits = [0; 20];
        let mut rest = &mut digits[..];
        // Cannot fail: every integer type used here fits in 20 bytes.
        let _ = write!(rest, "{number}");
        let len = 20 - rest.len();
        Decimal { digits, len }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.digits[..self.len]
    }
}

/// The `schedule_*` headers of one record, each the last value given for its name.
#[derive(Default)]
struct ScheduleHeaderValues<'a> {
    schema_version: Option<&'a [u8]>,
    source_type: Option<&'a [u8]>,
    epoch: Option<&'a [u8]>,
    topic: Option<&'a [u8]>,
    partition: Option<&'a [u8]>,
    key: Option<&'a [u8]>,
    partition_key: Option<&'a [u8]>,
    source_offset: Option<&'a [u8]>,
}

/// Parses the headers of a schedules-topic record.
///
/// Errors: [`CoreError::MissingHeader`], [`CoreError::InvalidHeader`] (bad number, unknown type,
/// non-UTF-8 text), [`CoreError::UnsupportedVersion`] for a schema newer than [`SCHEMA_VERSION`].
pub fn parse_proxy_headers<K, V>(headers: &[(K, V)]) -> Result<ProxyRecord, CoreError>
where
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    let mut values = ScheduleHeaderValues::default();
    for (name, value) in headers {
        let value = Some(value.as_ref());
        match name.as_ref() {
            SCHEMA_VERSION_HEADER => values.schema_version = value,
            SOURCE_TYPE_HEADER => values.source_type = value,
            TARGET_EPOCH_HEADER => values.epoch = value,
            TARGET_TOPIC_HEADER => values.topic = value,
            TARGET_PARTITION_HEADER => values.partition = value,
            TARGET_KEY_HEADER => values.key = value,
            TARGET_PARTITION_KEY_HEADER => values.partition_key = value,
            SOURCE_OFFSET_HEADER => values.source_offset = value,
            _ => {}
        }
    }
    let version = text(
        SCHEMA_VERSION_HEADER,
        required(SCHEMA_VERSION_HEADER, values.schema_version)?,
    )?;
    check_schema_version(version)?;
    let source_type = text(
        SOURCE_TYPE_HEADER,
        required(SOURCE_TYPE_HEADER, values.source_type)?,
    )?;
    match source_type {
        "schedule" => {
            let epoch = text(
                TARGET_EPOCH_HEADER,
                required(TARGET_EPOCH_HEADER, values.epoch)?,
            )?;
            let epoch_secs = number(TARGET_EPOCH_HEADER, epoch)?;
            let topic = text(
                TARGET_TOPIC_HEADER,
                required(TARGET_TOPIC_HEADER, values.topic)?,
            )?;
            if topic.is_empty() {
                return Err(invalid(TARGET_TOPIC_HEADER, "empty topic"));
            }
            let partition = values
                .partition
                .map(|raw| {
                    text(TARGET_PARTITION_HEADER, raw)
                        .and_then(|t| number(TARGET_PARTITION_HEADER, t))
                })
                .transpose()?;
            let optional_text = |name, raw: Option<&[u8]>| {
                raw.map(|raw| text(name, raw).map(str::to_owned))
                    .transpose()
            };
            Ok(ProxyRecord::Schedule {
                epoch_secs,
                target: TargetAddress {
                    topic: topic.to_owned(),
                    partition,
                    key: optional_text(TARGET_KEY_HEADER, values.key)?,
                    partition_key: optional_text(
                        TARGET_PARTITION_KEY_HEADER,
                        values.partition_key,
                    )?,
                },
            })
        }
        "cancel" => Ok(ProxyRecord::Cancel),
        "tombstone" => Ok(ProxyRecord::Tombstone {
            source_offset: values
                .source_offset
                .map(|raw| {
                    text(SOURCE_OFFSET_HEADER, raw).and_then(|t| number(SOURCE_OFFSET_HEADER, t))
                })
                .transpose()?,
        }),
        other => Err(invalid(
            SOURCE_TYPE_HEADER,
            format!("unknown type {other:?} (expected schedule, cancel or tombstone)"),
        )),
    }
}

/// Refuses a version newer than [`SCHEMA_VERSION`], compared as Karafka does (`Gem::Version`).
fn check_schema_version(found: &str) -> Result<(), CoreError> {
    match compare_gem_versions(found, SCHEMA_VERSION) {
        None => Err(invalid(
            SCHEMA_VERSION_HEADER,
            format!("not a version: {found:?}"),
        )),
        Some(Ordering::Greater) => Err(CoreError::UnsupportedVersion {
            what: "schedule schema",
            found: found.to_owned(),
            supported: SCHEMA_VERSION,
        }),
        Some(_) => Ok(()),
    }
}

/// Orders dotted numeric versions as Ruby's `Gem::Version` does: missing trailing segments count
/// as zero (`"1.0"` == `"1.0.0"`); `None` if either is not such a version.
fn compare_gem_versions(left: &str, right: &str) -> Option<Ordering> {
    let parse = |text: &str| -> Option<Vec<u64>> {
        let mut segments = text
            .split('.')
            .map(|part| {
                let digits = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
                digits.then(|| part.parse().ok()).flatten()
            })
            .collect::<Option<Vec<u64>>>()?;
        while segments.last() == Some(&0) {
            segments.pop();
        }
        Some(segments)
    };
    Some(parse(left)?.cmp(&parse(right)?))
}

fn required<'a>(name: &'static str, value: Option<&'a [u8]>) -> Result<&'a [u8], CoreError> {
    value.ok_or(CoreError::MissingHeader { name })
}

fn text<'a>(name: &'static str, raw: &'a [u8]) -> Result<&'a str, CoreError> {
    std::str::from_utf8(raw).map_err(|_| invalid(name, "not UTF-8"))
}

fn number<T: std::str::FromStr>(name: &'static str, text: &str) -> Result<T, CoreError> {
    // Decimal digits only (with an optional leading minus): no "+1", no " 1", no "1e3".
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(name, format!("not a decimal integer: {text:?}")));
    }
    text.parse()
        .map_err(|_| invalid(name, format!("out of range: {text:?}")))
}

fn invalid(name: &'static str, reason: impl Into<String>) -> CoreError {
    CoreError::InvalidHeader {
        name,
        reason: reason.into(),
    }
}

/// WaterDrop's message contract for an envelope: topic name, partition, non-empty key and
/// partition_key when given.
fn require_envelope(envelope: &Envelope) -> Result<(), CoreError> {
    require_topic_name("schedules topic", &envelope.topic)?;
    require_partition("schedules partition", envelope.partition)?;
    require_non_empty_if_given("proxy key", envelope.key.as_deref())?;
    require_non_empty_if_given("proxy partition_key", envelope.partition_key.as_deref())
}

/// WaterDrop's partition rule: -1 (any) or a partition number.
fn require_partition(what: &str, partition: Option<i32>) -> Result<(), CoreError> {
    match partition {
        Some(p) if p < -1 => Err(CoreError::InvalidArgument(format!(
            "{what} must be >= -1, got {p}"
        ))),
        _ => Ok(()),
    }
}

fn require_non_empty_if_given(what: &str, value: Option<&str>) -> Result<(), CoreError> {
    value.map_or(Ok(()), |value| require_non_empty(what, value))
}

fn require_non_empty(what: &str, value: &str) -> Result<(), CoreError> {
    if value.is_empty() {
        return Err(CoreError::InvalidArgument(format!(
            "{what} must not be empty"
        )));
    }
    Ok(())
}

/// Replaces every header called `name` with one `name: value` at the end.
fn set_header(headers: &mut Headers, name: &str, value: &str) {
    headers.retain(|(existing, _)| existing != name);
    headers.push((name.to_owned(), value.as_bytes().to_vec()));
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn message() -> TargetMessage {
        TargetMessage {
            address: TargetAddress {
                topic: "orders".into(),
                partition: Some(2),
                key: Some("order-1".into()),
                partition_key: None,
            },
            payload: Some(b"{\"id\":1}".to_vec()),
            headers: vec![("trace".into(), b"abc".to_vec())],
        }
    }

    fn envelope() -> Envelope {
        Envelope {
            topic: "schedules".into(),
            ..Envelope::default()
        }
    }

    fn pairs(headers: &Headers) -> impl Iterator<Item = (&str, &[u8])> {
        headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_slice()))
    }

    fn dispatch_headers(proxy: &Headers, source: &ProxySource<'_>) -> Headers {
        let mut headers = Vec::new();
        visit_dispatch_headers(pairs(proxy), source, |name, value| {
            headers.push((name.to_owned(), value.to_vec()));
        });
        headers
    }

    fn tombstone_headers(proxy: &Headers, proxy_offset: u64) -> Headers {
        let mut headers = Vec::new();
        visit_tombstone_headers(pairs(proxy), proxy_offset, |name, value| {
            headers.push((name.to_owned(), value.to_vec()));
        });
        headers
    }

    fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a [u8]> {
        headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    #[test]
    fn schedule_proxy_round_trips_through_parse() {
        let limits = ScheduleLimits::default();
        let proxy =
            schedule_proxy(&message(), NOW + 60, &envelope(), [7; 16], NOW, &limits).unwrap();
        assert_eq!(proxy.key, "orders-07070707-0707-4707-8707-070707070707");
        assert_eq!(
            header(&proxy.headers, TARGET_EPOCH_HEADER),
            Some(&b"1700000060"[..])
        );
        assert_eq!(header(&proxy.headers, "trace"), Some(&b"abc"[..]));
        assert_eq!(
            parse_proxy_headers(&proxy.headers).unwrap(),
            ProxyRecord::Schedule {
                epoch_secs: NOW + 60,
                target: message().address
            }
        );
    }

    #[test]
    fn a_schedule_aimed_at_its_own_schedules_topic_is_refused() {
        let mut looping = message();
        looping.address.topic = envelope().topic;
        let err = schedule_proxy(
            &looping,
            NOW + 60,
            &envelope(),
            [7; 16],
            NOW,
            &ScheduleLimits::default(),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("is the schedules topic itself"),
            "{err}"
        );
    }

    #[test]
    fn schedule_validation() {
        let limits = ScheduleLimits {
            max_payload_bytes: 4,
            ..ScheduleLimits::default()
        };
        let build = |epoch, key: Option<&str>| {
            let envelope = Envelope {
                key: key.map(str::to_owned),
                ..envelope()
            };
            schedule_proxy(
                &message(),
                epoch,
                &envelope,
                [0; 16],
                NOW,
                &ScheduleLimits::default(),
            )
        };
        assert!(build(NOW - 10, None).is_ok());
        assert!(build(NOW - 11, None).is_err());
        assert!(build(NOW * 1000, None).is_err(), "milliseconds are refused");
        assert!(validate_stored_epoch(NOW * 1000, NOW).is_err());
        assert!(validate_stored_epoch(i64::MAX, NOW).is_err());
        assert!(validate_stored_epoch(-1, NOW).is_err());
        assert!(
            validate_stored_epoch(NOW - 86_400, NOW).is_ok(),
            "past-due is fine"
        );
        assert!(validate_stored_epoch(NOW + HUNDRED_YEARS_SECS, NOW).is_ok());
        assert!(build(NOW, Some("")).is_err());
        assert!(matches!(
            schedule_proxy(&message(), NOW, &envelope(), [0; 16], NOW, &limits),
            Err(CoreError::TooLarge { .. })
        ));
    }

    #[test]
    fn the_default_payload_limit_is_waterdrops_max_payload_size() {
        let with_payload = |bytes: usize| TargetMessage {
            payload: Some(vec![b'x'; bytes]),
            ..message()
        };
        let build = |message: &TargetMessage| {
            schedule_proxy(
                message,
                NOW + 60,
                &envelope(),
                [0; 16],
                NOW,
                &ScheduleLimits::default(),
            )
        };
        assert!(build(&with_payload(1_000_012)).is_ok());
        let err = build(&with_payload(1_000_013)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "scheduled payload (bytes, max_payload_size) exceeds the limit of 1000012"
        );
        let tombstone = TargetMessage {
            payload: None,
            ..message()
        };
        assert!(build(&tombstone).is_ok(), "a null payload is 0 bytes");
    }

    #[test]
    fn cancel_and_tombstone_parse() {
        let cancel = cancel_proxy("k", &envelope()).unwrap();
        assert_eq!(
            parse_proxy_headers(&cancel.headers),
            Ok(ProxyRecord::Cancel)
        );
        let tombstone = tombstone_headers(&cancel.headers, 42);
        assert_eq!(
            parse_proxy_headers(&tombstone),
            Ok(ProxyRecord::Tombstone {
                source_offset: Some(42)
            })
        );
        assert!(cancel_proxy("", &envelope()).is_err());
    }

    #[test]
    fn dispatch_headers_add_the_source() {
        let source = ProxySource {
            topic: "schedules",
            partition: 3,
            offset: 9,
            key: "k",
        };
        let headers = dispatch_headers(&vec![("a".into(), b"1".to_vec())], &source);
        assert_eq!(header(&headers, SOURCE_PARTITION_HEADER), Some(&b"3"[..]));
        assert_eq!(header(&headers, SOURCE_OFFSET_HEADER), Some(&b"9"[..]));
        assert_eq!(header(&headers, SOURCE_KEY_HEADER), Some(&b"k"[..]));
    }

    /// Proxy headers that may repeat, and carry, the names the dispatch builders set.
    fn proxy_headers_strategy() -> impl proptest::strategy::Strategy<Value = Headers> {
        use proptest::prelude::*;
        let name = prop::sample::select(vec![
            "trace",
            SCHEMA_VERSION_HEADER,
            SOURCE_TYPE_HEADER,
            TARGET_EPOCH_HEADER,
            SOURCE_TOPIC_HEADER,
            SOURCE_PARTITION_HEADER,
            SOURCE_OFFSET_HEADER,
            SOURCE_KEY_HEADER,
        ]);
        prop::collection::vec((name, prop::collection::vec(any::<u8>(), 0..4)), 0..10).prop_map(
            |pairs| {
                pairs
                    .into_iter()
                    .map(|(name, value)| (name.to_owned(), value))
                    .collect()
            },
        )
    }

    proptest::proptest! {
        /// The borrowed builders write exactly what replacing each header in turn (the
        /// definition: Karafka's header hash, set key by key) gives, byte for byte.
        #[test]
        fn built_headers_equal_setting_each_header_in_turn(
            proxy in proxy_headers_strategy(),
            partition in proptest::prelude::any::<i32>(),
            offset in proptest::prelude::any::<u64>(),
        ) {
            let source = ProxySource { topic: "schedules", partition, offset, key: "k-1" };
            let mut expected = proxy.clone();
            set_header(&mut expected, SOURCE_TOPIC_HEADER, source.topic);
            set_header(&mut expected, SOURCE_PARTITION_HEADER, &partition.to_string());
            set_header(&mut expected, SOURCE_OFFSET_HEADER, &offset.to_string());
            set_header(&mut expected, SOURCE_KEY_HEADER, source.key);
            proptest::prop_assert_eq!(dispatch_headers(&proxy, &source), expected);

            let mut expected = proxy.clone();
            set_header(&mut expected, SCHEMA_VERSION_HEADER, SCHEMA_VERSION);
            set_header(&mut expected, SOURCE_TYPE_HEADER, SourceType::Tombstone.as_str());
            set_header(&mut expected, SOURCE_OFFSET_HEADER, &offset.to_string());
            proptest::prop_assert_eq!(tombstone_headers(&proxy, offset), expected);
        }
    }

    #[test]
    fn waterdrop_message_rules_and_karafka_partition_key() {
        let limits = ScheduleLimits::default();
        let build = |message: &TargetMessage, envelope: &Envelope| {
            schedule_proxy(message, NOW, envelope, [0; 16], NOW, &limits)
        };
        let with_address = |change: &dyn Fn(&mut TargetAddress)| {
            let mut m = message();
            change(&mut m.address);
            m
        };
        let illegal = with_address(&|a| a.topic = "bad topic!".into());
        assert!(build(&illegal, &envelope()).is_err());
        assert!(build(&with_address(&|a| a.partition = Some(-2)), &envelope()).is_err());
        assert!(build(&with_address(&|a| a.partition = Some(-1)), &envelope()).is_ok());
        assert!(build(&with_address(&|a| a.key = Some(String::new())), &envelope()).is_err());
        let no_pk = with_address(&|a| a.partition_key = Some(String::new()));
        assert!(build(&no_pk, &envelope()).is_err());
        let bad_envelopes = [
            Envelope {
                topic: "sched/ules".into(),
                ..envelope()
            },
            Envelope {
                partition: Some(-5),
                ..envelope()
            },
            Envelope {
                partition_key: Some(String::new()),
                ..envelope()
            },
        ];
        for bad in &bad_envelopes {
            assert!(build(&message(), bad).is_err(), "{bad:?}");
            assert!(cancel_proxy("k", bad).is_err(), "{bad:?}");
        }
        // Karafka's proxy: with a default key, the partition key is the target's partition,
        // else its partition_key, else its key.
        assert_eq!(
            build(&message(), &envelope())
                .unwrap()
                .partition_key
                .as_deref(),
            Some("2")
        );
        let by_pk = with_address(&|a| {
            a.partition = None;
            a.partition_key = Some("customer-7".into());
        });
        assert_eq!(
            build(&by_pk, &envelope()).unwrap().partition_key.as_deref(),
            Some("customer-7")
        );
        let by_key = with_address(&|a| a.partition = None);
        assert_eq!(
            build(&by_key, &envelope())
                .unwrap()
                .partition_key
                .as_deref(),
            Some("order-1")
        );
        let keyed = Envelope {
            key: Some("mine".into()),
            ..envelope()
        };
        assert_eq!(build(&message(), &keyed).unwrap().partition_key, None);
    }

    #[test]
    fn schema_versions_compare_as_gem_versions() {
        assert_eq!(compare_gem_versions("1.0", "1.0.0"), Some(Ordering::Equal));
        assert_eq!(compare_gem_versions("1", "1.0.0"), Some(Ordering::Equal));
        assert_eq!(
            compare_gem_versions("1.0.1", "1.0.0"),
            Some(Ordering::Greater)
        );
        assert_eq!(compare_gem_versions("1.2", "1.10"), Some(Ordering::Less));
        assert_eq!(compare_gem_versions("1..0", "1.0.0"), None);
        assert_eq!(compare_gem_versions("v1", "1.0.0"), None);
    }

    #[test]
    fn parse_errors_name_the_problem() {
        let base = |version: &str, kind: &str, epoch: &str| {
            vec![
                (SCHEMA_VERSION_HEADER, version.as_bytes().to_vec()),
                (SOURCE_TYPE_HEADER, kind.as_bytes().to_vec()),
                (TARGET_EPOCH_HEADER, epoch.as_bytes().to_vec()),
                (TARGET_TOPIC_HEADER, b"t".to_vec()),
            ]
        };
        assert!(matches!(
            parse_proxy_headers(&base("1.1.0", "schedule", "1")),
            Err(CoreError::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            parse_proxy_headers(&base("1.0.0", "later", "1")),
            Err(CoreError::InvalidHeader {
                name: SOURCE_TYPE_HEADER,
                ..
            })
        ));
        assert!(matches!(
            parse_proxy_headers(&base("1.0.0", "schedule", "12x")),
            Err(CoreError::InvalidHeader {
                name: TARGET_EPOCH_HEADER,
                ..
            })
        ));
        let no_topic: Vec<_> = base("1.0.0", "schedule", "1").into_iter().take(3).collect();
        assert_eq!(
            parse_proxy_headers(&no_topic),
            Err(CoreError::MissingHeader {
                name: TARGET_TOPIC_HEADER
            })
        );
        let empty: Vec<(String, Vec<u8>)> = Vec::new();
        assert_eq!(
            parse_proxy_headers(&empty),
            Err(CoreError::MissingHeader {
                name: SCHEMA_VERSION_HEADER
            })
        );
    }
}
