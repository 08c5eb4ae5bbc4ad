//! Model-based property tests: each core structure, driven by random operation sequences, must
//! answer exactly like a naive model written for clarity rather than speed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use ferrokafka_core::calendar::{day_of_epoch_secs, format_day};
use ferrokafka_core::{
    BatchBuffer, BufferLimits, DeadlineQueue, DeliveryPolicy, Marker, MarkerOutcome, MarkersQueue,
    MarkersQueueConfig, MessageId, MessagePayload, OverflowPolicy, PushOutcome, ScheduleRecord,
    ScheduleTracker, TrackerConfig,
};
use proptest::prelude::*;

// ---------------------------------------------------------------- deadline queue

#[derive(Debug, Clone)]
enum QueueOp {
    Push { id: u8, deadline: u64 },
    Update { id: u8, deadline: u64 },
    Remove { id: u8 },
    PopDue { now: u64, max: usize },
}

fn queue_op() -> impl Strategy<Value = QueueOp> {
    prop_oneof![
        4 => (0u8..24, 0u64..100).prop_map(|(id, deadline)| QueueOp::Push { id, deadline }),
        2 => (0u8..24, 0u64..100).prop_map(|(id, deadline)| QueueOp::Update { id, deadline }),
        2 => (0u8..24).prop_map(|id| QueueOp::Remove { id }),
        1 => (0u64..120, 0usize..6).prop_map(|(now, max)| QueueOp::PopDue { now, max }),
    ]
}

proptest! {
    #[test]
    fn deadline_queue_matches_a_vec_model(ops in prop::collection::vec(queue_op(), 1..200)) {
        let mut queue = DeadlineQueue::new();
        // (id, deadline, tiebreak, item); tiebreaks are unique, so the order is total.
        let mut model: Vec<(u8, u64, u64, u64)> = Vec::new();
        for (sequence, op) in (0u64..).zip(ops) {
            match op {
                QueueOp::Push { id, deadline } => {
                    let old = model.iter().position(|e| e.0 == id).map(|i| model.remove(i).3);
                    model.push((id, deadline, sequence, sequence));
                    prop_assert_eq!(queue.push(id, deadline, sequence, sequence), Ok(old));
                }
                QueueOp::Update { id, deadline } => {
                    let entry = model.iter_mut().find(|e| e.0 == id);
                    let found = entry.is_some();
                    if let Some(entry) = entry {
                        entry.1 = deadline;
                    }
                    prop_assert_eq!(queue.update(&id, deadline), found);
                }
                QueueOp::Remove { id } => {
                    let old = model.iter().position(|e| e.0 == id).map(|i| model.remove(i).3);
                    prop_assert_eq!(queue.remove(&id), old);
                }
                QueueOp::PopDue { now, max } => {
                    model.sort_by_key(|e| (e.1, e.2));
                    let count = model.iter().take_while(|e| e.1 <= now).count().min(max);
                    let expected: Vec<(u8, u64)> =
                        model.drain(..count).map(|e| (e.0, e.3)).collect();
                    prop_assert_eq!(queue.pop_due(now, max), expected);
                }
            }
            prop_assert_eq!(queue.len(), model.len());
            let head = model.iter().min_by_key(|e| (e.1, e.2));
            prop_assert_eq!(queue.peek(), head.map(|e| (&e.0, e.1, &e.3)));
            for entry in &model {
                prop_assert_eq!(queue.get(&entry.0), Some(&entry.3));
                prop_assert_eq!(queue.deadline_of(&entry.0), Some(entry.1));
            }
        }
    }
}

// ---------------------------------------------------------------- schedule tracker

const NOW_MS: u64 = 1_700_000_000_000;
const HORIZON_MS: u64 = 3_600_000;

#[derive(Debug, Clone)]
enum ScheduleOp {
    Schedule { key: u8, in_secs: i64 },
    Cancel { key: u8 },
    Tombstone { key: u8, source_back: Option<u64> },
    Tick { advance_ms: u64, max: usize },
}

