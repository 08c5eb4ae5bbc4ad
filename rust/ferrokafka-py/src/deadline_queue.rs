//! `DeadlineQueue`: the core's indexed deadline heap, keyed by Python `int` or `str` ids.
//!
//! Locking: ids become Rust keys (`int` -> `i64`, `str` -> `Box<str>`) before the lock is taken,
//! so no Python `__hash__`/`__eq__` ever runs under it. Objects leaving the queue are dropped only
//! after the guard is gone: a decref can run `__del__`, which may call back into this queue.
//!
//! GC: the core queue holds only slot numbers; the Python objects (the caller's id object and the
//! item) live in `slots`, which `__traverse__` can walk.
//!
//! GIL: every method is O(log n) per entry and stays attached (detaching costs more than a push).

use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use ferrokafka_core::{CoreError, DeadlineQueue};
use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString, PyTuple};

use crate::errors::{NativeResult, malformed, no_such_key, not_a_number, wrong_type};

#[derive(Debug, Hash, PartialEq, Eq)]
enum Key {
    Int(i64),
    Str(Box<str>),
}

fn key_of(id: &Bound<'_, PyAny>) -> PyResult<Key> {
    if let Ok(text) = id.cast::<PyString>() {
        Ok(Key::Str(text.to_str()?.into()))
    } else if id.is_instance_of::<PyInt>() {
        Ok(Key::Int(id.extract()?))
    } else {
        Err(wrong_type("DeadlineQueue ids must be int or str", id))
    }
}

/// Maps a float onto a `u64` with the same order (sign bit flipped for positives, all bits for
/// negatives), so the core's integer heap orders any finite or infinite deadline exactly.
fn deadline_key(name: &str, seconds: f64) -> PyResult<u64> {
    if seconds.is_nan() {
        return Err(not_a_number(name));
    }
    // -0.0 + 0.0 == +0.0: both zeros must map to the same key.
    let bits = (seconds + 0.0).to_bits();
    Ok(if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    })
}

fn deadline_of_key(key: u64) -> f64 {
    f64::from_bits(if key >> 63 == 1 {
        key & !(1 << 63)
    } else {
        !key
    })
}

#[derive(Debug)]
struct Stored {
    id: Py<PyAny>,
    item: Py<PyAny>,
}

#[derive(Debug, Default)]
struct State {
    queue: DeadlineQueue<Key, u32>,
    slots: Vec<Option<Stored>>,
    free: Vec<u32>,
    /// Default tiebreak: insertion order, so equal deadlines leave first-in, first-out.
    sequence: u64,
}

impl State {
    /// Queues `stored` under `key`; returns the entry it replaced, if any.
    fn insert(
        &mut self,
        key: Key,
        deadline: u64,
        tiebreak: Option<u64>,
        stored: Stored,
    ) -> Result<Option<Stored>, CoreError> {
        let tiebreak = tiebreak.unwrap_or_else(|| {
            self.sequence += 1;
            self.sequence
        });
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = u32::try_from(self.slots.len()).map_err(|_| CoreError::TooLarge {
                    what: "deadline queue entries",
                    limit: u64::from(u32::MAX),
                })?;
                self.slots.push(None);
                slot
            }
        };
        match self.queue.push(key, deadline, tiebreak, slot) {
            Ok(replaced) => {
                self.slots[slot as usize] = Some(stored);
                Ok(replaced.and_then(|old| self.release(old)))
            }
            Err(err) => {
                self.free.push(slot);
                Err(err)
            }
        }
    }

    fn release(&mut self, slot: u32) -> Option<Stored> {
        let stored = self.slots.get_mut(slot as usize)?.take();
        self.free.push(slot);
        stored
    }

    fn remove(&mut self, key: &Key) -> Option<Stored> {
        let slot = self.queue.remove(key)?;
        self.release(slot)
    }
}

