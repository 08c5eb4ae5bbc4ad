"""ferrokafka.DeadlineQueue against a dict-and-sort model, plus its errors, batch calls, locking
discipline and garbage-collector support."""

from __future__ import annotations

import gc
import math
import random
import threading
import weakref
from typing import Any

import pytest

from ferrokafka import DeadlineQueue

Id = int | str


class Model:
    """The specification: a dict of id -> (deadline, sequence, item); FIFO among equal deadlines."""

    def __init__(self) -> None:
        self.entries: dict[Id, tuple[float, int, Any]] = {}
        self.sequence = 0

    def push(self, id: Id, deadline: float, item: Any) -> None:
        self.sequence += 1
        self.entries[id] = (deadline, self.sequence, item)

    def order(self) -> list[Id]:
        return sorted(self.entries, key=lambda id: self.entries[id][:2])

    def pop_due(self, now: float, limit: int | None) -> list[tuple[Id, Any]]:
        due = [id for id in self.order() if self.entries[id][0] <= now][:limit]
        return [(id, self.entries.pop(id)[2]) for id in due]


IDS: list[Id] = [*range(-3, 40), *(f"id-{n}" for n in range(40))]
DEADLINES = [-math.inf, -2.5, 0.0, 1.0, 1.0, 2.0, 3.5, 10.0, 10.0, 1e9, math.inf]


@pytest.mark.parametrize("seed", range(12))
def test_matches_the_model_on_random_operations(seed: int) -> None:
    rng = random.Random(seed)
    queue, model = DeadlineQueue(), Model()
    for step in range(1500):
        op = rng.randrange(10)
        id = rng.choice(IDS)
        deadline = rng.choice(DEADLINES)
        if op <= 2:
            item = (step, id)
            queue.push(id, deadline, item)
            model.push(id, deadline, item)
        elif op == 3:
            batch = [
                (rng.choice(IDS), rng.choice(DEADLINES), step) for _ in range(rng.randrange(6))
            ]
            queue.push_many(batch)
            for entry in batch:
                model.push(*entry)
        elif op == 4:
            old = model.entries.get(id)
            assert queue.update(id, deadline) == (old is not None)
            if old is not None:
                model.entries[id] = (deadline, old[1], old[2])
        elif op == 5:
            if id in model.entries:
                assert queue.remove(id) == model.entries.pop(id)[2]
            else:
                with pytest.raises(KeyError):
                    queue.remove(id)
        elif op == 6:
            expected = model.entries.pop(id, (0.0, 0, None))[2]
            assert queue.discard(id) == expected
        elif op == 7:
            ids = rng.sample(IDS, 4)
            removed = sum(model.entries.pop(i, None) is not None for i in ids)
            assert queue.discard_many(ids) == removed
        else:
            now = rng.choice(DEADLINES)
            limit = rng.choice([None, 0, 1, 3])
            assert queue.pop_due(now, max=limit) == model.pop_due(now, limit)
        assert len(queue) == len(model.entries)
        order = model.order()
        head = order[0] if order else None
        peeked = queue.peek()
        assert (peeked[0] if peeked else None) == head
        assert queue.next_deadline() == (model.entries[head][0] if head is not None else None)
        assert (id in queue) == (id in model.entries)
    assert queue.pop_due(math.inf) == model.pop_due(math.inf, None)


def test_tiebreak_orders_equal_deadlines_and_update_keeps_it() -> None:
    queue = DeadlineQueue()
    queue.push("late", 5.0, tiebreak=9)
    queue.push("early", 5.0, tiebreak=1)
    queue.push("moved", 7.0, tiebreak=0)
    assert queue.update("moved", 5)
    assert [id for id, _ in queue.pop_due(5)] == ["moved", "early", "late"]


def test_zero_signs_and_int_deadlines_compare_like_floats() -> None:
    queue = DeadlineQueue()
    queue.push(1, -0.0)
    queue.push(2, 3)
    assert queue.pop_due(0.0) == [(1, None)]
    assert queue.next_deadline() == 3.0
    assert queue.pop_due(-1e-300) == []


def test_ids_and_items_come_back_as_the_same_objects() -> None:
    queue = DeadlineQueue()
    id, item = "".join(["order", "-1"]), object()
    queue.push(id, 1.0, item)
    assert queue.peek() == (id, 1.0, item)
    ((got_id, got_item),) = queue.pop_due(1.0)
    assert got_id is id
    assert got_item is item


