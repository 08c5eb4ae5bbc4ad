"""``AsyncConsumer``: :class:`~ferrokafka.Consumer`'s engine and guarantees on asyncio, each
partition's worker a task on the running loop (see :mod:`ferrokafka.consumer`).

A module of its own, loaded when first named (``ferrokafka.AsyncConsumer``,
``ferrokafka.consumer.AsyncConsumer``): asyncio, which it needs, took about half of every
``import ferrokafka`` (~50 ms with ssl and the rest it loads), the CLI's and each Spark
worker's included.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ferrokafka import _exit
from ferrokafka._config import ConfigValue
from ferrokafka._failure_log import log_failure
from ferrokafka._native import (
    Batch,
    _RawConsumer,
)

if TYPE_CHECKING:
    from ferrokafka._native import _ConsumerEvent

from ferrokafka._consumer_core import (
    _EXIT_CLOSE_SECONDS,
    _STARTED_AFTER_STOP,
    ConsumerOptions,
    InstrumentationCallback,
    Subscription,
    _Core,
    _Generations,
    _options,
    waiting_for_abandoned,
)
from ferrokafka.consumer import _is_coroutine_function

__all__ = ["AsyncConsumer"]

# The consumers share their logger: one name to configure for both.
log = logging.getLogger("ferrokafka.consumer")


def _being_cancelled() -> bool:
    """Whether the running task is being cancelled (``task.cancel()``: a stop past its drain
    time, the loop ending), as opposed to code it awaited raising ``CancelledError`` of its own.
    Python 3.10 cannot tell them apart: there, every ``CancelledError`` is the task's."""
    cancelling = getattr(asyncio.current_task(), "cancelling", None)
    return cancelling is None or cancelling() > 0


def _watch(
    loop: asyncio.AbstractEventLoop, fd: int, callback: Callable[..., object], *args: object
) -> None:
    """Runs ``callback(*args)`` on ``loop`` whenever ``fd`` is readable; says which loops can."""
    try:
        loop.add_reader(fd, callback, *args)
    except NotImplementedError:
        raise RuntimeError(
            f"AsyncConsumer needs an event loop that watches file descriptors "
            f"(loop.add_reader); {type(loop).__name__} does not: use a selector loop"
        ) from None


