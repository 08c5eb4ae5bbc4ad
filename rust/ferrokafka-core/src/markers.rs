//! [`MarkersQueue`]: the redelivery tracker's state for one partition of a KMQ markers topic.
//!
//! A queue consumer writes a START marker (message id, redelivery deadline, the message itself)
//! before handling a message, KEEPALIVE markers to push the deadline out, and an END marker on
//! ack/nack. The tracker applies the markers of one markers partition in offset order and asks
//! which messages are past their deadline and how far it may commit.
//!
//! Invariants:
//! - A tracked message is either *open* (in the deadline queue, ordered by `(deadline, START
//!   offset)`) or *awaiting END* (handed out by [`MarkersQueue::markers_to_redeliver`]; the caller
//!   re-produces it and then writes its END marker). Both kinds hold their START offset in
//!   `start_offsets`, so the commit position ([`MarkersQueue::smallest_open_marker_offset`]) never
//!   passes a START whose redelivery is not finished: a crash mid-redelivery replays it.
//! - Duplicate START for a tracked id (producer retry, or the queue consumer re-reading an
//!   uncommitted message): the *first* START offset is kept (that record is still needed on replay),
//!   the deadline and message of the *latest* START win (it reflects the latest processing attempt),
//!   and an id awaiting END becomes open again.
//! - KEEPALIVE sets the deadline of an open id to the marker's deadline; for an id that is not open
//!   (unknown, or already handed out for redelivery) it is ignored.
//! - END closes the id. An END for an unknown id is remembered, so that a START for it arriving
//!   later (a producer retry reordering the two, or a replay that begins between them) does not
//!   resurrect a finished message. Markers of one message always go to the same markers partition,
//!   so ordering across partitions never matters. Remembered ENDs are bounded
//!   ([`MarkersQueueConfig::max_remembered_ends`]), oldest forgotten first.
//! - Marker offsets must increase: a marker at or below the last applied offset is a replay
//!   duplicate and is ignored ([`MarkerOutcome::Stale`]).
//! - Deadlines are milliseconds on the caller's clock; "due" means `deadline <= now`. Pure: no
//!   clock, no threads.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::CoreError;
use crate::deadline_queue::DeadlineQueue;

/// A message of the queue topic: its partition and offset there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId {
    /// Queue-topic partition.
    pub partition: u32,
    /// Queue-topic offset.
    pub offset: u64,
}

/// One Kafka header with an optional (nullable) value.
pub type RecordHeader = (String, Option<Vec<u8>>);

/// The queued message as a START marker carries it, so redelivery needs no seek.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessagePayload {
    /// Record key.
    pub key: Option<Vec<u8>>,
    /// Record value.
    pub value: Option<Vec<u8>>,
    /// Record headers in order.
    pub headers: Vec<RecordHeader>,
}

/// One record of the markers topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// Processing of `message_id` started; redeliver at `deadline` unless it ends first.
    Start {
        /// The message being processed.
        message_id: MessageId,
        /// Redelivery deadline, milliseconds.
        deadline: u64,
        /// The message itself.
        payload: MessagePayload,
    },
    /// Processing of `message_id` continues; its deadline moves to `deadline`.
    KeepAlive {
        /// The message being processed.
        message_id: MessageId,
        /// New redelivery deadline, milliseconds.
        deadline: u64,
    },
    /// Processing of `message_id` finished (acked, nacked or redelivered).
    End {
        /// The finished message.
        message_id: MessageId,
    },
}

/// What applying a marker did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerOutcome {
    /// A START opened a new id.
    Opened,
    /// A START for an id already tracked: deadline and message replaced, first offset kept.
    Restarted,
    /// A KEEPALIVE moved an open id's deadline.
    Extended,
    /// An END closed a tracked id.
    Closed,
    /// A KEEPALIVE for an id that is not open; nothing changed.
    IgnoredKeepAlive,
    /// An END for an unknown id; remembered so a late START is not resurrected.
    EndWithoutStart,
    /// A START for an id whose END was already seen; dropped.
    StartAfterEnd,
    /// The marker's offset is not above the last applied one; dropped.
    Stale,
}

/// A message whose redelivery deadline passed; the caller re-produces it, then writes its END.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redelivery {
    /// The original message id.
    pub message_id: MessageId,
    /// Offset of its (first) START marker.
    pub marker_offset: u64,
    /// The deadline that passed.
    pub deadline: u64,
    /// The message to re-produce.
    pub payload: MessagePayload,
}

