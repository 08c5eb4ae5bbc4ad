//! The rules of Karafka Web's tracking contracts (`Consumers::Contracts::Report`,
//! `ConsumerGroup`, `SubscriptionGroup`, `Topic`, `Partition`, `Job` and
//! `Tracking::Contracts::Error`), rule for rule, checked over a JSON document as it travels: a
//! report that passes them is one Karafka Web's own reporter would have sent.
//!
//! Each [`Violation`] names the field (`consumer_groups.<cg>.subscription_groups.<sg>.state.
//! poll_interval`) and the rule it breaks (`"Integer > 0"`). As in Karafka Web, nested
//! contracts (groups, topics, partitions, jobs) are checked only when their parent passed.
//!
//! Ruby's types map to JSON as Ruby's JSON parser reads them: `Integer` is a number without a
//! fraction or exponent, `Float` one with, `Numeric` either; `Tags` is an array of strings.

use serde_json::{Map, Value};

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Dotted path of the field, e.g. `process.cpus`.
    pub path: String,
    /// The rule, e.g. `"required Integer >= 1"`.
    pub rule: &'static str,
}

/// Karafka's process states (`Karafka::Status::STATES`).
pub const PROCESS_STATES: [&str; 9] = [
    "initializing",
    "initialized",
    "supervising",
    "running",
    "quieting",
    "quiet",
    "stopping",
    "stopped",
    "terminated",
];

/// Job types Karafka Web tracks.
pub const JOB_TYPES: [&str; 5] = ["consume", "revoked", "shutdown", "tick", "eofed"];

/// Job statuses Karafka Web tracks.
pub const JOB_STATUSES: [&str; 2] = ["running", "pending"];

/// A rule as Karafka Web words it, with its test of a value.
type Check = (&'static str, fn(&Value) -> bool);

/// A field and its rule.
type Rule = (&'static str, Check);

/// The value of an `Integer` (one beyond `i64` is still an Integer: it counts as `i64::MAX`).
fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.as_i64().unwrap_or(i64::MAX)),
        _ => None,
    }
}

fn numeric(value: &Value) -> Option<f64> {
    value.as_f64()
}

fn is_float(value: &Value) -> bool {
    matches!(value, Value::Number(n) if n.is_f64())
}

fn text(value: &Value) -> Option<&str> {
    value.as_str()
}

fn filled_text(value: &Value) -> bool {
    text(value).is_some_and(|t| !t.is_empty())
}

fn any_integer(value: &Value) -> bool {
    integer(value).is_some()
}

fn non_negative_integer(value: &Value) -> bool {
    integer(value).is_some_and(|n| n >= 0)
}

fn positive_integer(value: &Value) -> bool {
    integer(value).is_some_and(|n| n > 0)
}

fn non_negative_numeric(value: &Value) -> bool {
    numeric(value).is_some_and(|n| n >= 0.0)
}

fn positive_numeric(value: &Value) -> bool {
    numeric(value).is_some_and(|n| n > 0.0)
}

fn tags(value: &Value) -> bool {
    value
        .as_array()
        .is_some_and(|items| items.iter().all(Value::is_string))
}

fn hash(value: &Value) -> bool {
    value.is_object()
}

fn offset_or_none(value: &Value) -> bool {
    integer(value).is_some_and(|n| n >= 0 || n == -1001)
}

fn lag_or_unknown(value: &Value) -> bool {
    integer(value).is_some_and(|n| n >= 0 || n == -1)
}

// The rules most fields share, each worded once with its test.
const COUNT: Check = ("required Integer >= 0", non_negative_integer);
const INTEGER: Check = ("required Integer", any_integer);
const FILLED_TEXT: Check = ("required non-empty String", filled_text);
const TEXT: Check = ("required String", Value::is_string);
const HASH: Check = ("required Hash", hash);
const TAGS: Check = ("required Tags (Array of String)", tags);
const POSITIVE_NUMERIC: Check = ("required Numeric > 0", positive_numeric);
const NON_NEGATIVE_NUMERIC: Check = ("required Numeric >= 0", non_negative_numeric);
const OFFSET_OR_NONE: Check = ("required Integer >= 0 or -1001", offset_or_none);
const LAG_OR_UNKNOWN: Check = ("required Integer >= 0 or -1", lag_or_unknown);

const REPORT: &[Rule] = &[
    ("schema_version", FILLED_TEXT),
    ("dispatched_at", POSITIVE_NUMERIC),
    ("type", ("required \"consumer\"", |v| v == "consumer")),
    ("consumer_groups", HASH),
    ("jobs", ("required Array", Value::is_array)),
];

