//! [`ScheduleTracker`]: the scheduler daemon's state for one partition of a Karafka-compatible
//! schedules topic.
//!
//! Lifecycle: `Fresh -> Loading -> Loaded -> Stopped` (and `reload()` back to `Loading`). While
//! loading, the daemon applies every record from the earliest offset; once it reached the end it
//! calls `mark_loaded`, and from then on [`ScheduleTracker::due`] hands out due schedules in
//! `(epoch, offset)` order; past-due ones come first, right after loading.
//!
//! Horizon design (why the daemon never re-reads the whole topic): the latest schedule of every
//! key is tracked, but only those due before the *horizon* (`now + horizon_ms`, moved forward by
//! [`ScheduleTracker::advance_horizon`]) keep their payload, in the `loaded` deadline queue.
//! Schedules beyond it sit in the `deferred` queue as key -> (epoch, offset), without payload. As
//! the horizon moves, `advance_horizon` moves deferred schedules into `loaded` *awaiting payload*
//! and returns their `(key, offset)` sorted by offset; the daemon reads just those offsets back
//! (compaction keeps them: each is its key's latest record) and hands the payloads over with
//! [`ScheduleTracker::provide_payload`]. Memory is bounded by the payloads due within the horizon
//! plus ~100 bytes per far-future key; a topic with high turnover still reaches `loaded` after one
//! pass. `horizon_ms = u64::MAX` keeps every payload (no fetches).
//!
//! Invariants:
//! - A key is pending in at most one of `loaded` / `deferred`; both are ordered by
//!   `(epoch in ms, offset)`, offsets being unique per partition.
//! - A later schedule for a key replaces the earlier one; cancel removes it; a tombstone removes it
//!   unless its `schedule_source_offset` names an older schedule than the pending one (the daemon's
//!   own tombstone for a dispatched schedule must not cancel a newer schedule with the same key).
//! - `due` stops at the first entry still awaiting its payload, so dispatch order is never broken.
//! - Dispatched schedules stay *in flight* until [`ScheduleTracker::mark_dispatched`] (success),
//!   [`ScheduleTracker::mark_failed`] (target refused for good) or [`ScheduleTracker::restore`]
//!   (transient failure; re-queued unless the key changed meanwhile).
//! - `daily` counts pending schedules (loaded, deferred and in flight) per UTC day of their epoch:
//!   a schedule adds one; its replacement, cancel, tombstone or confirmed dispatch removes it. For
//!   today this equals Karafka's figure (the size of its daily buffer); for later days it is exact
//!   where Karafka only adds (it never subtracts cancelled future schedules).
//! - Times: `now` arguments are milliseconds since the Unix epoch; schedule epochs are Unix seconds.
//!   Pure: no clock reads, no threads.

use std::collections::{BTreeMap, HashMap};

use crate::CoreError;
use crate::calendar::{day_of_epoch_secs, format_day};
use crate::codec::state::{OffsetRange, STATE_SCHEMA_VERSION, StateReport, TrackerState};
use crate::deadline_queue::DeadlineQueue;

/// Karafka's loading grace period (its issue 2633): under constant writes the end of the
/// partition may never be reached, so a record written more than this long after the tracker
/// started shows that the replay has caught up with the present.
pub const LOADED_GRACE_MS: u64 = 15_000;

/// A record of the schedules topic, as the daemon decoded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleRecord<P> {
    /// Dispatch `payload` at `epoch_secs` (Unix seconds).
    Schedule {
        /// Unix seconds.
        epoch_secs: i64,
        /// What the daemon needs to dispatch (e.g. the proxy record).
        payload: P,
    },
    /// Cancel the key's schedule.
    Cancel,
    /// The key's schedule was dispatched (`source_offset`: which one, when known) or compacted.
    Tombstone {
        /// Offset of the dispatched proxy.
        source_offset: Option<u64>,
    },
}

/// What applying a record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// The schedule is within the horizon and kept with its payload.
    Loaded,
    /// The schedule is beyond the horizon; its payload will be fetched later.
    Deferred,
    /// A pending schedule was removed.
    Removed,
    /// A cancel or tombstone for a key with nothing pending.
    NotPending,
    /// A tombstone for an older schedule than the pending one; ignored.
    StaleTombstone,
}

