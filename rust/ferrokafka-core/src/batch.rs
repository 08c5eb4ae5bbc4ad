//! [`BatchBuffer`]: the bounded FIFO behind the background batching producer, with its
//! backpressure decision ([`OverflowPolicy`]) and delivery policy ([`DeliveryPolicy`]).
//!
//! Invariants:
//! - `len() <= max_count` and `bytes() <= max_bytes` at all times; `bytes()` is the sum of the
//!   sizes given to `push` for the items still buffered.
//! - Items leave in FIFO order, either through `drain_chunk` or, under `DropOldest`, as the
//!   dropped items returned by `push`: nothing is ever lost silently.
//! - When an item does not fit, `Raise` and `Block` leave the buffer unchanged and hand the item
//!   back inside [`Overflow`], naming the limit hit; the engine raises, or waits and retries (the
//!   buffer does not block: it has no threads). An item larger than `max_bytes` can never fit and
//!   is refused under every policy.
//! - Times are milliseconds on the caller's clock; `0` disables a delivery trigger.

use std::collections::VecDeque;
use std::fmt;

use crate::CoreError;

/// What to do with a push that would exceed a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverflowPolicy {
    /// Refuse the item (the producer raises `BufferOverflow`) (the default).
    Raise,
    /// Refuse the item; the engine waits for room and retries, up to its block timeout.
    Block,
    /// Drop the oldest items until the new one fits, and return them to be reported.
    DropOldest,
}

/// Size limits of a [`BatchBuffer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferLimits {
    /// Most items buffered (default: 1000).
    pub max_count: usize,
    /// Most bytes buffered (sum of item sizes).
    pub max_bytes: usize,
    /// Behaviour when full.
    pub overflow: OverflowPolicy,
}

/// When the buffered items should be delivered without being asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryPolicy {
    /// Deliver once this many items are buffered; 0 = off.
    pub delivery_threshold: usize,
    /// Deliver when this long has passed since the last delivery, in ms; 0 = off.
    pub delivery_interval_ms: u64,
}

impl DeliveryPolicy {
    /// True when `buffered` items, `since_last_ms` after the last delivery, should be delivered.
    pub fn should_deliver(&self, buffered: usize, since_last_ms: u64) -> bool {
        buffered > 0
            && ((self.delivery_threshold > 0 && buffered >= self.delivery_threshold)
                || (self.delivery_interval_ms > 0 && since_last_ms >= self.delivery_interval_ms))
    }
}

/// The limit a refused push ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverflowLimit {
    /// The buffer holds `max_count` items.
    Count {
        /// The count limit.
        max_count: usize,
    },
    /// The item does not fit in the bytes left under `max_bytes`.
    Bytes {
        /// The bytes limit.
        max_bytes: usize,
    },
    /// The item alone is larger than `max_bytes`: it can never be buffered.
    ItemTooLarge {
        /// The item's size.
        size: usize,
        /// The bytes limit.
        max_bytes: usize,
    },
}

impl fmt::Display for OverflowLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count { max_count } => write!(f, "max queue size ({max_count} messages) reached"),
            Self::Bytes { max_bytes } => write!(f, "max queue bytes ({max_bytes} bytes) reached"),
            Self::ItemTooLarge { size, max_bytes } => write!(
                f,
                "message of {size} bytes exceeds max queue bytes ({max_bytes} bytes)"
            ),
        }
    }
}

/// A refused push: the limit hit and the item, handed back to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow<T> {
    /// Which limit was hit.
    pub limit: OverflowLimit,
    /// The refused item.
    pub item: T,
}

impl<T> fmt::Display for Overflow<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "buffer overflow: {}", self.limit)
    }
}

impl<T: fmt::Debug> std::error::Error for Overflow<T> {}

/// An accepted push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushOutcome<T> {
    /// Buffered; nothing else changed.
    Queued,
    /// Buffered after dropping these oldest items (`DropOldest`); the caller reports them.
    QueuedAfterDropping(Vec<T>),
}

/// A bounded FIFO of items with sizes; see the module docs.
#[derive(Debug)]
pub struct BatchBuffer<T> {
    items: VecDeque<(T, usize)>,
    bytes: usize,
    limits: BufferLimits,
    delivery: DeliveryPolicy,
    last_delivery_ms: u64,
}

impl<T> BatchBuffer<T> {
    /// An empty buffer created at `now_ms` (the interval trigger counts from there). Both limits
    /// must be positive.
    pub fn new(
        limits: BufferLimits,
        delivery: DeliveryPolicy,
        now_ms: u64,
    ) -> Result<Self, CoreError> {
        if limits.max_count == 0 || limits.max_bytes == 0 {
            return Err(CoreError::InvalidArgument(format!(
                "buffer limits must be positive (max_count {}, max_bytes {})",
                limits.max_count, limits.max_bytes
            )));
        }
        Ok(Self {
            items: VecDeque::new(),
            bytes: 0,
            limits,
            delivery,
            last_delivery_ms: now_ms,
        })
    }