/// A priority queue of items keyed by id and ordered by deadline, in Rust.
///
/// Ids are ``int`` (64-bit signed) or ``str``; pushing an id that is queued replaces its
/// deadline and item, as a ``dict`` assignment would. Deadlines are floats in any unit you pick
/// (``time.time()`` or ``time.monotonic()`` seconds are typical); an entry is due when its
/// deadline is ``<= now``. Entries with equal deadlines leave in push order unless a
/// ``tiebreak`` is given (smaller first). Every keyed operation is O(log n), and updates and
/// removals by id free the entry at once (no lazy deletion). Thread-safe; the batch methods
/// ``push_many``, ``discard_many`` and ``pop_due(max=...)`` cross into Rust once per batch.
///
/// Example:
///     >>> q = DeadlineQueue()
///     >>> q.push("order-1", 10.0, "ship")
///     >>> q.push_many([("order-2", 5.0, "bill"), ("order-3", 20.0, "mail")])
///     >>> q.update("order-3", 1.0)
///     True
///     >>> q.pop_due(now=7.0)
///     [('order-3', 'mail'), ('order-2', 'bill')]
///     >>> (len(q), "order-1" in q, q.next_deadline())
///     (1, True, 10.0)
#[pyclass(name = "DeadlineQueue", module = "ferrokafka._native", frozen)]
#[derive(Debug, Default)]
pub struct PyDeadlineQueue {
    state: Mutex<State>,
}

impl PyDeadlineQueue {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic cannot happen under this lock (the crate denies them); recover regardless.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take_one(&self, id: &Bound<'_, PyAny>) -> PyResult<Option<Stored>> {
        let key = key_of(id)?;
        Ok(self.lock().remove(&key))
    }
}

fn item_or_none(py: Python<'_>, item: Option<Bound<'_, PyAny>>) -> Py<PyAny> {
    item.map_or_else(|| py.None(), Bound::unbind)
}

#[pymethods]
impl PyDeadlineQueue {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Queue ``item`` under ``id`` at ``deadline``, replacing an entry with the same id.
    ///
    /// Raises ``TypeError`` for an id that is not ``int``/``str`` and ``ValueError`` for a NaN
    /// deadline. ``tiebreak`` (0 .. 2**64 - 1) orders equal deadlines; without it they leave in
    /// push order.
    #[pyo3(signature = (id, deadline, item = None, tiebreak = None))]
    fn push(
        &self,
        id: &Bound<'_, PyAny>,
        deadline: f64,
        item: Option<Bound<'_, PyAny>>,
        tiebreak: Option<u64>,
    ) -> NativeResult<()> {
        let key = key_of(id)?;
        let deadline = deadline_key("deadline", deadline)?;
        let stored = Stored {
            id: id.clone().unbind(),
            item: item_or_none(id.py(), item),
        };
        let replaced = self.lock().insert(key, deadline, tiebreak, stored)?;
        drop(replaced);
        Ok(())
    }

    /// Queue ``(id, deadline[, item])`` tuples in one call (ties leave in push order).
    ///
    /// Example:
    ///     >>> q = DeadlineQueue()
    ///     >>> q.push_many((i, float(i), None) for i in range(3))
    ///     >>> len(q)
    ///     3
    fn push_many(&self, entries: &Bound<'_, PyAny>) -> NativeResult<()> {
        let py = entries.py();
        let mut batch = Vec::with_capacity(entries.len().unwrap_or(0));
        for entry in entries.try_iter()? {
            let entry = entry?;
            let tuple = entry.cast::<PyTuple>().map_err(|_| {
                malformed("push_many entries must be (id, deadline[, item]) tuples")
            })?;
            let item = match tuple.len() {
                2 => None,
                3 => Some(tuple.get_item(2)?),
                n => {
                    return Err(malformed(format!(
                        "push_many entries must be (id, deadline[, item]) tuples, got {n} fields"
                    ))
                    .into());
                }
            };
            let id = tuple.get_item(0)?;
            let deadline = deadline_key("deadline", tuple.get_item(1)?.extract()?)?;
            batch.push((
                key_of(&id)?,
                deadline,
                Stored {
                    id: id.unbind(),
                    item: item_or_none(py, item),
                },
            ));
        }
        // Entries not queued after an error, and replaced ones, are dropped after the guard.
        let mut pending = batch.into_iter();
        let mut replaced = Vec::new();
        let result = {
            let mut state = self.lock();
            pending.try_for_each(|(key, deadline, stored)| {
                replaced.extend(state.insert(key, deadline, None, stored)?);
                Ok::<_, CoreError>(())
            })
        };
        drop((pending, replaced));
        Ok(result?)
    }