/// Settings of a [`ScheduleTracker`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackerConfig {
    /// How far ahead payloads are kept in memory, in milliseconds (default: 1 hour).
    pub horizon_ms: u64,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        Self {
            horizon_ms: 3_600_000,
        }
    }
}

/// A schedule whose payload the daemon must read back at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadFetch {
    /// The schedule's key.
    pub key: String,
    /// Offset of its proxy record.
    pub offset: u64,
}

/// A schedule to dispatch now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch<P> {
    /// The proxy key.
    pub key: String,
    /// The proxy offset.
    pub offset: u64,
    /// The scheduled epoch, Unix seconds.
    pub epoch_secs: i64,
    /// The payload given to `apply` or `provide_payload`.
    pub payload: P,
}

/// A pending schedule within the horizon; `payload` is `None` while it is being fetched.
#[derive(Debug)]
struct LoadedSchedule<P> {
    offset: u64,
    epoch_secs: i64,
    payload: Option<P>,
}

/// A pending schedule beyond the horizon.
#[derive(Debug)]
struct DeferredSchedule {
    offset: u64,
    epoch_secs: i64,
}

/// A dispatched schedule not yet confirmed; `superseded` once a later record touched its key.
#[derive(Debug)]
struct InFlight {
    offset: u64,
    epoch_secs: i64,
    superseded: bool,
}

/// What a partition's tracker counted, carried into the next tracker of the partition when a
/// daemon is assigned it again: its state reports count since the daemon started, not since the
/// partition last came back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackerCounts {
    /// Records skipped as undecodable.
    pub skipped_records: u64,
    /// Schedules dispatched.
    pub dispatched: u64,
    /// Schedules whose target was refused for good.
    pub failed: u64,
}

/// Schedules of one schedules-topic partition; see the module docs.
#[derive(Debug)]
pub struct ScheduleTracker<P> {
    config: TrackerConfig,
    state: TrackerState,
    loaded: DeadlineQueue<String, LoadedSchedule<P>>,
    deferred: DeadlineQueue<String, DeferredSchedule>,
    in_flight: HashMap<String, InFlight>,
    daily: BTreeMap<i64, u64>,
    horizon_end_ms: u64,
    offsets: Option<(u64, u64)>,
    started_at_ms: u64,
    reloads: u64,
    skipped_records: u64,
    dispatched: u64,
    failed: u64,
}

/// Milliseconds of an epoch in seconds, for queue ordering (pre-1970 epochs sort as 0).
fn epoch_ms(epoch_secs: i64) -> u64 {
    u64::try_from(epoch_secs).unwrap_or(0).saturating_mul(1000)
}

/// The lifecycle: created fresh, loading, loaded, stopped, and loading again.
impl<P> ScheduleTracker<P> {
    /// A fresh tracker created at `now_ms`.
    pub fn new(config: TrackerConfig, now_ms: u64) -> Self {
        Self {
            horizon_end_ms: now_ms.saturating_add(config.horizon_ms),
            config,
            state: TrackerState::Fresh,
            loaded: DeadlineQueue::new(),
            deferred: DeadlineQueue::new(),
            in_flight: HashMap::new(),
            daily: BTreeMap::new(),
            offsets: None,
            started_at_ms: now_ms,
            reloads: 0,
            skipped_records: 0,
            dispatched: 0,
            failed: 0,
        }
    }

    /// The lifecycle state.
    pub fn state(&self) -> TrackerState {
        self.state
    }

    /// `Fresh -> Loading`: the daemon starts reading from the earliest offset.
    pub fn mark_loading(&mut self) -> Result<(), CoreError> {
        self.transition(TrackerState::Fresh, TrackerState::Loading, "start loading")
    }

    /// `Loading -> Loaded`: the daemon reached the end of the partition; dispatch may begin.
    pub fn mark_loaded(&mut self) -> Result<(), CoreError> {
        self.transition(TrackerState::Loading, TrackerState::Loaded, "mark loaded")
    }