const PROCESS: &[Rule] = &[
    ("started_at", POSITIVE_NUMERIC),
    (
        "id",
        ("required String with at least two ':'", |v| {
            text(v).is_some_and(|t| t.matches(':').count() >= 2)
        }),
    ),
    (
        "cpus",
        ("required Integer >= 1", |v| {
            integer(v).is_some_and(|n| n >= 1)
        }),
    ),
    ("memory_usage", COUNT),
    ("memory_total_usage", COUNT),
    ("memory_size", COUNT),
    (
        "status",
        ("required one of Karafka's process states", |v| {
            text(v).is_some_and(|t| PROCESS_STATES.contains(&t))
        }),
    ),
    ("threads", COUNT),
    ("workers", COUNT),
    ("tags", TAGS),
    ("execution_mode", FILLED_TEXT),
    (
        "cpu_usage",
        ("required Array of 3 Numeric >= -1", |v| {
            v.as_array().is_some_and(|items| {
                items.len() == 3
                    && items
                        .iter()
                        .all(|item| numeric(item).is_some_and(|n| n >= -1.0))
            })
        }),
    ),
];

const LISTENERS: &[Rule] = &[("active", COUNT), ("standby", COUNT)];

const VERSIONS: &[Rule] = &[
    ("ruby", FILLED_TEXT),
    ("karafka", FILLED_TEXT),
    ("karafka_core", FILLED_TEXT),
    ("karafka_web", FILLED_TEXT),
    ("waterdrop", FILLED_TEXT),
    ("rdkafka", FILLED_TEXT),
    ("librdkafka", FILLED_TEXT),
];

const STATS: &[Rule] = &[
    ("busy", COUNT),
    ("enqueued", COUNT),
    ("waiting", COUNT),
    ("utilization", NON_NEGATIVE_NUMERIC),
];

const TOTALS: &[Rule] = &[
    ("jobs", COUNT),
    ("batches", COUNT),
    ("messages", COUNT),
    ("errors", COUNT),
    ("retries", COUNT),
    ("dead", COUNT),
];

const CONSUMER_GROUP: &[Rule] = &[("id", FILLED_TEXT), ("subscription_groups", HASH)];

const SUBSCRIPTION_GROUP: &[Rule] = &[
    ("id", FILLED_TEXT),
    ("topics", HASH),
    (
        "instance_id",
        ("required false or String", |v| {
            v == &Value::Bool(false) || v.is_string()
        }),
    ),
];

const GROUP_STATE: &[Rule] = &[
    ("state", FILLED_TEXT),
    ("join_state", FILLED_TEXT),
    ("stateage", COUNT),
    ("rebalance_age", COUNT),
    ("rebalance_cnt", COUNT),
    ("rebalance_reason", TEXT),
    ("poll_age", NON_NEGATIVE_NUMERIC),
    ("poll_interval", ("required Integer > 0", positive_integer)),
];

const TOPIC: &[Rule] = &[
    ("name", FILLED_TEXT),
    ("partitions_cnt", COUNT),
    ("partitions", HASH),
];

const PARTITION: &[Rule] = &[
    ("id", COUNT),
    ("lag", INTEGER),
    ("lag_d", INTEGER),
    ("lag_stored", INTEGER),
    ("lag_stored_d", INTEGER),
    ("committed_offset", INTEGER),
    ("committed_offset_fd", COUNT),
    ("stored_offset", INTEGER),
    ("stored_offset_fd", COUNT),
    ("fetch_state", FILLED_TEXT),
    ("poll_state", FILLED_TEXT),
    ("poll_state_ch", COUNT),
    ("hi_offset", INTEGER),
    ("hi_offset_fd", COUNT),
    ("lo_offset", INTEGER),
    ("eof_offset", INTEGER),
    ("ls_offset", INTEGER),
    ("ls_offset_d", INTEGER),
    ("ls_offset_fd", COUNT),
    (
        "transactional",
        ("required true or false", Value::is_boolean),
    ),
];

const JOB: &[Rule] = &[
    ("consumer", TEXT),
    ("consumer_group", TEXT),
    (
        "updated_at",
        ("required Float >= 0", |v| {
            is_float(v) && non_negative_numeric(v)
        }),
    ),
    ("topic", TEXT),
    ("partition", COUNT),
    ("first_offset", OFFSET_OR_NONE),
    ("last_offset", OFFSET_OR_NONE),
    ("committed_offset", INTEGER),
    ("messages", COUNT),
    (
        "type",
        ("required one of consume/revoked/shutdown/tick/eofed", |v| {
            text(v).is_some_and(|t| JOB_TYPES.contains(&t))
        }),
    ),
    ("tags", TAGS),
    ("consumption_lag", LAG_OR_UNKNOWN),
    ("processing_lag", LAG_OR_UNKNOWN),
    (
        "status",
        ("required running or pending", |v| {
            text(v).is_some_and(|t| JOB_STATUSES.contains(&t))
        }),
    ),
];

