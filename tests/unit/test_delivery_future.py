"""DeliveryFuture is a ``concurrent.futures.Future`` in every way callers use one: its light
condition must keep the standard class's waiting, callbacks, cancellation and interop."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, as_completed, wait
from typing import Any

import pytest

from ferrokafka._delivery_future import DeliveryFuture, set_results


def settle_later(future: Future[int], value: int | BaseException, waiters: int = 1) -> None:
    """Settles ``future`` from another thread once ``waiters`` threads wait on its condition."""

    def settle() -> None:
        deadline = time.monotonic() + 5
        while len(future._condition._waiters or ()) < waiters:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "nobody waited"
            time.sleep(0.001)
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)

    threading.Thread(target=settle).start()


def test_it_starts_running_and_result_waits_for_another_thread() -> None:
    future: DeliveryFuture[int] = DeliveryFuture()
    assert isinstance(future, Future)
    assert future.running()
    assert not future.done()
    settle_later(future, 7)
    assert future.result(timeout=5) == 7
    assert future.done()


def test_result_times_out_then_still_gets_the_value() -> None:
    future: DeliveryFuture[int] = DeliveryFuture()
    with pytest.raises(TimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(TimeoutError):
        future.result(timeout=0)
    future.set_result(3)
    assert future.result(timeout=0) == 3


def test_many_waiters_are_all_woken_and_exceptions_are_raised() -> None:
    future: DeliveryFuture[int] = DeliveryFuture()
    seen: list[BaseException | None] = []
    waiters = [
        threading.Thread(target=lambda: seen.append(future.exception(timeout=5))) for _ in range(4)
    ]
    for waiter in waiters:
        waiter.start()
    settle_later(future, ValueError("refused"), waiters=4)
    for waiter in waiters:
        waiter.join(5)
    assert len(seen) == 4
    assert all(isinstance(error, ValueError) for error in seen)
    with pytest.raises(ValueError, match="refused"):
        future.result(timeout=0)


def test_done_callbacks_run_once_also_when_added_late() -> None:
    future: DeliveryFuture[int] = DeliveryFuture()
    calls: list[int] = []
    future.add_done_callback(lambda f: calls.append(f.result()))
    future.set_result(5)
    future.add_done_callback(lambda f: calls.append(f.result() * 10))
    assert calls == [5, 50]


def test_a_running_future_cannot_be_cancelled() -> None:
    future: DeliveryFuture[int] = DeliveryFuture()
    assert not future.cancel()
    assert not future.cancelled()
    future.set_result(1)
    assert not future.cancel()


def test_concurrent_futures_wait_and_as_completed_work_on_it() -> None:
    first: DeliveryFuture[int] = DeliveryFuture()
    second: DeliveryFuture[int] = DeliveryFuture()
    second.set_result(2)
    done, not_done = wait([first, second], timeout=5, return_when=FIRST_COMPLETED)
    assert (done, not_done) == ({second}, {first})
    threading.Timer(0.05, first.set_result, (1,)).start()
    assert sorted(f.result() for f in as_completed([first, second], timeout=5)) == [1, 2]


def test_asyncio_can_await_it_through_wrap_future() -> None:
    future: DeliveryFuture[int] = DeliveryFuture()

    async def main() -> int:
        threading.Timer(0.05, future.set_result, (42,)).start()
        return await asyncio.wait_for(asyncio.wrap_future(future), 5)

    assert asyncio.run(main()) == 42


def test_an_asyncio_cancel_does_not_cancel_the_delivery() -> None:
    future: DeliveryFuture[int] = DeliveryFuture()

    async def main() -> None:
        wrapped = asyncio.wrap_future(future)
        wrapped.cancel()
        with pytest.raises(asyncio.CancelledError):
            await wrapped

    asyncio.run(main())
    assert not future.cancelled()  # the record is still in flight; its result still comes
    future.set_result(1)
    assert future.result(timeout=0) == 1


def test_a_future_only_settled_and_read_is_one_object_for_the_garbage_collector() -> None:
    # Why the class exists: a million futures waiting for their messages must not be a million
    # conditions and lists for the cyclic collector to walk.
    # Counted through what each future refers to, not the whole process's objects, which the
    # threads earlier tests leave behind (Spark's gateway, logging) change at any moment. The
    # class the future refers to is the one container allowed; a condition, a list or an
    # instance dict would be walked by the collector.
    futures: list[DeliveryFuture[int]] = [DeliveryFuture() for _ in range(1000)]
    for n, future in enumerate(futures):
        future.set_result(n)
    assert [f.result(timeout=0) for f in futures] == list(range(1000))
    assert all(f.done() and f.exception(timeout=0) is None for f in futures)
    walked = {
        type(o).__name__
        for f in futures
        for o in gc.get_referents(f)
        if gc.is_tracked(o) and not isinstance(o, type)
    }
    assert walked == set()
    # The check sees what a plain Future makes.
    plain: Future[int] = Future()
    plain.set_result(1)
    assert {type(o).__name__ for o in gc.get_referents(plain) if gc.is_tracked(o)} >= {"list"}


def test_a_future_that_holds_no_container_is_not_walked_by_the_garbage_collector() -> None:
    # Walking a million waiting futures at every collection was close to half of
    # produce_future's time at 1M: one that can close no reference cycle is not tracked.
    waiting: DeliveryFuture[int] = DeliveryFuture()
    settled: DeliveryFuture[int] = DeliveryFuture()
    settled.set_result(7)
    assert settled.result(timeout=0) == 7
    assert not gc.is_tracked(waiting)
    assert not gc.is_tracked(settled)


def _collected(make_cycle: Callable[[DeliveryFuture[Any]], None]) -> bool:
    """Whether a future in the cycle ``make_cycle`` closes through it is collected once
    nothing else refers to it."""
    future: DeliveryFuture[Any] = DeliveryFuture()
    make_cycle(future)
    gone = weakref.ref(future)
    del future
    gc.collect()
    return gone() is None


def _through_a_callback(future: DeliveryFuture[Any]) -> None:
    future.add_done_callback(lambda _: future)


def _through_its_exception(future: DeliveryFuture[Any]) -> None:
    failure = RuntimeError("delivery failed")
    failure.future = future  # type: ignore[attr-defined]
    future.set_exception(failure)


def _through_a_waiter(future: DeliveryFuture[Any]) -> None:
    with pytest.raises(TimeoutError):
        future.result(timeout=0.001)  # a wait makes its condition: tracked from then on
    future.kept = [future]  # type: ignore[attr-defined]


def _through_its_result(future: DeliveryFuture[Any]) -> None:
    future.set_result([future])


CYCLES = [_through_a_callback, _through_its_exception, _through_a_waiter, _through_its_result]


@pytest.mark.parametrize("make_cycle", CYCLES)
def test_a_future_that_can_close_a_cycle_is_tracked_and_the_cycle_collected(
    make_cycle: Callable[[DeliveryFuture[Any]], None],
) -> None:
    assert _collected(make_cycle)


def test_callbacks_and_waiters_racing_the_settlement_each_see_it_once() -> None:
    # Settling sets the state without the condition unless someone looked: a callback added or
    # a wait begun while another thread settles must still run or wake exactly once.
    futures: list[DeliveryFuture[int]] = [DeliveryFuture() for _ in range(5000)]
    calls = [0] * len(futures)

    def settle_all() -> None:
        for n, future in enumerate(futures):
            future.set_result(n)

    def count(n: int) -> Callable[[Future[int]], None]:
        def called(future: Future[int]) -> None:
            assert future.result(timeout=0) == n
            calls[n] += 1

        return called

    settler = threading.Thread(target=settle_all)
    settler.start()
    for n, future in enumerate(futures):
        future.add_done_callback(count(n))
    done = sorted(f.result(timeout=0) for f in as_completed(futures, timeout=5))
    assert done == list(range(len(futures)))
    settler.join(5)
    assert calls == [1] * len(futures)


def test_set_results_settles_in_order_and_a_refusing_future_does_not_stop_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The binding settles a drained chunk of delivered records' futures in one call.
    refusing: Future[int] = Future()
    refusing.set_result(0)  # a second set_result raises InvalidStateError
    settled: list[int] = []
    futures: list[Future[int]] = [DeliveryFuture(), refusing, DeliveryFuture()]
    futures[0].add_done_callback(lambda f: settled.append(f.result()))
    futures[2].add_done_callback(lambda f: settled.append(f.result()))
    set_results(futures, [1, 2, 3])
    assert settled == [1, 3]
    assert [f.result(timeout=0) for f in futures] == [1, 0, 3]
    assert "could not settle the future of 2" in caplog.text
