//! The scheduler state report: what the daemon publishes to `<schedules_topic>_states` (key
//! `"<state>_state"`, header `zlib: true`) as zlib-compressed JSON, field for field as Karafka Pro
//! writes it, plus ferrokafka's counters.
//!
//! Invariants: a valid report has a known schema version (not newer than
//! [`STATE_SCHEMA_VERSION`]), finite non-negative times, offsets that are `-1` (none seen) or
//! `0 <= low <= high`, and `daily` keys that are real `YYYY-MM-DD` dates. Fields added by
//! ferrokafka default to 0 when decoding a Ruby-written report; unknown fields are ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::CoreError;
use crate::calendar::parse_day;
use crate::codec::json::{Document, check_schema_version};

/// Lifecycle state of a schedules partition's tracker (`crate::schedule::ScheduleTracker`);
/// serialised as Karafka writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrackerState {
    /// Created, nothing read yet.
    Fresh,
    /// Reading the schedules partition from the earliest offset.
    Loading,
    /// Caught up: dispatching due schedules.
    Loaded,
    /// Shut down.
    Stopped,
}

impl TrackerState {
    /// The name used in reports and record keys (`"<state>_state"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Loading => "loading",
            Self::Loaded => "loaded",
            Self::Stopped => "stopped",
        }
    }
}

/// The state report schema version this build writes and the newest it reads.
pub const STATE_SCHEMA_VERSION: &str = "1.0.0";

/// Lowest and highest schedules-partition offsets seen; `-1` when none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetRange {
    /// Lowest offset seen.
    pub low: i64,
    /// Highest offset seen.
    pub high: i64,
}

impl OffsetRange {
    /// No offset seen.
    pub fn none_seen() -> Self {
        Self { low: -1, high: -1 }
    }
}

/// One scheduler state report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateReport {
    /// Schema version, `"1.0.0"`.
    pub schema_version: String,
    /// When the report was made, Unix seconds with fraction.
    pub dispatched_at: f64,
    /// Tracker lifecycle state.
    pub state: TrackerState,
    /// Offsets seen on the schedules partition (Karafka's older trackers did not report them:
    /// -1/-1 then).
    #[serde(default = "OffsetRange::none_seen")]
    pub offsets: OffsetRange,
    /// Pending schedules per UTC day.
    pub daily: BTreeMap<String, u64>,
    /// When the tracker started, Unix seconds.
    pub started_at: i64,
    /// Full re-reads of the partition since start (0 where an older tracker did not count).
    #[serde(default)]
    pub reloads: u64,
    /// Records skipped as undecodable (ferrokafka addition).
    #[serde(default)]
    pub skipped_records: u64,
    /// Schedules dispatched since the daemon started, over every assignment of the partition
    /// (ferrokafka addition).
    #[serde(default)]
    pub dispatched: u64,
    /// Schedules whose target the broker refused for good (ferrokafka addition).
    #[serde(default)]
    pub failed: u64,
}

impl Document for StateReport {
    const NAME: &'static str = "state report";