class AsyncConsumer:
    """Runs the coroutine function ``handler`` on batches from each assigned partition: in order
    within a partition, partitions concurrently, each in its own asyncio task on the running loop.

    Arguments and semantics are those of :class:`Consumer`; notification callbacks may be plain
    or coroutine functions. A partition that ran dry waits on the event loop itself: the engine
    signals a file descriptor the loop watches (``add_reader``) when records came, so no thread
    hands batches over; opening, stopping, retry backoffs and notifications wait on a thread
    pool with the GIL released. Handlers, callbacks and telemetry run on the event loop. On
    :meth:`stop`, a handler that outlasts ``drain`` is cancelled (its records are not committed
    and will be redelivered).

    Example:
        >>> import asyncio, ferrokafka
        >>> client = ferrokafka.Client({"bootstrap.servers": "127.0.0.1:9092"})
        >>> client.produce("orders", b"paid").offset()
        0
        >>> async def main() -> None:
        ...     handled = asyncio.Event()
        ...     async def handle(batch: ferrokafka.Batch) -> None:
        ...         print(batch.values())
        ...         handled.set()
        ...     config = {"bootstrap.servers": "127.0.0.1:9092", "group.id": "billing"}
        ...     async with ferrokafka.AsyncConsumer(config, ["orders"], handle):
        ...         await asyncio.wait_for(handled.wait(), timeout=30.0)  # your service runs here
        >>> asyncio.run(main())
        [b'paid']
    """

    def __init__(
        self,
        config: Mapping[str, ConfigValue],
        subscriptions: Sequence[Subscription],
        handler: Callable[[Batch], Awaitable[object]],
        options: ConsumerOptions | None = None,
        **settings: Any,
    ) -> None:
        if not _is_coroutine_function(handler):
            raise TypeError(
                f"handler must be a coroutine function (async def), got {handler!r}; "
                "use ferrokafka.Consumer for a plain function"
            )
        self._handler = handler
        self._core = core = _Core(config, subscriptions, _options(options, settings))
        core.handler_name = getattr(handler, "__qualname__", type(handler).__qualname__)
        self._executor: ThreadPoolExecutor | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._workers: set[asyncio.Task[None]] = set()
        self._generations = _Generations[asyncio.Task[None]](lambda task: not task.done())
        # The tasks whose partitions ran dry, by worker (several share one with
        # ordering="key"), woken by _engine_signalled when the engine signals its ready_fd.
        self._waiting: dict[int, list[asyncio.Future[Batch | None]]] = {}
        # Engine events taken by _engine_signalled, for the dispatcher task to run in order.
        self._events: list[_ConsumerEvent] = []
        self._events_arrived: asyncio.Event | None = None
        self._ready_fd: int | None = None
        self._stopping: asyncio.Event | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self._stopped = False
        self._engine_stopped = False

    async def start(self) -> None:
        """Connect, subscribe or assign, and start consuming on the running loop. Starting twice
        is a no-op; starting after :meth:`stop` raises :class:`RuntimeError`. A start that
        fails or is cancelled once connecting stops the engine it opened; the event
        loop must be able to watch a file descriptor (``loop.add_reader``: any selector loop,
        uvloop; not Windows' proactor loop)."""
        if self._stopped:
            raise RuntimeError(_STARTED_AFTER_STOP.format(type(self).__name__))
        if self._core.raw is not None:
            return
        loop = asyncio.get_running_loop()
        # One thread per backoff keeps retrying partitions from queueing behind each other.
        self._executor = executor = ThreadPoolExecutor(64, thread_name_prefix="ferrokafka-consumer")
        self._stopping, self._events_arrived = asyncio.Event(), asyncio.Event()
        opening = executor.submit(self._core.open)
        try:
            raw = await asyncio.wrap_future(opening)
            self._ready_fd = raw.ready_fd()
            _watch(loop, self._ready_fd, self._engine_signalled, raw)
        except BaseException:
            self._ready_fd = None
            if opening.done() and (opening.cancelled() or opening.exception() is not None):
                self._executor = None  # no engine opened: start() may be tried again
            else:
                # Nothing was handled yet: the engine opened (or still opening, when start()
                # was cancelled) leaves its group as soon as it is open.
                self._stopped = self._engine_stopped = True
                executor.submit(self._close_unstarted, opening)
            executor.shutdown(wait=False)
            raise
        self._dispatcher = asyncio.create_task(self._dispatch_forever())
        _exit.register(self)

    def _close_unstarted(self, opening: Future[_RawConsumer]) -> None:
        """On a pool thread: once ``opening`` ended, stops the engine it opened, if any."""
        try:
            raw = opening.result()
        except BaseException:
            return  # it never opened; start() raised its error
        self._stop_engine(raw, 0.0)

    def _stop_engine(self, raw: _RawConsumer, drain: float) -> None:
        """Stops the engine from this thread, its loop not involved: running handlers get
        ``drain`` seconds, the reporter hears of the stop as from :meth:`stop`."""
        self._core.stopping()
        raw.stop(drain)
        self._core.stopped()

    async def stop(self) -> None:
        """Stop consuming, draining running handlers for up to ``drain`` seconds (then cancelling
        them), committing finished batches and leaving the group. A no-op when not running.

        Awaited in the consumer's own handler or notification callback (a poison message), it
        begins the stop and returns at once, as :meth:`Consumer.stop` does there: waiting would
        wait for that very handler. Its batch, once it returns, is committed with the others;
        a later ``stop()`` (the ``async with`` exit) waits for the end."""
        if self._stop_task is None:
            raw, executor = self._core.raw, self._executor
            if raw is None or executor is None or self._stopped or self._stopping is None:
                return
            self._stopped = True
            self._stopping.set()
            self._stop_task = asyncio.create_task(self._stop(raw, executor))
        own = asyncio.current_task()
        if own is self._dispatcher or own in self._workers:
            return
        # A caller cancelled meanwhile does not cut the stop short (a half-stopped consumer).
        await asyncio.shield(self._stop_task)

    async def _stop(self, raw: _RawConsumer, executor: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(executor, self._core.stopping)
        # The loop stays free meanwhile, so running handlers can finish and acknowledge.
        await loop.run_in_executor(executor, raw.stop, self._core.options.drain)
        self._engine_stopped = True
        if self._events_arrived is not None:
            self._events_arrived.set()  # the dispatcher takes the last events and returns
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self._ready_fd is not None:
            # Every partition is gone and its task done: nobody waits for records any more.
            loop.remove_reader(self._ready_fd)
            self._ready_fd = None
            raw.release_ready_fd()
        self._waiting.clear()
        if self._dispatcher is not None:
            await self._dispatcher
        await loop.run_in_executor(executor, self._core.stopped)
        executor.shutdown(wait=False)
        _exit.unregister(self)

    # -- the end of a consumer nobody stopped ----------------------------------------------

    @property
    def exit_timeout(self) -> float:
        """What a stop at interpreter exit takes at most: the drain time, then the close."""
        return self._core.options.drain + _EXIT_CLOSE_SECONDS

    def begin_exit(self) -> None:
        """Part of the interpreter-exit protocol (``ferrokafka._exit``); its loop has ended (or
        runs on a thread of its own), so there is nothing to ask of it without waiting."""

    def finish_exit(self, timeout: float) -> None:
        """Part of the interpreter-exit protocol, for a consumer whose loop ended without
        :meth:`stop` (``asyncio.run`` returned): stops the engine from here, so the batches
        whose handlers finished are committed and the group is left at once, not redelivered
        after ``session.timeout.ms``. A handler cancelled with its loop left its batch
        uncommitted: it is redelivered."""
        raw = self._core.raw
        if raw is None or self._engine_stopped:
            return
        self._stopped = self._engine_stopped = True
        self._stop_engine(raw, min(self._core.options.drain, timeout))

    async def run(self) -> None:
        """Start, then consume until cancelled or :meth:`stop`, and stop. A handler that raises
        ``SystemExit``, ``KeyboardInterrupt`` or a ``CancelledError`` of its own stops the
        consumer (logged at ERROR, its batch not committed) and ``run`` returns."""
        await self.start()
        try:
            assert self._stopping is not None
            await self._stopping.wait()
        finally:
            await self.stop()

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def subscribe(self, callback: InstrumentationCallback) -> None:
        """Call ``callback(event, payload)`` for each telemetry event, on the event loop; the
        events are those of :meth:`Consumer.subscribe`."""
        self._core.subscribe(callback)

    def stats(self) -> dict[str, Any]:
        """The counters of :meth:`Consumer.stats`."""
        return self._core.stats()

    async def _dispatch_forever(self) -> None:
        raw, arrived = self._core.require_raw(), self._events_arrived
        assert arrived is not None
        while True:
            stopped = self._engine_stopped
            # Those _engine_signalled took first, then any it has not: events queued before
            # the loop watched ready_fd, and the last ones once the engine stopped.
            events, self._events = self._events + raw.poll_events(0.0), []
            if not events:
                if stopped:
                    return
                arrived.clear()
                await arrived.wait()
                continue
            for callback, args in self._core.notifications(events, self._start_worker):
                try:
                    result = callback(*args)
                    if inspect.isawaitable(result):
                        await result
                except BaseException as error:  # SystemExit too: this task starts every worker
                    if isinstance(error, asyncio.CancelledError) and _being_cancelled():
                        raise  # this task's own cancellation (the loop ends), not the callback's
                    log_failure(log, f"consumer notification callback {callback!r} failed")

    def _start_worker(self, worker: int, topic: str, partition: int) -> None:
        earlier = self._generations.earlier(worker, topic, partition)
        task = asyncio.create_task(self._work(worker, topic, partition, earlier))
        self._generations.add(topic, partition, task)
        self._workers.add(task)
        task.add_done_callback(self._workers.discard)

    async def _work(
        self, worker: int, topic: str, partition: int, earlier: list[asyncio.Task[None]]
    ) -> None:
        if running := [task for task in earlier if not task.done()]:
            waiting_for_abandoned(topic, partition)
            await asyncio.wait(running)
        raw, loop = self._core.require_raw(), asyncio.get_running_loop()
        # The other partitions get a turn once this one has held the loop for a switch
        # interval, as the thread-based consumer's workers get the GIL: a handler that never
        # suspends would otherwise keep the loop until its partition runs dry, while the others'
        # records pile up in librdkafka, which then stops fetching them for
        # fetch.queue.backoff.ms (1 s). A turn per batch would cost a loop iteration per batch.
        turn = sys.getswitchinterval()
        turn_ends = loop.time() + turn
        while True:
            # Records already queued are taken without a thread hop.
            batch = raw.fetch(worker, 0.0)
            if batch is not None and not batch:
                batch = await self._records_for(raw, worker)
                turn_ends = loop.time() + turn
            if batch is None:
                return
            if not await self._handle(raw, worker, topic, partition, batch):
                return
            if loop.time() >= turn_ends:
                await asyncio.sleep(0)
                turn_ends = loop.time() + turn

    async def _records_for(self, raw: _RawConsumer, worker: int) -> Batch | None:
        """The next batch of ``worker``'s partition, which had none queued (None once the
        partition is gone), handed over by :meth:`_engine_signalled` on the loop."""
        woken: asyncio.Future[Batch | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(worker, []).append(woken)
        raw.wait_for_records(worker)
        return await woken

    def _engine_signalled(self, raw: _RawConsumer) -> None:
        """The engine signalled ``ready_fd``: hand the events it queued to the dispatcher task,
        and wake the tasks of every dry partition that has a batch now or is gone (the engine
        only looks, it never waits). No thread waits for either."""
        try:
            found = raw.fetch_ready()  # reads ready_fd first: what comes later signals again
        except Exception as error:
            # The engine refuses (a forked child's inherited consumer): its fd is never read
            # again, so watching it would call this back forever; every fetch raises the same.
            if self._ready_fd is not None:
                asyncio.get_running_loop().remove_reader(self._ready_fd)
                self._ready_fd = None
            # The waiting partitions' tasks fail as a fetch of their own would have.
            for pending in itertools.chain.from_iterable(self._waiting.values()):
                if not pending.done():
                    pending.set_exception(error)
            self._waiting.clear()
            return
        if events := raw.poll_events(0.0):
            self._events.extend(events)
            assert self._events_arrived is not None
            self._events_arrived.set()
        for worker, batch in found:
            tasks = self._waiting.pop(worker) if worker in self._waiting else []
            waiting = [woken for woken in tasks if not woken.done()]
            if batch is None:
                for woken in waiting:
                    woken.set_result(None)
            elif not waiting:
                # Its task was cancelled meanwhile: nothing of this batch is committed.
                raw.ack(worker, batch, "abandoned")
            else:
                waiting[0].set_result(batch)
                if waiting[1:]:
                    # The worker's other tasks (ordering="key") wait for its next batch.
                    self._waiting[worker] = waiting[1:]
                    raw.wait_for_records(worker)

    async def _handle(
        self, raw: _RawConsumer, worker: int, topic: str, partition: int, batch: Batch
    ) -> bool:
        """Runs the handler on ``batch`` until it is settled; False when the handler asked the
        process to end (``sys.exit``, ``KeyboardInterrupt``, or a ``CancelledError`` of its own,
        not this task's cancellation): the consumer then stops, as :meth:`Consumer._handle`."""
        core, attempt, loop = self._core, 0, asyncio.get_running_loop()
        try:
            while True:
                started = core.handler_started(topic, partition, batch)
                failure: Exception | None = None
                try:
                    await self._handler(batch)
                except Exception as error:
                    failure = error
                except BaseException as exiting:
                    if isinstance(exiting, asyncio.CancelledError) and _being_cancelled():
                        raise  # stop() cancelled it after the drain time (below)
                    # Not a failure of the batch for the error policy: a request to end. Left to
                    # asyncio, it ended the task unsaid (a CancelledError: the partition was
                    # never handled again) or escaped the loop after the stop had waited out
                    # the drain for this very handler.
                    core.handler_exited(raw, worker, batch, exiting)
                    await self.stop()  # in its own handler: begins the stop, returns at once
                    return False
                retry_in = core.handler_ended(raw, worker, batch, started, failure, attempt)
                if retry_in is None:
                    return True
                # A revocation (or a stop) cuts the backoff short: see Consumer._handle.
                if await loop.run_in_executor(self._executor, raw.backoff, worker, retry_in):
                    raw.ack(worker, batch, "abandoned")
                    return True
                attempt += 1
        except asyncio.CancelledError:
            # Cancelled by stop() after the drain time: nothing of this batch is committed.
            raw.ack(worker, batch, "abandoned")
            raise
