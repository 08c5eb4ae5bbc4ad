//! [`DeadlineQueue`]: an indexed 4-ary min-heap of items keyed by id and ordered by
//! `(deadline, tiebreak)`.
//!
//! Invariants:
//! - `heap`, `slab` and `index` always hold the same entries: `slab` is dense (an entry removed
//!   from the middle is replaced by the last one), `heap[p].slot` points into `slab`,
//!   `slab[s].heap_pos` points back into `heap`, and `index` maps each id to its slot.
//! - `heap` is a 4-ary min-heap on `(deadline, tiebreak)`. Entries with an equal pair leave in an
//!   unspecified order, so callers give unique tiebreaks (offsets, sequence numbers) when the order
//!   matters.
//! - Every keyed operation (`push`, `update`, `remove`, `pop_due` per item) is O(log n): one hash
//!   probe plus one sift. `peek` and `next_deadline` are O(1).
//! - Deadlines are opaque `u64`s in whatever unit the caller uses (the rest of the core uses
//!   milliseconds since the Unix epoch); "due" means `deadline <= now`.
//! - Pure data structure: no clock, no threads, no I/O.
//!
//! Memory per entry, beyond the item (ids of type `u64`, item aligned to 8): a 24-byte heap entry
//! (`deadline`, `tiebreak`, `slot: u32`, padded), 16 bytes of slab bookkeeping (the id and the
//! `heap_pos: u32` back-pointer, padded) and a 5-byte index bucket (`u32` slot + control byte;
//! the id is stored once, in the slab, and compared through the slot). With full tables that is
//! 24 + 16 + 5 / (7/8) ≈ 46 bytes; right after the index or a `Vec` grows, spare capacity raises it
//! to at most ≈ 2 × 40 + 5 / (7/16) ≈ 92 bytes. [`DeadlineQueue::allocated_bytes`] reports the
//! real figure.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use crate::CoreError;

/// Children per heap node: a 4-ary heap is shallower than a binary one and its children share a
/// cache line, which is faster for the pop-heavy workloads of schedulers.
const ARITY: usize = 4;

/// One heap node: the ordering key and the slab slot holding the id and item.
#[derive(Clone, Copy, Debug)]
struct HeapEntry {
    deadline: u64,
    tiebreak: u64,
    slot: u32,
}

impl HeapEntry {
    fn order(&self) -> (u64, u64) {
        (self.deadline, self.tiebreak)
    }
}

/// One stored entry: its id, its item and where its heap node currently is.
#[derive(Debug)]
struct SlabEntry<Id, Item> {
    id: Id,
    heap_pos: u32,
    item: Item,
}

/// A priority queue of items keyed by a unique `Id`, ordered by `(deadline, tiebreak)`, with
/// O(log n) update and removal by id.
#[derive(Debug)]
pub struct DeadlineQueue<Id, Item> {
    heap: Vec<HeapEntry>,
    slab: Vec<SlabEntry<Id, Item>>,
    index: HashTable<u32>,
}

impl<Id, Item> Default for DeadlineQueue<Id, Item> {
    fn default() -> Self {
        Self {
            heap: Vec::new(),
            slab: Vec::new(),
            index: HashTable::new(),
        }
    }
}

