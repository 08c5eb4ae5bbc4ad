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

type Rule = (&'static str, &'static str, fn(&Value) -> bool);

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

const REPORT: &[Rule] = &[
    ("schema_version", "required non-empty String", filled_text),
    ("dispatched_at", "required Numeric > 0", positive_numeric),
    ("type", "required \"consumer\"", |v| v == "consumer"),
    ("consumer_groups", "required Hash", hash),
    ("jobs", "required Array", Value::is_array),
];

const PROCESS: &[Rule] = &[
    ("started_at", "required Numeric > 0", positive_numeric),
    ("id", "required String with at least two ':'", |v| {
        text(v).is_some_and(|t| t.matches(':').count() >= 2)
    }),
    ("cpus", "required Integer >= 1", |v| {
        integer(v).is_some_and(|n| n >= 1)
    }),
    (
        "memory_usage",
        "required Integer >= 0",
        non_negative_integer,
    ),
    (
        "memory_total_usage",
        "required Integer >= 0",
        non_negative_integer,
    ),
    ("memory_size", "required Integer >= 0", non_negative_integer),
    ("status", "required one of Karafka's process states", |v| {
        text(v).is_some_and(|t| PROCESS_STATES.contains(&t))
    }),
    ("threads", "required Integer >= 0", non_negative_integer),
    ("workers", "required Integer >= 0", non_negative_integer),
    ("tags", "required Tags (Array of String)", tags),
    ("execution_mode", "required non-empty String", filled_text),
    ("cpu_usage", "required Array of 3 Numeric >= -1", |v| {
        v.as_array().is_some_and(|items| {
            items.len() == 3
                && items
                    .iter()
                    .all(|item| numeric(item).is_some_and(|n| n >= -1.0))
        })
    }),
];

const LISTENERS: &[Rule] = &[
    ("active", "required Integer >= 0", non_negative_integer),
    ("standby", "required Integer >= 0", non_negative_integer),
];

const VERSIONS: &[Rule] = &[
    ("ruby", "required non-empty String", filled_text),
    ("karafka", "required non-empty String", filled_text),
    ("karafka_core", "required non-empty String", filled_text),
    ("karafka_web", "required non-empty String", filled_text),
    ("waterdrop", "required non-empty String", filled_text),
    ("rdkafka", "required non-empty String", filled_text),
    ("librdkafka", "required non-empty String", filled_text),
];

const STATS: &[Rule] = &[
    ("busy", "required Integer >= 0", non_negative_integer),
    ("enqueued", "required Integer >= 0", non_negative_integer),
    ("waiting", "required Integer >= 0", non_negative_integer),
    ("utilization", "required Numeric >= 0", non_negative_numeric),
];

const TOTALS: &[Rule] = &[
    ("jobs", "required Integer >= 0", non_negative_integer),
    ("batches", "required Integer >= 0", non_negative_integer),
    ("messages", "required Integer >= 0", non_negative_integer),
    ("errors", "required Integer >= 0", non_negative_integer),
    ("retries", "required Integer >= 0", non_negative_integer),
    ("dead", "required Integer >= 0", non_negative_integer),
];

const CONSUMER_GROUP: &[Rule] = &[
    ("id", "required non-empty String", filled_text),
    ("subscription_groups", "required Hash", hash),
];

const SUBSCRIPTION_GROUP: &[Rule] = &[
    ("id", "required non-empty String", filled_text),
    ("topics", "required Hash", hash),
    ("instance_id", "required false or String", |v| {
        v == &Value::Bool(false) || v.is_string()
    }),
];

const GROUP_STATE: &[Rule] = &[
    ("state", "required non-empty String", filled_text),
    ("join_state", "required non-empty String", filled_text),
    ("stateage", "required Integer >= 0", non_negative_integer),
    (
        "rebalance_age",
        "required Integer >= 0",
        non_negative_integer,
    ),
    (
        "rebalance_cnt",
        "required Integer >= 0",
        non_negative_integer,
    ),
    ("rebalance_reason", "required String", Value::is_string),
    ("poll_age", "required Numeric >= 0", non_negative_numeric),
    ("poll_interval", "required Integer > 0", positive_integer),
];

const TOPIC: &[Rule] = &[
    ("name", "required non-empty String", filled_text),
    (
        "partitions_cnt",
        "required Integer >= 0",
        non_negative_integer,
    ),
    ("partitions", "required Hash", hash),
];

const PARTITION: &[Rule] = &[
    ("id", "required Integer >= 0", non_negative_integer),
    ("lag", "required Integer", any_integer),
    ("lag_d", "required Integer", any_integer),
    ("lag_stored", "required Integer", any_integer),
    ("lag_stored_d", "required Integer", any_integer),
    ("committed_offset", "required Integer", any_integer),
    (
        "committed_offset_fd",
        "required Integer >= 0",
        non_negative_integer,
    ),
    ("stored_offset", "required Integer", any_integer),
    (
        "stored_offset_fd",
        "required Integer >= 0",
        non_negative_integer,
    ),
    ("fetch_state", "required non-empty String", filled_text),
    ("poll_state", "required non-empty String", filled_text),
    (
        "poll_state_ch",
        "required Integer >= 0",
        non_negative_integer,
    ),
    ("hi_offset", "required Integer", any_integer),
    (
        "hi_offset_fd",
        "required Integer >= 0",
        non_negative_integer,
    ),
    ("lo_offset", "required Integer", any_integer),
    ("eof_offset", "required Integer", any_integer),
    ("ls_offset", "required Integer", any_integer),
    ("ls_offset_d", "required Integer", any_integer),
    (
        "ls_offset_fd",
        "required Integer >= 0",
        non_negative_integer,
    ),
    ("transactional", "required true or false", Value::is_boolean),
];

const JOB: &[Rule] = &[
    ("consumer", "required String", Value::is_string),
    ("consumer_group", "required String", Value::is_string),
    ("updated_at", "required Float >= 0", |v| {
        is_float(v) && non_negative_numeric(v)
    }),
    ("topic", "required String", Value::is_string),
    ("partition", "required Integer >= 0", non_negative_integer),
    (
        "first_offset",
        "required Integer >= 0 or -1001",
        offset_or_none,
    ),
    (
        "last_offset",
        "required Integer >= 0 or -1001",
        offset_or_none,
    ),
    ("committed_offset", "required Integer", any_integer),
    ("messages", "required Integer >= 0", non_negative_integer),
    (
        "type",
        "required one of consume/revoked/shutdown/tick/eofed",
        |v| text(v).is_some_and(|t| JOB_TYPES.contains(&t)),
    ),
    ("tags", "required Tags (Array of String)", tags),
    (
        "consumption_lag",
        "required Integer >= 0 or -1",
        lag_or_unknown,
    ),
    (
        "processing_lag",
        "required Integer >= 0 or -1",
        lag_or_unknown,
    ),
    ("status", "required running or pending", |v| {
        text(v).is_some_and(|t| JOB_STATUSES.contains(&t))
    }),
];

const ERROR: &[Rule] = &[
    ("schema_version", "required String", Value::is_string),
    ("id", "required non-empty String", filled_text),
    ("type", "required non-empty String", filled_text),
    ("error_class", "required non-empty String", filled_text),
    ("error_message", "required String", Value::is_string),
    ("backtrace", "required String", Value::is_string),
    ("details", "required Hash", hash),
    ("occurred_at", "required Float", is_float),
];

const ERROR_PROCESS: &[Rule] = &[("id", "required non-empty String", filled_text)];

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
        for (key, rule, check) in rules {
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