/// Settings of a [`MarkersQueue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkersQueueConfig {
    /// How many ENDs without a START to remember (default: 10,000).
    pub max_remembered_ends: usize,
}

impl Default for MarkersQueueConfig {
    fn default() -> Self {
        Self {
            max_remembered_ends: 10_000,
        }
    }
}

/// An open START: where it is in the markers topic and the message to redeliver.
#[derive(Debug)]
struct OpenMarker {
    start_offset: u64,
    payload: MessagePayload,
}

/// Open and redelivering messages of one markers partition; see the module docs.
#[derive(Debug)]
pub struct MarkersQueue {
    open: DeadlineQueue<MessageId, OpenMarker>,
    awaiting_end: HashMap<MessageId, u64>,
    start_offsets: BTreeSet<u64>,
    remembered_ends: HashMap<MessageId, u64>,
    remembered_order: VecDeque<(MessageId, u64)>,
    last_applied: Option<u64>,
    config: MarkersQueueConfig,
}

impl MarkersQueue {
    /// An empty queue.
    pub fn new(config: MarkersQueueConfig) -> Self {
        Self {
            open: DeadlineQueue::new(),
            awaiting_end: HashMap::new(),
            start_offsets: BTreeSet::new(),
            remembered_ends: HashMap::new(),
            remembered_order: VecDeque::new(),
            last_applied: None,
            config,
        }
    }

    /// Applies the marker read at `marker_offset`.
    ///
    /// Fails only when the deadline queue is full ([`CoreError::TooLarge`]).
    pub fn apply(
        &mut self,
        marker_offset: u64,
        marker: Marker,
    ) -> Result<MarkerOutcome, CoreError> {
        if self.last_applied.is_some_and(|last| marker_offset <= last) {
            return Ok(MarkerOutcome::Stale);
        }
        self.last_applied = Some(marker_offset);
        Ok(match marker {
            Marker::Start {
                message_id,
                deadline,
                payload,
            } => self.start(marker_offset, message_id, deadline, payload)?,
            Marker::KeepAlive {
                message_id,
                deadline,
            } => {
                if self.open.update(&message_id, deadline) {
                    MarkerOutcome::Extended
                } else {
                    MarkerOutcome::IgnoredKeepAlive
                }
            }
            Marker::End { message_id } => self.end(marker_offset, message_id),
        })
    }

    fn start(
        &mut self,
        marker_offset: u64,
        message_id: MessageId,
        deadline: u64,
        payload: MessagePayload,
    ) -> Result<MarkerOutcome, CoreError> {
        if self.remembered_ends.remove(&message_id).is_some() {
            return Ok(MarkerOutcome::StartAfterEnd);
        }
        let tracked_offset = match self.open.get(&message_id) {
            Some(open) => Some(open.start_offset),
            None => self.awaiting_end.remove(&message_id),
        };
        let start_offset = tracked_offset.unwrap_or(marker_offset);
        let marker = OpenMarker {
            start_offset,
            payload,
        };
        self.open.push(message_id, deadline, start_offset, marker)?;
        self.start_offsets.insert(start_offset);
        Ok(if tracked_offset.is_some() {
            MarkerOutcome::Restarted
        } else {
            MarkerOutcome::Opened
        })
    }

    fn end(&mut self, marker_offset: u64, message_id: MessageId) -> MarkerOutcome {
        let start_offset = match self.open.remove(&message_id) {
            Some(open) => Some(open.start_offset),
            None => self.awaiting_end.remove(&message_id),
        };
        if let Some(start_offset) = start_offset {
            self.start_offsets.remove(&start_offset);
            return MarkerOutcome::Closed;
        }
        if self.config.max_remembered_ends > 0 {
            while self.remembered_order.len() >= self.config.max_remembered_ends {
                if let Some((old_id, old_offset)) = self.remembered_order.pop_front() {
                    if self.remembered_ends.get(&old_id) == Some(&old_offset) {
                        self.remembered_ends.remove(&old_id);
                    }
                }
            }
            self.remembered_ends.insert(message_id, marker_offset);
            self.remembered_order.push_back((message_id, marker_offset));
        }
        MarkerOutcome::EndWithoutStart
    }

    /// Takes every open message whose deadline is `<= now`, in `(deadline, START offset)` order.
    /// They stay tracked (holding the commit position) until their END marker is applied.
    pub fn markers_to_redeliver(&mut self, now: u64) -> Vec<Redelivery> {
        let mut due = Vec::new();
        while let Some(deadline) = self.open.next_deadline().filter(|&d| d <= now) {
            let Some((message_id, open)) = self.open.pop_if_due(now) else {
                break;
            };
            self.awaiting_end.insert(message_id, open.start_offset);
            due.push(Redelivery {
                message_id,
                marker_offset: open.start_offset,
                deadline,
                payload: open.payload,
            });
        }
        due
    }