fn schedule_op() -> impl Strategy<Value = ScheduleOp> {
    prop_oneof![
        4 => (0u8..8, -600i64..3 * 86_400).prop_map(|(key, in_secs)| ScheduleOp::Schedule { key, in_secs }),
        1 => (0u8..8).prop_map(|key| ScheduleOp::Cancel { key }),
        1 => (0u8..8, prop::option::of(0u64..4))
            .prop_map(|(key, source_back)| ScheduleOp::Tombstone { key, source_back }),
        2 => (0u64..2 * HORIZON_MS, 1usize..5)
            .prop_map(|(advance_ms, max)| ScheduleOp::Tick { advance_ms, max }),
    ]
}

proptest! {
    #[test]
    fn schedule_tracker_matches_a_latest_schedule_model(ops in prop::collection::vec(schedule_op(), 1..120)) {
        let config = TrackerConfig { horizon_ms: HORIZON_MS };
        let mut tracker = ScheduleTracker::new(config, NOW_MS);
        tracker.mark_loading().unwrap();
        tracker.mark_loaded().unwrap();
        let mut now = NOW_MS;
        // key -> (epoch_secs, offset) of its pending schedule; the payload of a schedule is its
        // offset, which is also what the "topic" returns when the tracker fetches that offset.
        let mut model: BTreeMap<String, (i64, u64)> = BTreeMap::new();
        let mut offset = 0u64;
        for op in ops {
            match op {
                ScheduleOp::Schedule { key, in_secs } => {
                    let key = key.to_string();
                    let epoch_secs = (now / 1000) as i64 + in_secs;
                    model.insert(key.clone(), (epoch_secs, offset));
                    let record = ScheduleRecord::Schedule { epoch_secs, payload: offset };
                    tracker.apply(offset, &key, record).unwrap();
                    offset += 1;
                }
                ScheduleOp::Cancel { key } => {
                    let key = key.to_string();
                    model.remove(&key);
                    tracker.apply(offset, &key, ScheduleRecord::Cancel).unwrap();
                    offset += 1;
                }
                ScheduleOp::Tombstone { key, source_back } => {
                    let key = key.to_string();
                    let source_offset = source_back.map(|back| offset.saturating_sub(back));
                    let stale = matches!((source_offset, model.get(&key)),
                        (Some(source), Some(&(_, pending))) if source < pending);
                    if !stale {
                        model.remove(&key);
                    }
                    tracker.apply(offset, &key, ScheduleRecord::Tombstone { source_offset }).unwrap();
                    offset += 1;
                }
                ScheduleOp::Tick { advance_ms, max } => {
                    now += advance_ms;
                    for fetch in tracker.advance_horizon(now).unwrap() {
                        prop_assert!(tracker.provide_payload(&fetch.key, fetch.offset, fetch.offset));
                    }
                    let mut due: Vec<(i64, u64, String)> = model
                        .iter()
                        .filter(|(_, (epoch, _))| (*epoch as u64) * 1000 <= now)
                        .map(|(key, &(epoch, offset))| (epoch, offset, key.clone()))
                        .collect();
                    due.sort();
                    due.truncate(max);
                    let dispatched: Vec<(i64, u64, String)> = tracker
                        .due(now, max)
                        .into_iter()
                        .map(|d| {
                            assert_eq!(d.payload, d.offset, "payload of the right record");
                            (d.epoch_secs, d.offset, d.key)
                        })
                        .collect();
                    prop_assert_eq!(&dispatched, &due);
                    for (_, offset, key) in dispatched {
                        prop_assert!(tracker.mark_dispatched(&key, offset));
                        model.remove(&key);
                    }
                }
            }
            prop_assert_eq!(tracker.len(), model.len());
            let mut daily: BTreeMap<String, u64> = BTreeMap::new();
            for &(epoch, _) in model.values() {
                *daily.entry(format_day(day_of_epoch_secs(epoch))).or_default() += 1;
            }
            prop_assert_eq!(tracker.daily(), daily);
        }
    }
}