    /// Buffers `item` of `size` bytes, applying the overflow policy when it does not fit.
    pub fn push(&mut self, item: T, size: usize) -> Result<PushOutcome<T>, Overflow<T>> {
        let max_bytes = self.limits.max_bytes;
        if size > max_bytes {
            let limit = OverflowLimit::ItemTooLarge { size, max_bytes };
            return Err(Overflow { limit, item });
        }
        let mut dropped = Vec::new();
        while let Some(limit) = self.limit_hit_by(size) {
            if self.limits.overflow != OverflowPolicy::DropOldest {
                return Err(Overflow { limit, item });
            }
            match self.items.pop_front() {
                Some((oldest, oldest_size)) => {
                    self.bytes -= oldest_size;
                    dropped.push(oldest);
                }
                None => return Err(Overflow { limit, item }),
            }
        }
        self.items.push_back((item, size));
        self.bytes += size;
        Ok(if dropped.is_empty() {
            PushOutcome::Queued
        } else {
            PushOutcome::QueuedAfterDropping(dropped)
        })
    }

    /// The limit an item of `size` bytes would exceed now, if any.
    fn limit_hit_by(&self, size: usize) -> Option<OverflowLimit> {
        if self.items.len() >= self.limits.max_count {
            Some(OverflowLimit::Count {
                max_count: self.limits.max_count,
            })
        } else if size > self.limits.max_bytes - self.bytes {
            Some(OverflowLimit::Bytes {
                max_bytes: self.limits.max_bytes,
            })
        } else {
            None
        }
    }

    /// True when the delivery policy asks for a delivery at `now_ms`.
    pub fn should_deliver(&self, now_ms: u64) -> bool {
        self.delivery.should_deliver(
            self.items.len(),
            now_ms.saturating_sub(self.last_delivery_ms),
        )
    }

    /// Records that a delivery round started at `now_ms` (restarts the interval).
    pub fn mark_delivered(&mut self, now_ms: u64) {
        self.last_delivery_ms = self.last_delivery_ms.max(now_ms);
    }

    /// Removes and returns up to `max` of the oldest items, oldest first.
    pub fn drain_chunk(&mut self, max: usize) -> Vec<T> {
        let count = max.min(self.items.len());
        let chunk: Vec<T> = self
            .items
            .drain(..count)
            .map(|(item, size)| {
                self.bytes -= size;
                item
            })
            .collect();
        chunk
    }

    /// Items buffered.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Bytes buffered (sum of the sizes given to `push`).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The configured limits.
    pub fn limits(&self) -> BufferLimits {
        self.limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(overflow: OverflowPolicy) -> BatchBuffer<u32> {
        let limits = BufferLimits {
            max_count: 3,
            max_bytes: 100,
            overflow,
        };
        BatchBuffer::new(limits, DeliveryPolicy::default(), 0).unwrap()
    }

    #[test]
    fn raise_and_block_refuse_and_name_the_limit() {
        for policy in [OverflowPolicy::Raise, OverflowPolicy::Block] {
            let mut buffer = buffer(policy);
            for i in 0..3 {
                assert_eq!(buffer.push(i, 10), Ok(PushOutcome::Queued));
            }
            let refused = buffer.push(9, 10).unwrap_err();
            assert_eq!(refused.limit, OverflowLimit::Count { max_count: 3 });
            assert_eq!(refused.item, 9);
            assert_eq!(buffer.drain_chunk(1), vec![0]);
            let refused = buffer.push(9, 81).unwrap_err();
            assert_eq!(refused.limit, OverflowLimit::Bytes { max_bytes: 100 });
            assert_eq!((buffer.len(), buffer.bytes()), (2, 20));
        }
    }

    #[test]
    fn drop_oldest_returns_what_it_dropped() {
        let mut buffer = buffer(OverflowPolicy::DropOldest);
        for i in 0..3 {
            buffer.push(i, 30).unwrap();
        }
        assert_eq!(
            buffer.push(3, 50),
            Ok(PushOutcome::QueuedAfterDropping(vec![0, 1]))
        );
        assert_eq!((buffer.len(), buffer.bytes()), (2, 80));
        let too_large = buffer.push(4, 101).unwrap_err();
        assert_eq!(
            too_large.limit,
            OverflowLimit::ItemTooLarge {
                size: 101,
                max_bytes: 100
            }
        );
        assert_eq!(buffer.drain_chunk(10), vec![2, 3]);
    }

    #[test]
    fn delivery_triggers() {
        let policy = DeliveryPolicy {
            delivery_threshold: 2,
            delivery_interval_ms: 1000,
        };
        let limits = BufferLimits {
            max_count: 10,
            max_bytes: 1000,
            overflow: OverflowPolicy::Raise,
        };
        let mut buffer = BatchBuffer::new(limits, policy, 0).unwrap();
        assert!(!buffer.should_deliver(5000), "nothing buffered");
        buffer.push(1, 1).unwrap();
        assert!(!buffer.should_deliver(999));
        assert!(buffer.should_deliver(1000));
        buffer.mark_delivered(1000);
        assert!(!buffer.should_deliver(1500));
        buffer.push(2, 1).unwrap();
        assert!(buffer.should_deliver(1500), "threshold reached");
        assert!(
            !DeliveryPolicy::default().should_deliver(100, u64::MAX),
            "both off"
        );
        assert!(
            BatchBuffer::<u8>::new(
                BufferLimits {
                    max_count: 0,
                    ..limits
                },
                policy,
                0
            )
            .is_err()
        );
    }
}