    /// `Loading -> Loaded` once a record written at `record_timestamp_ms` is newer than the
    /// tracker's start plus [`LOADED_GRACE_MS`] (Karafka's rule for partitions whose end is never
    /// reached). Returns true when it moved to loaded.
    pub fn loaded_by_record_time(&mut self, record_timestamp_ms: u64) -> bool {
        let caught_up = record_timestamp_ms > self.started_at_ms.saturating_add(LOADED_GRACE_MS);
        caught_up && self.mark_loaded().is_ok()
    }

    /// Any state `-> Stopped`.
    pub fn stop(&mut self) {
        self.state = TrackerState::Stopped;
    }

    /// `Loading | Loaded -> Loading` with everything forgotten, for a full re-read (counted in
    /// `reloads`).
    pub fn reload(&mut self) -> Result<(), CoreError> {
        if !matches!(self.state, TrackerState::Loading | TrackerState::Loaded) {
            return Err(self.refuse("reload"));
        }
        self.loaded = DeadlineQueue::new();
        self.deferred = DeadlineQueue::new();
        self.in_flight.clear();
        self.daily.clear();
        self.offsets = None;
        self.reloads += 1;
        self.state = TrackerState::Loading;
        Ok(())
    }

    fn transition(
        &mut self,
        from: TrackerState,
        to: TrackerState,
        operation: &'static str,
    ) -> Result<(), CoreError> {
        if self.state != from {
            return Err(self.refuse(operation));
        }
        self.state = to;
        Ok(())
    }

    fn refuse(&self, operation: &'static str) -> CoreError {
        CoreError::InvalidState {
            operation,
            state: self.state.as_str(),
        }
    }
}

/// Applying the topic's records: schedules, cancellations and tombstones, and the horizon
/// that decides which of them keep their payload.
impl<P> ScheduleTracker<P> {
    /// Applies the record at `offset` with proxy key `key` (while loading or loaded).
    pub fn apply(
        &mut self,
        offset: u64,
        key: &str,
        record: ScheduleRecord<P>,
    ) -> Result<ApplyOutcome, CoreError> {
        if !matches!(self.state, TrackerState::Loading | TrackerState::Loaded) {
            return Err(self.refuse("apply a record"));
        }
        self.see_offset(offset);
        if let Some(in_flight) = self.in_flight.get_mut(key) {
            in_flight.superseded = true;
        }
        match record {
            ScheduleRecord::Schedule {
                epoch_secs,
                payload,
            } => {
                self.remove_pending(key);
                *self.daily.entry(day_of_epoch_secs(epoch_secs)).or_default() += 1;
                let deadline = epoch_ms(epoch_secs);
                if deadline <= self.horizon_end_ms {
                    let schedule = LoadedSchedule {
                        offset,
                        epoch_secs,
                        payload: Some(payload),
                    };
                    self.loaded
                        .push(key.to_owned(), deadline, offset, schedule)?;
                    Ok(ApplyOutcome::Loaded)
                } else {
                    let schedule = DeferredSchedule { offset, epoch_secs };
                    self.deferred
                        .push(key.to_owned(), deadline, offset, schedule)?;
                    Ok(ApplyOutcome::Deferred)
                }
            }
            ScheduleRecord::Cancel => Ok(self.remove_outcome(key)),
            ScheduleRecord::Tombstone { source_offset } => {
                let pending_offset = self.pending_offset(key);
                if let (Some(source), Some(pending)) = (source_offset, pending_offset) {
                    if source < pending {
                        return Ok(ApplyOutcome::StaleTombstone);
                    }
                }
                Ok(self.remove_outcome(key))
            }
        }
    }

    /// Counts a record the daemon could not decode and skipped (it still moves the offsets).
    pub fn record_skipped(&mut self, offset: u64) {
        self.see_offset(offset);
        self.skipped_records += 1;
    }

    fn see_offset(&mut self, offset: u64) {
        self.offsets = Some(match self.offsets {
            Some((low, high)) => (low.min(offset), high.max(offset)),
            None => (offset, offset),
        });
    }