    /// The markers offset the tracker may commit: the smallest START offset still tracked, else
    /// the offset after the last applied marker; `None` before any marker was applied.
    pub fn smallest_open_marker_offset(&self) -> Option<u64> {
        self.start_offsets
            .first()
            .copied()
            .or_else(|| self.last_applied.map(|last| last.saturating_add(1)))
    }

    /// The earliest deadline among open messages (when to look again).
    pub fn next_deadline(&self) -> Option<u64> {
        self.open.next_deadline()
    }

    /// Messages tracked: open plus awaiting END.
    pub fn len(&self) -> usize {
        self.open.len() + self.awaiting_end.len()
    }

    /// True when no message is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages handed out for redelivery whose END has not been applied yet.
    pub fn awaiting_end_len(&self) -> usize {
        self.awaiting_end.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(offset: u64) -> MessageId {
        MessageId {
            partition: 0,
            offset,
        }
    }

    fn start(offset: u64, deadline: u64) -> Marker {
        Marker::Start {
            message_id: id(offset),
            deadline,
            payload: MessagePayload {
                value: Some(offset.to_be_bytes().to_vec()),
                ..MessagePayload::default()
            },
        }
    }

    #[test]
    fn redelivers_past_deadline_and_holds_commit_until_end() {
        let mut queue = MarkersQueue::new(MarkersQueueConfig::default());
        assert_eq!(queue.smallest_open_marker_offset(), None);
        assert_eq!(queue.apply(10, start(1, 500)), Ok(MarkerOutcome::Opened));
        assert_eq!(queue.apply(11, start(2, 300)), Ok(MarkerOutcome::Opened));
        assert_eq!(
            queue.apply(12, Marker::End { message_id: id(2) }),
            Ok(MarkerOutcome::Closed)
        );
        assert_eq!(queue.smallest_open_marker_offset(), Some(10));
        assert!(queue.markers_to_redeliver(499).is_empty());
        let due = queue.markers_to_redeliver(500);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].message_id, due[0].marker_offset), (id(1), 10));
        assert_eq!(
            queue.smallest_open_marker_offset(),
            Some(10),
            "held until END"
        );
        queue.apply(13, Marker::End { message_id: id(1) }).unwrap();
        assert_eq!(queue.smallest_open_marker_offset(), Some(14));
        assert!(queue.is_empty());
    }

    #[test]
    fn keepalive_and_duplicate_start() {
        let mut queue = MarkersQueue::new(MarkersQueueConfig::default());
        queue.apply(1, start(7, 100)).unwrap();
        let keepalive = Marker::KeepAlive {
            message_id: id(7),
            deadline: 200,
        };
        assert_eq!(queue.apply(2, keepalive), Ok(MarkerOutcome::Extended));
        assert!(queue.markers_to_redeliver(150).is_empty());
        assert_eq!(queue.apply(3, start(7, 400)), Ok(MarkerOutcome::Restarted));
        assert!(
            queue.markers_to_redeliver(300).is_empty(),
            "later deadline wins"
        );
        assert_eq!(
            queue.smallest_open_marker_offset(),
            Some(1),
            "first offset kept"
        );
        let unknown = Marker::KeepAlive {
            message_id: id(8),
            deadline: 1,
        };
        assert_eq!(queue.apply(4, unknown), Ok(MarkerOutcome::IgnoredKeepAlive));
        assert_eq!(queue.apply(4, start(9, 1)), Ok(MarkerOutcome::Stale));
    }

    #[test]
    fn end_before_start_is_not_resurrected_and_memory_is_bounded() {
        let mut queue = MarkersQueue::new(MarkersQueueConfig {
            max_remembered_ends: 2,
        });
        for (offset, message) in [(1, 1), (2, 2), (3, 3)] {
            let end = Marker::End {
                message_id: id(message),
            };
            assert_eq!(queue.apply(offset, end), Ok(MarkerOutcome::EndWithoutStart));
        }
        assert_eq!(
            queue.apply(4, start(3, 10)),
            Ok(MarkerOutcome::StartAfterEnd)
        );
        assert_eq!(
            queue.apply(5, start(1, 10)),
            Ok(MarkerOutcome::Opened),
            "forgotten"
        );
        assert_eq!(queue.len(), 1);
    }
}