// ---------------------------------------------------------------- markers queue

#[derive(Debug, Clone)]
enum MarkerOp {
    Start { message: u64, deadline: u64 },
    KeepAlive { message: u64, deadline: u64 },
    End { message: u64 },
    Redeliver { now: u64 },
}

fn marker_op() -> impl Strategy<Value = MarkerOp> {
    prop_oneof![
        4 => (0u64..10, 0u64..100).prop_map(|(message, deadline)| MarkerOp::Start { message, deadline }),
        2 => (0u64..10, 0u64..100).prop_map(|(message, deadline)| MarkerOp::KeepAlive { message, deadline }),
        3 => (0u64..10).prop_map(|message| MarkerOp::End { message }),
        2 => (0u64..120).prop_map(|now| MarkerOp::Redeliver { now }),
    ]
}

fn message_id(message: u64) -> MessageId {
    MessageId {
        partition: 1,
        offset: message,
    }
}

proptest! {
    #[test]
    fn markers_queue_matches_a_naive_model(ops in prop::collection::vec(marker_op(), 1..200)) {
        let mut queue = MarkersQueue::new(MarkersQueueConfig { max_remembered_ends: 1000 });
        // message -> (first START offset, deadline, offset of the START whose payload is kept)
        let mut open: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
        let mut awaiting_end: BTreeMap<u64, u64> = BTreeMap::new();
        let mut early_ends: BTreeSet<u64> = BTreeSet::new();
        let mut last_applied: Option<u64> = None;
        for (offset, op) in (0u64..).map(|i| i * 2 + 5).zip(ops) {
            if !matches!(op, MarkerOp::Redeliver { .. }) {
                last_applied = Some(offset);
            }
            match op {
                MarkerOp::Start { message, deadline } => {
                    let expected = if early_ends.remove(&message) {
                        MarkerOutcome::StartAfterEnd
                    } else if let Some(entry) = open.get_mut(&message) {
                        *entry = (entry.0, deadline, offset);
                        MarkerOutcome::Restarted
                    } else if let Some(first) = awaiting_end.remove(&message) {
                        open.insert(message, (first, deadline, offset));
                        MarkerOutcome::Restarted
                    } else {
                        open.insert(message, (offset, deadline, offset));
                        MarkerOutcome::Opened
                    };
                    let payload = MessagePayload { value: Some(offset.to_be_bytes().to_vec()), ..MessagePayload::default() };
                    let marker = Marker::Start { message_id: message_id(message), deadline, payload };
                    prop_assert_eq!(queue.apply(offset, marker), Ok(expected));
                }
                MarkerOp::KeepAlive { message, deadline } => {
                    let expected = match open.get_mut(&message) {
                        Some(entry) => {
                            entry.1 = deadline;
                            MarkerOutcome::Extended
                        }
                        None => MarkerOutcome::IgnoredKeepAlive,
                    };
                    let marker = Marker::KeepAlive { message_id: message_id(message), deadline };
                    prop_assert_eq!(queue.apply(offset, marker), Ok(expected));
                }
                MarkerOp::End { message } => {
                    let closed = open.remove(&message).is_some() || awaiting_end.remove(&message).is_some();
                    let expected = if closed {
                        MarkerOutcome::Closed
                    } else {
                        early_ends.insert(message);
                        MarkerOutcome::EndWithoutStart
                    };
                    let marker = Marker::End { message_id: message_id(message) };
                    prop_assert_eq!(queue.apply(offset, marker), Ok(expected));
                }
                MarkerOp::Redeliver { now } => {
                    let mut due: Vec<(u64, u64, u64, u64)> = open
                        .iter()
                        .filter(|(_, e)| e.1 <= now)
                        .map(|(&message, &(first, deadline, payload_offset))| (deadline, first, message, payload_offset))
                        .collect();
                    due.sort();
                    for &(_, first, message, _) in &due {
                        open.remove(&message);
                        awaiting_end.insert(message, first);
                    }
                    let actual: Vec<(u64, u64, u64, u64)> = queue
                        .markers_to_redeliver(now)
                        .into_iter()
                        .map(|r| {
                            let value = r.payload.value.unwrap_or_default();
                            let payload_offset = u64::from_be_bytes(value.try_into().unwrap_or_default());
                            (r.deadline, r.marker_offset, r.message_id.offset, payload_offset)
                        })
                        .collect();
                    prop_assert_eq!(actual, due);
                }
            }
            let smallest = open.values().map(|e| e.0).chain(awaiting_end.values().copied()).min();
            prop_assert_eq!(queue.smallest_open_marker_offset(), smallest.or(last_applied.map(|last| last + 1)));
            prop_assert_eq!(queue.len(), open.len() + awaiting_end.len());
            prop_assert_eq!(queue.awaiting_end_len(), awaiting_end.len());
        }
    }
}