impl<Id: Hash + Eq, Item> DeadlineQueue<Id, Item> {
    /// The largest number of entries a queue can hold (slots are `u32`).
    pub const MAX_LEN: usize = u32::MAX as usize;

    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty queue with room for `capacity` entries before reallocating.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            heap: Vec::with_capacity(capacity),
            slab: Vec::with_capacity(capacity),
            index: HashTable::with_capacity(capacity),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when the queue holds no entry.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// True when an entry with this id is queued.
    pub fn contains<Q>(&self, id: &Q) -> bool
    where
        Id: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.find_slot(id).is_some()
    }

    /// The item queued under `id`.
    pub fn get<Q>(&self, id: &Q) -> Option<&Item>
    where
        Id: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.find_slot(id).map(|slot| &self.slab[slot].item)
    }

    /// Mutable access to the item queued under `id` (its position in the queue is unchanged).
    pub fn get_mut<Q>(&mut self, id: &Q) -> Option<&mut Item>
    where
        Id: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.find_slot(id).map(|slot| &mut self.slab[slot].item)
    }

    /// The deadline of the entry queued under `id`.
    pub fn deadline_of<Q>(&self, id: &Q) -> Option<u64>
    where
        Id: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.find_slot(id)
            .map(|slot| self.heap[self.slab[slot].heap_pos as usize].deadline)
    }

    /// Queues `item` under `id`. If `id` was already queued, its deadline, tiebreak and item are
    /// replaced and the previous item is returned (`Ok(Some(old))`); otherwise `Ok(None)`.
    ///
    /// Fails with [`CoreError::TooLarge`] only when the queue already holds [`Self::MAX_LEN`]
    /// entries.
    pub fn push(
        &mut self,
        id: Id,
        deadline: u64,
        tiebreak: u64,
        item: Item,
    ) -> Result<Option<Item>, CoreError> {
        let hash = FxBuildHasher.hash_one(&id);
        let slab = &self.slab;
        if let Some(&slot) = self.index.find(hash, |&s| slab[s as usize].id == id) {
            let entry = &mut self.slab[slot as usize];
            let old = std::mem::replace(&mut entry.item, item);
            let pos = entry.heap_pos as usize;
            self.heap[pos].deadline = deadline;
            self.heap[pos].tiebreak = tiebreak;
            self.restore(pos);
            return Ok(Some(old));
        }
        if self.slab.len() >= Self::MAX_LEN {
            return Err(CoreError::TooLarge {
                what: "deadline queue entries",
                limit: u64::from(u32::MAX),
            });
        }
        let slot = self.slab.len() as u32;
        let pos = self.heap.len();
        self.slab.push(SlabEntry {
            id,
            heap_pos: pos as u32,
            item,
        });
        self.heap.push(HeapEntry {
            deadline,
            tiebreak,
            slot,
        });
        let slab = &self.slab;
        self.index.insert_unique(hash, slot, |&s| {
            FxBuildHasher.hash_one(&slab[s as usize].id)
        });
        self.sift_up(pos);
        Ok(None)
    }

    /// Moves the entry queued under `id` to a new deadline, keeping its tiebreak and item.
    /// Returns false (and changes nothing) when `id` is not queued.
    pub fn update<Q>(&mut self, id: &Q, deadline: u64) -> bool
    where
        Id: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(slot) = self.find_slot(id) else {
            return false;
        };
        let pos = self.slab[slot].heap_pos as usize;
        self.heap[pos].deadline = deadline;
        self.restore(pos);
        true
    }

    /// Removes the entry queued under `id` and returns its item.
    pub fn remove<Q>(&mut self, id: &Q) -> Option<Item>
    where
        Id: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = FxBuildHasher.hash_one(id);
        let slab = &self.slab;
        let (slot, _) = self
            .index
            .find_entry(hash, |&s| slab[s as usize].id.borrow() == id)
            .ok()?
            .remove();
        Some(self.detach(slot as usize).item)
    }

    /// The entry with the smallest `(deadline, tiebreak)`: its id, deadline and item.
    pub fn peek(&self) -> Option<(&Id, u64, &Item)> {
        let head = self.heap.first()?;
        let entry = &self.slab[head.slot as usize];
        Some((&entry.id, head.deadline, &entry.item))
    }

    /// The smallest deadline in the queue (when the caller should next look for due entries).
    pub fn next_deadline(&self) -> Option<u64> {
        self.heap.first().map(|head| head.deadline)
    }

    /// Removes and returns up to `max` entries whose deadline is `<= now`, in `(deadline,
    /// tiebreak)` order.
    pub fn pop_due(&mut self, now: u64, max: usize) -> Vec<(Id, Item)> {
        let mut due = Vec::new();
        while due.len() < max {
            match self.pop_if_due(now) {
                Some(entry) => due.push(entry),
                None => break,
            }
        }
        due
    }

    /// Removes and returns the head entry if its deadline is `<= now`.
    pub fn pop_if_due(&mut self, now: u64) -> Option<(Id, Item)> {
        let head = *self.heap.first().filter(|head| head.deadline <= now)?;
        let hash = FxBuildHasher.hash_one(&self.slab[head.slot as usize].id);
        if let Ok(found) = self.index.find_entry(hash, |&s| s == head.slot) {
            found.remove();
        }
        let entry = self.detach(head.slot as usize);
        Some((entry.id, entry.item))
    }

    /// Bytes currently allocated by the queue's own tables (heap, slab including the items'
    /// inline size, index); excludes memory the items own behind pointers.
    pub fn allocated_bytes(&self) -> usize {
        self.heap.capacity() * size_of::<HeapEntry>()
            + self.slab.capacity() * size_of::<SlabEntry<Id, Item>>()
            + self.index.allocation_size()
    }

    fn find_slot<Q>(&self, id: &Q) -> Option<usize>
    where
        Id: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = FxBuildHasher.hash_one(id);
        self.index
            .find(hash, |&s| self.slab[s as usize].id.borrow() == id)
            .map(|&s| s as usize)
    }

    /// Takes `slot` out of the heap and the slab (its index entry is already gone), keeping the
    /// slab dense by moving the last entry into the hole.
    fn detach(&mut self, slot: usize) -> SlabEntry<Id, Item> {
        let pos = self.slab[slot].heap_pos as usize;
        self.heap.swap_remove(pos);
        if pos < self.heap.len() {
            let moved_slot = self.heap[pos].slot as usize;
            self.slab[moved_slot].heap_pos = pos as u32;
            self.restore(pos);
        }
        let last = self.slab.len() - 1;
        if slot != last {
            let hash = FxBuildHasher.hash_one(&self.slab[last].id);
            if let Some(found) = self.index.find_mut(hash, |&s| s as usize == last) {
                *found = slot as u32;
            }
            let moved_pos = self.slab[last].heap_pos as usize;
            self.heap[moved_pos].slot = slot as u32;
        }
        self.slab.swap_remove(slot)
    }

    /// Re-establishes the heap order after the node at `pos` changed its key.
    fn restore(&mut self, pos: usize) {
        if pos > 0 && self.heap[pos].order() < self.heap[(pos - 1) / ARITY].order() {
            self.sift_up(pos);
        } else {
            self.sift_down(pos);
        }
    }

    fn sift_up(&mut self, mut pos: usize) {
        let moving = self.heap[pos];
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            if self.heap[parent].order() <= moving.order() {
                break;
            }
            self.place(pos, self.heap[parent]);
            pos = parent;
        }
        self.place(pos, moving);
    }

    fn sift_down(&mut self, mut pos: usize) {
        let moving = self.heap[pos];
        let len = self.heap.len();
        loop {
            let first = pos * ARITY + 1;
            if first >= len {
                break;
            }
            let mut best = first;
            for child in first + 1..(first + ARITY).min(len) {
                if self.heap[child].order() < self.heap[best].order() {
                    best = child;
                }
            }
            if self.heap[best].order() >= moving.order() {
                break;
            }
            self.place(pos, self.heap[best]);
            pos = best;
        }
        self.place(pos, moving);
    }

    fn place(&mut self, pos: usize, entry: HeapEntry) {
        self.slab[entry.slot as usize].heap_pos = pos as u32;
        self.heap[pos] = entry;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_deadline_then_tiebreak_order() {
        let mut queue = DeadlineQueue::new();
        for (id, deadline, tiebreak) in [(1u64, 30, 0), (2, 10, 5), (3, 10, 2), (4, 20, 0)] {
            assert_eq!(queue.push(id, deadline, tiebreak, id * 100), Ok(None));
        }
        assert_eq!(queue.peek(), Some((&3, 10, &300)));
        assert_eq!(queue.pop_due(20, 10), vec![(3, 300), (2, 200), (4, 400)]);
        assert_eq!(queue.next_deadline(), Some(30));
        assert!(queue.pop_due(29, 10).is_empty());
        assert_eq!(queue.len(), 1);
    }

    #[test]
    fn push_existing_replaces_item_and_position() {
        let mut queue = DeadlineQueue::new();
        queue.push("a", 10, 0, 1).unwrap();
        queue.push("b", 20, 0, 2).unwrap();
        assert_eq!(queue.push("a", 30, 0, 3), Ok(Some(1)));
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.peek(), Some((&"b", 20, &2)));
        assert_eq!(queue.get(&"a"), Some(&3));
    }

    #[test]
    fn update_and_remove_by_id() {
        let mut queue = DeadlineQueue::new();
        for id in 0..50u64 {
            queue.push(id, 1000 - id, id, ()).unwrap();
        }
        assert!(queue.update(&7, 1));
        assert!(!queue.update(&99, 1));
        assert_eq!(queue.deadline_of(&7), Some(1));
        assert_eq!(queue.peek().map(|(id, _, _)| *id), Some(7));
        assert_eq!(queue.remove(&7), Some(()));
        assert_eq!(queue.remove(&7), None);
        assert!(!queue.contains(&7));
        let order: Vec<u64> = queue
            .pop_due(u64::MAX, usize::MAX)
            .into_iter()
            .map(|(id, ())| id)
            .collect();
        let expected: Vec<u64> = (0..50).rev().filter(|&id| id != 7).collect();
        assert_eq!(order, expected);
        assert!(queue.is_empty());
    }

    #[test]
    fn pop_due_respects_max() {
        let mut queue = DeadlineQueue::new();
        for id in 0..10u64 {
            queue.push(id, id, 0, ()).unwrap();
        }
        assert_eq!(queue.pop_due(100, 3).len(), 3);
        assert_eq!(queue.next_deadline(), Some(3));
    }

    #[test]
    fn entry_overhead_fits_the_budget() {
        // Documented in the module header: 24 (heap) + 16 (slab bookkeeping) + 5 (index bucket).
        assert_eq!(size_of::<HeapEntry>(), 24);
        let bookkeeping = size_of::<SlabEntry<u64, [u64; 4]>>() - size_of::<[u64; 4]>();
        assert_eq!(bookkeeping, 16);
        // Fill every table to its capacity: 7/8 of the index's 2^16 buckets.
        let n = (1usize << 16) * 7 / 8;
        let mut queue = DeadlineQueue::with_capacity(n);
        for id in 0..n as u64 {
            queue.push(id, id, 0, [0u64; 4]).unwrap();
        }
        let per_entry = queue.allocated_bytes() / n - size_of::<[u64; 4]>();
        assert!(per_entry <= 48, "overhead {per_entry} bytes per entry");
    }
}