const ERROR: &[Rule] = &[
    ("schema_version", TEXT),
    ("id", FILLED_TEXT),
    ("type", FILLED_TEXT),
    ("error_class", FILLED_TEXT),
    ("error_message", TEXT),
    ("backtrace", TEXT),
    ("details", HASH),
    ("occurred_at", ("required Float", is_float)),
];

const ERROR_PROCESS: &[Rule] = &[("id", FILLED_TEXT)];

/// Collects the broken rules of one contract level.
struct Checker {
    found: Vec<Violation>,
}

impl Checker {
    fn path(prefix: &str, key: &str) -> String {
        if prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{prefix}.{key}")
        }
    }

    /// Applies `rules` to `value` (must be a Hash); true when all passed.
    fn rules(&mut self, prefix: &str, value: &Value, rules: &[Rule]) -> bool {
        let Some(map) = value.as_object() else {
            self.found.push(Violation {
                path: prefix.to_owned(),
                rule: "required Hash",
            });
            return false;
        };
        let before = self.found.len();
        for (key, (rule, check)) in rules {
            if !map.get(*key).is_some_and(check) {
                self.found.push(Violation {
                    path: Self::path(prefix, key),
                    rule,
                });
            }
        }
        self.found.len() == before
    }

    /// A `nested` block: the key must hold a Hash passing `rules`.
    fn nested(&mut self, prefix: &str, map: &Value, key: &str, rules: &[Rule]) -> bool {
        let path = Self::path(prefix, key);
        match map.get(key) {
            Some(inner) => self.rules(&path, inner, rules),
            None => {
                self.found.push(Violation {
                    path,
                    rule: "required Hash",
                });
                false
            }
        }
    }

    /// A `virtual` block: each value of the Hash at `key` checked by `each`.
    fn each_value(
        &mut self,
        prefix: &str,
        map: &Value,
        key: &str,
        each: fn(&mut Self, &str, &Value),
    ) {
        let path = Self::path(prefix, key);
        for (name, inner) in map
            .get(key)
            .and_then(Value::as_object)
            .unwrap_or(&Map::new())
        {
            each(self, &Self::path(&path, name), inner);
        }
    }

    fn consumer_group(&mut self, path: &str, group: &Value) {
        if self.rules(path, group, CONSUMER_GROUP) {
            self.each_value(path, group, "subscription_groups", Self::subscription_group);
        }
    }

    fn subscription_group(&mut self, path: &str, group: &Value) {
        let own = self.rules(path, group, SUBSCRIPTION_GROUP);
        if self.nested(path, group, "state", GROUP_STATE) && own {
            self.each_value(path, group, "topics", Self::topic);
        }
    }

    fn topic(&mut self, path: &str, topic: &Value) {
        if self.rules(path, topic, TOPIC) {
            self.each_value(path, topic, "partitions", |checker, path, partition| {
                checker.rules(path, partition, PARTITION);
            });
        }
    }
}

/// Every rule of Karafka Web's consumer report contracts that `report` breaks (empty: valid).
pub fn consumer_report_violations(report: &Value) -> Vec<Violation> {
    let mut checker = Checker { found: Vec::new() };
    checker.rules("", report, REPORT);
    if report.is_object() {
        checker.nested("", report, "process", PROCESS);
        if report["process"].is_object() {
            checker.nested("process", &report["process"], "listeners", LISTENERS);
        }
        checker.nested("", report, "versions", VERSIONS);
        checker.nested("", report, "stats", STATS);
        if report["stats"].is_object() {
            checker.nested("stats", &report["stats"], "total", TOTALS);
        }
    }
    // As Karafka Web's `virtual` blocks: nested contracts run only on an otherwise valid report.
    let valid = checker.found.is_empty();
    if valid {
        checker.each_value("", report, "consumer_groups", Checker::consumer_group);
    }
    if valid && checker.found.is_empty() {
        let jobs = report["jobs"].as_array().map_or(&[][..], Vec::as_slice);
        for (i, job) in jobs.iter().enumerate() {
            checker.rules(&format!("jobs.{i}"), job, JOB);
        }
    }
    checker.found
}

/// Every rule of Karafka Web's error report contract that `report` breaks (empty: valid).
pub fn error_report_violations(report: &Value) -> Vec<Violation> {
    let mut checker = Checker { found: Vec::new() };
    checker.rules("", report, ERROR);
    if checker.nested("", report, "process", ERROR_PROCESS)
        && let Some(tags_value) = report["process"].get("tags")
        && !tags(tags_value)
    {
        checker.found.push(Violation {
            path: "process.tags".into(),
            rule: "optional Tags (Array of String)",
        });
    }
    checker.found
}