    fn pending_offset(&self, key: &str) -> Option<u64> {
        self.loaded
            .get(key)
            .map(|s| s.offset)
            .or_else(|| self.deferred.get(key).map(|s| s.offset))
    }

    fn remove_outcome(&mut self, key: &str) -> ApplyOutcome {
        if self.remove_pending(key) {
            ApplyOutcome::Removed
        } else {
            ApplyOutcome::NotPending
        }
    }

    /// Removes the key's pending schedule (loaded or deferred) and uncounts it.
    fn remove_pending(&mut self, key: &str) -> bool {
        let epoch = match self.loaded.remove(key) {
            Some(schedule) => Some(schedule.epoch_secs),
            None => self.deferred.remove(key).map(|s| s.epoch_secs),
        };
        epoch.map(|epoch| self.uncount(epoch)).is_some()
    }

    fn uncount(&mut self, epoch_secs: i64) {
        let day = day_of_epoch_secs(epoch_secs);
        if let Some(count) = self.daily.get_mut(&day) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.daily.remove(&day);
            }
        }
    }

    /// Moves the horizon to `now_ms + horizon_ms` (never backwards) and returns the deferred
    /// schedules that came within it, sorted by offset; the daemon reads each back and calls
    /// [`Self::provide_payload`] (or applies a `Cancel` at that offset if the record is unusable).
    pub fn advance_horizon(&mut self, now_ms: u64) -> Result<Vec<PayloadFetch>, CoreError> {
        self.horizon_end_ms = self
            .horizon_end_ms
            .max(now_ms.saturating_add(self.config.horizon_ms));
        let mut fetches = Vec::new();
        while let Some((key, deferred)) = self.deferred.pop_if_due(self.horizon_end_ms) {
            let schedule = LoadedSchedule {
                offset: deferred.offset,
                epoch_secs: deferred.epoch_secs,
                payload: None,
            };
            let deadline = epoch_ms(deferred.epoch_secs);
            fetches.push(PayloadFetch {
                key: key.clone(),
                offset: deferred.offset,
            });
            self.loaded.push(key, deadline, deferred.offset, schedule)?;
        }
        fetches.sort_unstable_by_key(|fetch| fetch.offset);
        Ok(fetches)
    }

    /// Supplies the payload read back for a [`PayloadFetch`]. Returns false (and drops it) when
    /// the key's pending schedule is no longer the one at `offset` or already has its payload.
    pub fn provide_payload(&mut self, key: &str, offset: u64, payload: P) -> bool {
        match self.loaded.get_mut(key) {
            Some(schedule) if schedule.offset == offset && schedule.payload.is_none() => {
                schedule.payload = Some(payload);
                true
            }
            _ => false,
        }
    }
}

/// Dispatching: the due schedules handed out, and each one's outcome.
impl<P> ScheduleTracker<P> {
    /// Up to `max` schedules due at `now_ms`, in `(epoch, offset)` order; empty unless loaded.
    /// They are in flight until [`Self::mark_dispatched`] or [`Self::restore`].
    pub fn due(&mut self, now_ms: u64, max: usize) -> Vec<Dispatch<P>> {
        let mut due = Vec::new();
        if self.state != TrackerState::Loaded {
            return due;
        }
        while due.len() < max {
            let ready = self
                .loaded
                .peek()
                .is_some_and(|(_, deadline, head)| deadline <= now_ms && head.payload.is_some());
            if !ready {
                break;
            }
            let Some((key, schedule)) = self.loaded.pop_if_due(now_ms) else {
                break;
            };
            let Some(payload) = schedule.payload else {
                break;
            };
            self.in_flight.insert(
                key.clone(),
                InFlight {
                    offset: schedule.offset,
                    epoch_secs: schedule.epoch_secs,
                    superseded: false,
                },
            );
            due.push(Dispatch {
                key,
                offset: schedule.offset,
                epoch_secs: schedule.epoch_secs,
                payload,
            });
        }
        due
    }