    /// ferrokafka's counters (Karafka's tracker has none): 0 when not given.
    const FILLED_WHEN_MISSING: &'static [&'static str] =
        &["skipped_records", "dispatched", "failed"];

    fn validate(&self) -> Result<(), CoreError> {
        check_schema_version(
            "state report schema",
            "schema_version",
            &self.schema_version,
            STATE_SCHEMA_VERSION,
        )?;
        if !(self.dispatched_at.is_finite() && self.dispatched_at >= 0.0) {
            return Err(CoreError::invalid_field(
                "dispatched_at",
                "must be a finite, non-negative number of seconds",
            ));
        }
        if self.started_at < 0 {
            return Err(CoreError::invalid_field(
                "started_at",
                "must not be negative",
            ));
        }
        let OffsetRange { low, high } = self.offsets;
        let none_seen = low == -1 && high == -1;
        let ordered = 0 <= low && low <= high;
        if !(none_seen || ordered) {
            return Err(CoreError::invalid_field(
                "offsets",
                format!("expected -1/-1 or 0 <= low <= high, got {low}/{high}"),
            ));
        }
        if let Some(day) = self.daily.keys().find(|day| parse_day(day).is_none()) {
            return Err(CoreError::invalid_field(
                format!("daily.{day}"),
                "key is not a YYYY-MM-DD date",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::json::{decode_document, encode_document, encode_json_document};

    fn report() -> StateReport {
        StateReport {
            schema_version: STATE_SCHEMA_VERSION.into(),
            dispatched_at: 1_700_000_000.25,
            state: TrackerState::Loaded,
            offsets: OffsetRange { low: 0, high: 41 },
            daily: BTreeMap::from([("2023-11-14".into(), 3)]),
            started_at: 1_699_999_000,
            reloads: 0,
            skipped_records: 1,
            dispatched: 7,
            failed: 2,
        }
    }

    #[test]
    fn round_trips_and_reads_karafka_json() {
        let encoded = encode_document(&report(), 6).unwrap();
        assert_eq!(
            decode_document::<StateReport>(&encoded, 1 << 20),
            Ok(report())
        );
        let ruby = br#"{"schema_version":"1.0.0","dispatched_at":1.5,"state":"loading","offsets":{"low":-1,"high":-1},"daily":{},"started_at":1,"reloads":2}"#;
        let packed = crate::codec::zlib::deflate(ruby, 6).unwrap();
        let decoded: StateReport = decode_document(&packed, 1 << 20).unwrap();
        assert_eq!(
            (decoded.state, decoded.reloads, decoded.dispatched),
            (TrackerState::Loading, 2, 0)
        );
        // Karafka's older trackers reported neither offsets nor reloads.
        let old = br#"{"schema_version":"1.0.0","dispatched_at":1.5,"state":"loaded","daily":{"2023-11-14":4},"started_at":1}"#;
        let packed = crate::codec::zlib::deflate(old, 6).unwrap();
        let decoded: StateReport = decode_document(&packed, 1 << 20).unwrap();
        assert_eq!(
            (
                decoded.offsets,
                decoded.reloads,
                decoded.daily["2023-11-14"]
            ),
            (OffsetRange::none_seen(), 0, 4)
        );
    }

    #[test]
    fn invalid_reports_are_refused() {
        let mut newer = report();
        newer.schema_version = "2.0.0".into();
        assert!(matches!(
            newer.validate(),
            Err(CoreError::UnsupportedVersion { .. })
        ));
        let mut bad_day = report();
        bad_day.daily.insert("2023-02-30".into(), 1);
        assert!(encode_document(&bad_day, 6).is_err());
        let mut bad_offsets = report();
        bad_offsets.offsets = OffsetRange { low: 5, high: 1 };
        assert!(bad_offsets.validate().is_err());
        let mut bad_time = report();
        bad_time.dispatched_at = f64::NAN;
        assert!(bad_time.validate().is_err());
    }

    #[test]
    fn json_given_is_written_as_given_but_for_ferrokafkas_counters() {
        let given = serde_json::to_value(report()).unwrap();
        let mut karafka = given.clone();
        for counter in ["skipped_records", "dispatched", "failed"] {
            karafka.as_object_mut().unwrap().remove(counter);
        }
        let written = encode_json_document::<StateReport>(&karafka, 6).unwrap();
        let decoded: StateReport = decode_document(&written, 1 << 20).unwrap();
        assert_eq!((decoded.dispatched, decoded.failed), (0, 0));
        let mut no_offsets = given.clone();
        no_offsets.as_object_mut().unwrap().remove("offsets");
        assert_eq!(
            encode_json_document::<StateReport>(&no_offsets, 6),
            Err(CoreError::invalid_field(
                "offsets",
                "required field missing"
            ))
        );
        let listed = serde_json::to_value(json_array_of(&given)).unwrap();
        assert!(matches!(
            encode_json_document::<StateReport>(&listed, 6),
            Err(CoreError::InvalidField { field, .. }) if field == "state report"
        ));
    }

    /// The report's values in field order: what serde would read positionally.
    fn json_array_of(report: &serde_json::Value) -> Vec<serde_json::Value> {
        [
            "schema_version",
            "dispatched_at",
            "state",
            "offsets",
            "daily",
            "started_at",
            "reloads",
            "skipped_records",
            "dispatched",
            "failed",
        ]
        .iter()
        .map(|field| report[field].clone())
        .collect()
    }
}