    /// Move the entry ``id`` to ``deadline`` (keeping its item); ``False`` if not queued.
    fn update(&self, id: &Bound<'_, PyAny>, deadline: f64) -> PyResult<bool> {
        let key = key_of(id)?;
        let deadline = deadline_key("deadline", deadline)?;
        Ok(self.lock().queue.update(&key, deadline))
    }

    /// Remove the entry ``id`` and return its item; ``KeyError`` if it is not queued.
    fn remove(&self, id: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        match self.take_one(id)? {
            Some(stored) => Ok(stored.item),
            None => Err(no_such_key(id.clone().unbind())),
        }
    }

    /// Remove the entry ``id`` if queued and return its item, else ``None``.
    fn discard(&self, id: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self.take_one(id)?.map(|stored| stored.item))
    }

    /// Remove every queued id of ``ids`` in one call; returns how many were removed.
    ///
    /// Example:
    ///     >>> q = DeadlineQueue()
    ///     >>> q.push_many([(1, 1.0), (2, 2.0)])
    ///     >>> q.discard_many([1, 2, 3])
    ///     2
    fn discard_many(&self, ids: &Bound<'_, PyAny>) -> PyResult<usize> {
        let keys = ids
            .try_iter()?
            .map(|id| key_of(&id?))
            .collect::<PyResult<Vec<_>>>()?;
        let removed: Vec<Stored> = {
            let mut state = self.lock();
            keys.iter().filter_map(|key| state.remove(key)).collect()
        };
        Ok(removed.len())
    }

    /// The next entry as ``(id, deadline, item)`` without removing it, or ``None``.
    fn peek(&self, py: Python<'_>) -> Option<(Py<PyAny>, f64, Py<PyAny>)> {
        let state = self.lock();
        let (_, deadline, &slot) = state.queue.peek()?;
        let stored = state.slots.get(slot as usize)?.as_ref()?;
        Some((
            stored.id.clone_ref(py),
            deadline_of_key(deadline),
            stored.item.clone_ref(py),
        ))
    }

    /// Remove and return up to ``max`` (default: all) ``(id, item)`` pairs whose deadline is
    /// ``<= now``, earliest first.
    ///
    /// Example:
    ///     >>> q = DeadlineQueue()
    ///     >>> q.push_many([("a", 1.0, 1), ("b", 2.0, 2), ("c", 9.0, 3)])
    ///     >>> q.pop_due(5.0, max=1)
    ///     [('a', 1)]
    #[pyo3(signature = (now, max = None))]
    fn pop_due(&self, now: f64, max: Option<usize>) -> PyResult<Vec<(Py<PyAny>, Py<PyAny>)>> {
        let now = deadline_key("now", now)?;
        let mut state = self.lock();
        let popped = state.queue.pop_due(now, max.unwrap_or(usize::MAX));
        // Ownership moves to the caller: nothing is dropped under the lock.
        Ok(popped
            .into_iter()
            .filter_map(|(_, slot)| state.release(slot))
            .map(|stored| (stored.id, stored.item))
            .collect())
    }

    /// The earliest deadline (when to look for due entries next), or ``None`` when empty.
    fn next_deadline(&self) -> Option<f64> {
        self.lock().queue.next_deadline().map(deadline_of_key)
    }

    /// Remove every entry.
    fn clear(&self) {
        let taken = std::mem::take(&mut *self.lock());
        drop(taken);
    }

    fn __len__(&self) -> usize {
        self.lock().queue.len()
    }

    fn __contains__(&self, id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_of(id)?;
        Ok(self.lock().queue.contains(&key))
    }

    fn __repr__(&self) -> String {
        let (len, next) = {
            let state = self.lock();
            (state.queue.len(), state.queue.next_deadline())
        };
        match next {
            Some(key) => format!(
                "DeadlineQueue(len={len}, next_deadline={:?})",
                deadline_of_key(key)
            ),
            None => format!("DeadlineQueue(len={len}, next_deadline=None)"),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // The GC may run while this thread holds the lock (an allocation inside a method); not
        // visiting then only makes the entries look externally owned, which is safe.
        let state = match self.state.try_lock() {
            Ok(state) => state,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(()),
        };
        for stored in state.slots.iter().flatten() {
            visit.call(&stored.id)?;
            visit.call(&stored.item)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        self.clear();
    }
}