    /// Confirms the dispatch of `key`'s schedule at `offset` (target and tombstone flushed).
    /// Returns false when no such dispatch is in flight.
    pub fn mark_dispatched(&mut self, key: &str, offset: u64) -> bool {
        let settled = self.settle(key, offset);
        if settled {
            self.dispatched += 1;
        }
        settled
    }

    /// What this tracker counted (see [`TrackerCounts`]).
    pub fn counts(&self) -> TrackerCounts {
        TrackerCounts {
            skipped_records: self.skipped_records,
            dispatched: self.dispatched,
            failed: self.failed,
        }
    }

    /// Adds what the daemon's earlier trackers of this partition counted.
    pub fn add_earlier(&mut self, earlier: TrackerCounts) {
        self.skipped_records += earlier.skipped_records;
        self.dispatched += earlier.dispatched;
        self.failed += earlier.failed;
    }

    /// Gives up on the in-flight schedule of `key` at `offset`: its target was refused for good
    /// (counted in `failed`). Returns false when no such dispatch is in flight.
    pub fn mark_failed(&mut self, key: &str, offset: u64) -> bool {
        let settled = self.settle(key, offset);
        if settled {
            self.failed += 1;
        }
        settled
    }

    /// Returns a failed dispatch to the queue. It is dropped instead (and false returned) when a
    /// later record for its key arrived meanwhile, or when it is not in flight.
    pub fn restore(&mut self, dispatch: Dispatch<P>) -> Result<bool, CoreError> {
        let Some(in_flight) = self.take_in_flight(&dispatch.key, dispatch.offset) else {
            return Ok(false);
        };
        if in_flight.superseded {
            self.uncount(in_flight.epoch_secs);
            return Ok(false);
        }
        let schedule = LoadedSchedule {
            offset: dispatch.offset,
            epoch_secs: dispatch.epoch_secs,
            payload: Some(dispatch.payload),
        };
        let deadline = epoch_ms(dispatch.epoch_secs);
        self.loaded
            .push(dispatch.key, deadline, dispatch.offset, schedule)?;
        Ok(true)
    }

    /// Ends the in-flight dispatch of `key` at `offset` (no longer pending); false when no such
    /// dispatch is in flight.
    fn settle(&mut self, key: &str, offset: u64) -> bool {
        let Some(in_flight) = self.take_in_flight(key, offset) else {
            return false;
        };
        self.uncount(in_flight.epoch_secs);
        true
    }

    fn take_in_flight(&mut self, key: &str, offset: u64) -> Option<InFlight> {
        if self.in_flight.get(key)?.offset != offset {
            return None;
        }
        self.in_flight.remove(key)
    }
}