def test_ints_and_strs_are_distinct_ids() -> None:
    queue = DeadlineQueue()
    queue.push(1, 1.0, "int")
    queue.push("1", 2.0, "str")
    assert len(queue) == 2
    assert queue.remove("1") == "str"


def test_bad_arguments_raise_builtin_errors() -> None:
    queue = DeadlineQueue()
    for bad_id in (1.5, None, b"x", ("a", 1)):
        with pytest.raises(TypeError, match="int or str"):
            queue.push(bad_id, 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int or str"):
        _ = 1.5 in queue
    with pytest.raises(OverflowError):
        queue.push(2**64, 1.0)
    with pytest.raises(OverflowError):
        queue.push(1, 1.0, tiebreak=-1)
    nan = float("nan")
    with pytest.raises(ValueError, match="deadline must not be NaN"):
        queue.push(1, nan)
    with pytest.raises(ValueError, match="deadline must not be NaN"):
        queue.update(1, nan)
    with pytest.raises(ValueError, match="now must not be NaN"):
        queue.pop_due(nan)
    with pytest.raises(KeyError, match="missing"):
        queue.remove("missing")
    assert queue.discard("missing") is None
    assert len(queue) == 0


def test_a_bad_batch_entry_queues_nothing() -> None:
    queue = DeadlineQueue()
    with pytest.raises(TypeError, match="tuples"):
        queue.push_many([(1, 1.0), [2, 2.0]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="4 fields"):
        queue.push_many([(1, 1.0, None, 0)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="NaN"):
        queue.push_many([(1, 1.0), (2, float("nan"))])
    assert len(queue) == 0


def test_batch_calls_accept_generators() -> None:
    queue = DeadlineQueue()
    queue.push_many((n, float(n % 10), n * 2) for n in range(1000))
    assert len(queue) == 1000
    assert queue.discard_many(n for n in range(0, 1000, 2)) == 500
    first = queue.pop_due(0.5, max=10)
    assert first == []
    due = queue.pop_due(1.0, max=10)
    assert due == [(n, n * 2) for n in range(1, 200, 10)][:10]


def test_repr_and_clear() -> None:
    queue = DeadlineQueue()
    assert repr(queue) == "DeadlineQueue(len=0, next_deadline=None)"
    queue.push_many([(1, 2.5), (2, 4.0)])
    assert repr(queue) == "DeadlineQueue(len=2, next_deadline=2.5)"
    queue.clear()
    assert len(queue) == 0
    assert queue.peek() is None


class Node:
    """An item that can point back at its queue."""

    queue: DeadlineQueue | None = None


def test_gc_collects_a_cycle_through_an_item() -> None:
    queue = DeadlineQueue()
    node = Node()
    node.queue = queue
    queue.push("cycle", 1.0, node)
    alive = weakref.ref(node)
    del node, queue
    gc.collect()
    assert alive() is None


class Reentrant:
    """An item whose finaliser calls back into the queue that held it."""

    def __init__(self, queue: DeadlineQueue) -> None:
        self.queue = queue

    def __del__(self) -> None:
        self.queue.push("from __del__", 0.0)


def test_items_are_released_outside_the_lock() -> None:
    queue = DeadlineQueue()
    queue.push(1, 1.0, Reentrant(queue))
    queue.push(1, 2.0)  # replaces (and drops) the item
    queue.push_many([(2, 1.0, Reentrant(queue))])
    queue.discard_many([2])
    queue.push(3, 1.0, Reentrant(queue))
    queue.clear()
    assert "from __del__" in queue
    queue.push(4, 1.0, Reentrant(queue))
    del queue
    gc.collect()


def test_concurrent_pushes_and_pops_lose_nothing() -> None:
    queue = DeadlineQueue()
    popped: list[list[tuple[Id, Any]]] = []

    def produce(worker: int) -> None:
        for n in range(2000):
            queue.push(f"{worker}-{n}", float(n))

    def consume() -> None:
        popped.append(queue.pop_due(1e9, max=500))

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
    threads += [threading.Thread(target=consume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = sum(len(batch) for batch in popped) + len(queue)
    assert total == 8000