// ---------------------------------------------------------------- batch buffer

#[derive(Debug, Clone)]
enum BatchOp {
    Push { size: usize },
    Drain { max: usize },
}

fn batch_op() -> impl Strategy<Value = BatchOp> {
    prop_oneof![
        4 => (0usize..60).prop_map(|size| BatchOp::Push { size }),
        1 => (0usize..5).prop_map(|max| BatchOp::Drain { max }),
    ]
}

fn overflow_policy() -> impl Strategy<Value = OverflowPolicy> {
    prop_oneof![
        Just(OverflowPolicy::Raise),
        Just(OverflowPolicy::Block),
        Just(OverflowPolicy::DropOldest)
    ]
}

proptest! {
    #[test]
    fn batch_buffer_matches_a_fifo_model(
        policy in overflow_policy(),
        max_count in 1usize..6,
        max_bytes in 1usize..120,
        ops in prop::collection::vec(batch_op(), 1..150),
    ) {
        let limits = BufferLimits { max_count, max_bytes, overflow: policy };
        let mut buffer = BatchBuffer::new(limits, DeliveryPolicy::default(), 0).unwrap();
        let mut model: VecDeque<(u32, usize)> = VecDeque::new();
        for (item, op) in (0u32..).zip(ops) {
            match op {
                BatchOp::Push { size } => {
                    let fits = |m: &VecDeque<(u32, usize)>| {
                        m.len() < max_count && m.iter().map(|e| e.1).sum::<usize>() + size <= max_bytes
                    };
                    let result = buffer.push(item, size);
                    if size > max_bytes {
                        prop_assert!(result.is_err());
                    } else if fits(&model) {
                        model.push_back((item, size));
                        prop_assert_eq!(result, Ok(PushOutcome::Queued));
                    } else if policy == OverflowPolicy::DropOldest {
                        let mut dropped = Vec::new();
                        while !fits(&model) {
                            dropped.extend(model.pop_front().map(|e| e.0));
                        }
                        model.push_back((item, size));
                        prop_assert_eq!(result, Ok(PushOutcome::QueuedAfterDropping(dropped)));
                    } else {
                        prop_assert_eq!(result.map_err(|overflow| overflow.item), Err(item));
                    }
                }
                BatchOp::Drain { max } => {
                    let count = max.min(model.len());
                    let expected: Vec<u32> = model.drain(..count).map(|e| e.0).collect();
                    prop_assert_eq!(buffer.drain_chunk(max), expected);
                }
            }
            prop_assert_eq!(buffer.len(), model.len());
            prop_assert_eq!(buffer.bytes(), model.iter().map(|e| e.1).sum::<usize>());
        }
    }
}