/// What the tracker holds, for status and state reports.
impl<P> ScheduleTracker<P> {
    /// When the next loaded schedule is due (ms), for the daemon's sleep.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.loaded.next_deadline()
    }

    /// Pending schedules: loaded, deferred and in flight.
    pub fn len(&self) -> usize {
        self.loaded.len() + self.deferred.len() + self.in_flight.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pending schedules beyond the horizon (held without payload).
    pub fn deferred_len(&self) -> usize {
        self.deferred.len()
    }

    /// Pending schedules per UTC day, `"YYYY-MM-DD" -> count`.
    pub fn daily(&self) -> BTreeMap<String, u64> {
        self.daily
            .iter()
            .map(|(&day, &count)| (format_day(day), count))
            .collect()
    }

    /// Lowest and highest offsets seen, if any.
    pub fn offsets(&self) -> Option<(u64, u64)> {
        self.offsets
    }

    /// The state report to publish at `now_ms` (see [`crate::codec::state`]).
    pub fn state_report(&self, now_ms: u64) -> StateReport {
        let signed = |offset: u64| i64::try_from(offset).unwrap_or(i64::MAX);
        let (low, high) = self
            .offsets
            .map_or((-1, -1), |(low, high)| (signed(low), signed(high)));
        StateReport {
            schema_version: STATE_SCHEMA_VERSION.to_owned(),
            dispatched_at: now_ms as f64 / 1000.0,
            state: self.state,
            offsets: OffsetRange { low, high },
            daily: self.daily(),
            started_at: i64::try_from(self.started_at_ms / 1000).unwrap_or(i64::MAX),
            reloads: self.reloads,
            skipped_records: self.skipped_records,
            dispatched: self.dispatched,
            failed: self.failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY_MS: u64 = 86_400_000;
    const NOW_MS: u64 = 1_700_000_000_000;

    fn schedule(epoch_secs: i64, payload: &str) -> ScheduleRecord<String> {
        ScheduleRecord::Schedule {
            epoch_secs,
            payload: payload.to_owned(),
        }
    }

    fn loaded_tracker() -> ScheduleTracker<String> {
        let mut tracker = ScheduleTracker::new(TrackerConfig::default(), NOW_MS);
        tracker.mark_loading().unwrap();
        tracker
    }

    #[test]
    fn dispatches_in_epoch_then_offset_order_only_when_loaded() {
        let mut tracker = loaded_tracker();
        let now = (NOW_MS / 1000) as i64;
        tracker.apply(0, "a", schedule(now + 5, "A")).unwrap();
        tracker.apply(1, "b", schedule(now - 100, "B")).unwrap();
        tracker.apply(2, "c", schedule(now + 5, "C")).unwrap();
        tracker.apply(3, "a", schedule(now + 1, "A2")).unwrap();
        assert!(
            tracker.due(NOW_MS + 10_000, 10).is_empty(),
            "not loaded yet"
        );
        tracker.mark_loaded().unwrap();
        let due: Vec<_> = tracker
            .due(NOW_MS + 10_000, 10)
            .into_iter()
            .map(|d| d.payload)
            .collect();
        assert_eq!(due, ["B", "A2", "C"]);
        assert_eq!(tracker.len(), 3, "in flight until confirmed");
        assert!(tracker.mark_dispatched("b", 1));
        assert!(!tracker.mark_dispatched("b", 1));
        assert_eq!(tracker.offsets(), Some((0, 3)));
    }

    #[test]
    fn a_partition_assigned_again_reports_the_counts_of_its_earlier_trackers_too() {
        let now = (NOW_MS / 1000) as i64;
        let mut first = loaded_tracker();
        first.apply(0, "a", schedule(now - 1, "A")).unwrap();
        first.apply(1, "b", schedule(now - 1, "B")).unwrap();
        first.mark_loaded().unwrap();
        first.due(NOW_MS, 10);
        assert!(first.mark_dispatched("a", 0));
        assert!(first.mark_failed("b", 1));
        let counts = first.counts();
        assert_eq!(
            counts,
            TrackerCounts {
                skipped_records: 0,
                dispatched: 1,
                failed: 1
            }
        );
        // The partition comes back: the new tracker reads it again and dispatches one more.
        let mut again = loaded_tracker();
        again.add_earlier(counts);
        again.apply(2, "c", schedule(now - 1, "C")).unwrap();
        again.mark_loaded().unwrap();
        again.due(NOW_MS, 10);
        assert!(again.mark_dispatched("c", 2));
        let report = again.state_report(NOW_MS);
        assert_eq!((report.dispatched, report.failed), (2, 1));
    }

    #[test]
    fn cancel_tombstone_and_daily_counts() {
        let mut tracker = loaded_tracker();
        let now = (NOW_MS / 1000) as i64;
        tracker.apply(0, "a", schedule(now + 10, "A")).unwrap();
        tracker
            .apply(1, "b", schedule(now + 86_400 * 3, "B"))
            .unwrap();
        assert_eq!(
            tracker.daily(),
            BTreeMap::from([("2023-11-14".to_owned(), 1), ("2023-11-17".to_owned(), 1)])
        );
        assert_eq!(
            tracker.apply(2, "b", ScheduleRecord::Cancel),
            Ok(ApplyOutcome::Removed)
        );
        assert_eq!(
            tracker.apply(3, "x", ScheduleRecord::Cancel),
            Ok(ApplyOutcome::NotPending)
        );
        let stale = ScheduleRecord::Tombstone {
            source_offset: Some(0),
        };
        tracker.apply(4, "a", schedule(now + 20, "A2")).unwrap();
        assert_eq!(
            tracker.apply(5, "a", stale),
            Ok(ApplyOutcome::StaleTombstone)
        );
        let compacted = ScheduleRecord::Tombstone {
            source_offset: None,
        };
        assert_eq!(tracker.apply(6, "a", compacted), Ok(ApplyOutcome::Removed));
        assert!(tracker.daily().is_empty());
        assert!(tracker.is_empty());
    }

    #[test]
    fn far_schedules_are_deferred_and_fetched_when_the_horizon_reaches_them() {
        let mut tracker = loaded_tracker();
        tracker.mark_loaded().unwrap();
        let in_two_days = ((NOW_MS + 2 * DAY_MS) / 1000) as i64;
        assert_eq!(
            tracker.apply(7, "far", schedule(in_two_days, "F")),
            Ok(ApplyOutcome::Deferred)
        );
        assert_eq!(tracker.advance_horizon(NOW_MS + DAY_MS), Ok(vec![]));
        let fetches = tracker.advance_horizon(NOW_MS + 2 * DAY_MS).unwrap();
        assert_eq!(
            fetches,
            vec![PayloadFetch {
                key: "far".into(),
                offset: 7
            }]
        );
        assert!(
            tracker.due(NOW_MS + 3 * DAY_MS, 10).is_empty(),
            "waits for the payload"
        );
        assert!(!tracker.provide_payload("far", 6, "wrong".into()));
        assert!(tracker.provide_payload("far", 7, "F".into()));
        let due = tracker.due(NOW_MS + 3 * DAY_MS, 10);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].payload, "F");
    }

    #[test]
    fn failed_dispatch_is_restored_unless_superseded() {
        let mut tracker = loaded_tracker();
        tracker.mark_loaded().unwrap();
        let now = (NOW_MS / 1000) as i64;
        tracker.apply(0, "a", schedule(now, "A")).unwrap();
        tracker.apply(1, "b", schedule(now, "B")).unwrap();
        let mut due = tracker.due(NOW_MS, 10);
        assert_eq!(due.len(), 2);
        tracker.apply(2, "b", ScheduleRecord::Cancel).unwrap();
        let b = due.pop().unwrap();
        let a = due.pop().unwrap();
        assert_eq!(tracker.restore(b), Ok(false));
        assert_eq!(tracker.restore(a), Ok(true));
        let again = tracker.due(NOW_MS, 10);
        assert_eq!(again.len(), 1);
        assert!(tracker.mark_failed("a", again[0].offset));
        assert!(!tracker.mark_failed("a", again[0].offset));
        assert!(tracker.is_empty() && tracker.daily().is_empty());
        assert_eq!(tracker.state_report(NOW_MS).failed, 1);
    }

    #[test]
    fn records_written_after_the_grace_period_mark_loaded() {
        let mut tracker = loaded_tracker();
        assert!(!tracker.loaded_by_record_time(NOW_MS + LOADED_GRACE_MS));
        assert_eq!(tracker.state(), TrackerState::Loading);
        assert!(tracker.loaded_by_record_time(NOW_MS + LOADED_GRACE_MS + 1));
        assert_eq!(tracker.state(), TrackerState::Loaded);
        assert!(
            !tracker.loaded_by_record_time(NOW_MS + LOADED_GRACE_MS + 2),
            "only once"
        );
    }

    #[test]
    fn lifecycle_is_enforced() {
        let mut tracker = ScheduleTracker::<String>::new(TrackerConfig::default(), NOW_MS);
        assert!(tracker.apply(0, "a", ScheduleRecord::Cancel).is_err());
        assert!(tracker.mark_loaded().is_err());
        tracker.mark_loading().unwrap();
        tracker.apply(0, "a", schedule(1, "A")).unwrap();
        tracker.reload().unwrap();
        assert!(tracker.is_empty());
        let report = tracker.state_report(NOW_MS);
        assert_eq!((report.reloads, report.offsets.low), (1, -1));
        tracker.stop();
        assert_eq!(
            tracker.mark_loading(),
            Err(CoreError::InvalidState {
                operation: "start loading",
                state: "stopped"
            })
        );
    }
}
