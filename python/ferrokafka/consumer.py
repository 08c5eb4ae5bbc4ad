"""``Consumer`` and ``AsyncConsumer``: ordered per partition, concurrent across partitions.

The semantics are Elixir ``KafkaClient.Consumer``'s. A Rust poller thread reads Kafka through
librdkafka and routes records into one queue per assigned partition. One worker per partition (a
Python thread for :class:`Consumer`, an asyncio task for :class:`AsyncConsumer`) takes batches
from its queue and calls your handler with them, so records of a partition are handled in
order, one batch at a time, while partitions run concurrently (with ``ordering="key"``, several
workers per partition, each key in order). Workers wait for records with the GIL released (an
:class:`AsyncConsumer`'s tasks on the event loop itself, woken through a file descriptor the
engine signals when a dry partition has records), and
handlers never run on a librdkafka thread. Handlers get a :class:`~ferrokafka.Batch` over the
engine's memory; a handler exception goes to the engine's error policy (retry, commit or
dead-letter, see :class:`ConsumerOptions`).

Guarantees: at least once. A batch's offsets are committed only after the handler finished it
(every ``commit_interval`` seconds, when a partition is revoked, and on :meth:`Consumer.stop`),
never for a partition whose assignment was lost. Records handled but not yet committed when a
process dies are handled again by the next owner of their partition.

Example:
    >>> import threading
    >>> import ferrokafka
    >>> client = ferrokafka.Client({"bootstrap.servers": "127.0.0.1:9092"})
    >>> client.produce("orders", b"paid", partition=1).offset()
    0
    >>> handled = threading.Event()
    >>> def handle(batch: ferrokafka.Batch) -> None:
    ...     for message in batch:
    ...         print(message.partition(), message.offset(), message.value())
    ...     handled.set()
    >>> config = {"bootstrap.servers": "127.0.0.1:9092", "group.id": "billing"}
    >>> with ferrokafka.Consumer(config, ["orders"], handle):
    ...     handled.wait(timeout=30.0)  # your service runs here
    1 0 b'paid'
    True
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ferrokafka import _exit
from ferrokafka._config import ConfigValue
from ferrokafka._failure_log import log_failure
from ferrokafka._native import (
    DEAD_LETTER_HEADERS,
    Batch,
    _RawConsumer,
)

if TYPE_CHECKING:
    from ferrokafka._native import _ConsumerEvent

from ferrokafka._consumer_core import (
    _EVENT_SECONDS,
    _EXIT_CLOSE_SECONDS,
    _FETCH_SECONDS,
    _STARTED_AFTER_STOP,
    _WORKER_JOIN_SECONDS,
    ConsumerOptions,
    ErrorPolicy,
    InstrumentationCallback,
    Ordering,
    Subscription,
    TopicPartition,
    _Core,
    _Generations,
    _options,
    _sigint_sets,
    waiting_for_abandoned,
)

__all__ = [
    "DEAD_LETTER_HEADERS",
    "AsyncConsumer",
    "Consumer",
    "ConsumerOptions",
    "ErrorPolicy",
    "InstrumentationCallback",
    "Ordering",
    "Subscription",
    "TopicPartition",
]

log = logging.getLogger("ferrokafka.consumer")


class Consumer:
    """Runs ``handler`` on batches from each assigned partition: in order within a partition,
    partitions concurrently, each on its own Python thread.

    Args:
        config: librdkafka configuration, as confluent-kafka takes it. With ``group.id``, topic
            names are subscribed and the group assigns their partitions; without it, a topic
            name assigns this consumer every partition of the topic. ``auto.offset.reset``
            defaults to ``earliest`` (a new group reads the backlog), ``fetch.queue.backoff.ms``
            to 10 (librdkafka's 1,000 left a partition unfetched for a second once its prefetch
            was full, long after a fast handler had emptied it). Do not set
            ``enable.auto.commit``: offsets are committed by the consumer. Unknown keys raise
            :class:`~ferrokafka.ConfigError` naming the key.
        subscriptions: topic names, or explicit partitions as :class:`TopicPartition` or
            ``(topic, partition[, offset])`` tuples; a group consumer takes one kind, not both.
        handler: called with each batch: a :class:`~ferrokafka.Batch` of one partition, offsets
            increasing; a sequence of :class:`~ferrokafka.Message` (made only when accessed)
            with columnar ``values()``, ``keys()``, ``offsets()``, ``timestamps()`` and
            ``to_arrow()``.
        options: a :class:`ConsumerOptions`; its fields may also be given as keyword arguments
            (``max_batch_size=500``), which override ``options``.

    Handlers of different partitions run at the same time: I/O-bound handlers (network calls,
    ``time.sleep``) overlap because they release the GIL. Notification callbacks and telemetry
    events other than ``handler.*`` run on the consumer's event thread.

    Example:
        >>> import ferrokafka
        >>> seen: list[int] = []
        >>> consumer = ferrokafka.Consumer(
        ...     {"bootstrap.servers": "127.0.0.1:9092", "group.id": "billing"},
        ...     ["orders"],
        ...     lambda batch: seen.extend(m.offset() for m in batch),
        ...     commit_interval=1.0,
        ... )
        >>> consumer.start()
        >>> consumer.stop()
    """

    def __init__(
        self,
        config: Mapping[str, ConfigValue],
        subscriptions: Sequence[Subscription],
        handler: Callable[[Batch], object],
        options: ConsumerOptions | None = None,
        **settings: Any,
    ) -> None:
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {handler!r}")
        if _is_coroutine_function(handler):
            raise TypeError("handler is a coroutine function: use ferrokafka.AsyncConsumer")
        self._handler = handler
        self._core = core = _Core(config, subscriptions, _options(options, settings))
        core.handler_name = getattr(handler, "__qualname__", type(handler).__qualname__)
        self._workers: list[threading.Thread] = []
        self._generations = _Generations[threading.Thread](threading.Thread.is_alive)
        self._dispatcher: threading.Thread | None = None
        self._stopping = threading.Event()
        self._engine_stopped = threading.Event()
        self._lifecycle = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Connect, subscribe or assign, and start consuming; returns at once. Raises
        :class:`~ferrokafka.ConfigError` for a bad config and :class:`~ferrokafka.KafkaError`
        when explicit partitions cannot be looked up. Starting twice is a no-op; starting
        after :meth:`stop` raises :class:`RuntimeError`."""
        with self._lifecycle:
            if self._engine_stopped.is_set():
                raise RuntimeError(_STARTED_AFTER_STOP.format(type(self).__name__))
            if self._core.raw is not None:
                return
            self._core.open()
            self._dispatcher = threading.Thread(
                target=self._dispatch_forever, name="ferrokafka-consumer-events", daemon=True
            )
            self._dispatcher.start()
            _exit.register(self)

    def stop(self) -> None:
        """Stop consuming: queued records are dropped, running handlers get ``drain`` seconds,
        finished batches are committed, and the consumer leaves its group. A handler still
        running after ``drain`` is abandoned (its thread finishes on its own; its records are
        not committed and will be redelivered). The final commit and leaving the group take at
        most 5 s after that: a broker that accepts connections and never answers does not hold
        the stop longer (a commit it did not confirm is logged, and those records come again);
        librdkafka finishes leaving in the background. Calling it again is a no-op; called
        from a handler or a callback, it returns at once and stops from another thread."""
        own = threading.current_thread()
        if own is self._dispatcher or own in self._workers:
            # Waiting here would wait for this very thread: stop from another one instead.
            self._stopping.set()
            threading.Thread(target=self.stop, name="ferrokafka-consumer-stop").start()
            return
        with self._lifecycle:
            raw = self._core.raw
            if raw is None or self._engine_stopped.is_set():
                return
            self._stopping.set()
            self._core.stopping()
            raw.stop(self._core.options.drain)
            self._engine_stopped.set()
            if self._dispatcher is not None:
                self._dispatcher.join()
            deadline = time.monotonic() + _WORKER_JOIN_SECONDS
            for worker in self._workers:
                worker.join(max(0.0, deadline - time.monotonic()))
            self._core.stopped()
            _exit.unregister(self)

    # -- the end of a consumer nobody stopped ----------------------------------------------

    @property
    def exit_timeout(self) -> float:
        """What a stop takes at most: the drain time, then workers joining and the close."""
        return self._core.options.drain + _WORKER_JOIN_SECONDS + _EXIT_CLOSE_SECONDS

    def begin_exit(self) -> None:
        """Part of the interpreter-exit protocol (``ferrokafka._exit``): handlers stop taking
        batches."""
        self._stopping.set()

    def finish_exit(self, timeout: float) -> None:
        """Part of the interpreter-exit protocol: stop as :meth:`stop` does (finished batches
        committed, the group left), so a script that ends is not redelivered what it handled."""
        self.stop()

    def run(self) -> None:
        """Start, then block until :meth:`stop` is called (from another thread or a callback)
        or Ctrl-C, and stop. Ctrl-C (SIGINT, when Python's default handler is in place and
        ``run`` is called from the main thread) stops it as :meth:`stop` does, finished
        batches committed, and ``run`` returns: no ``KeyboardInterrupt``. A handler that raises
        ``SystemExit`` or ``KeyboardInterrupt`` stops it too (logged at ERROR, its batch not
        committed) and ``run`` returns."""
        with _sigint_sets(self._stopping):
            self.start()
            try:
                while not self._engine_stopped.wait(_EVENT_SECONDS):
                    if self._stopping.is_set():
                        self.stop()
            finally:
                self.stop()

    def __enter__(self) -> Consumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- observation -----------------------------------------------------------------------

    def subscribe(self, callback: InstrumentationCallback) -> None:
        """Call ``callback(event, payload)`` for each telemetry event.

        ``handler.start`` (topic, partition, first_offset, last_offset, record_count,
        system_time), ``handler.stop`` (the same and ``duration`` in seconds) and
        ``handler.exception`` (also ``error``, ``attempt``, ``policy``, ``retry_in``) run on the
        partition's worker. ``assigned``, ``draining`` (partitions, dropped: queued records
        dropped when they were revoked or the consumer began stopping), ``unassigned``
        (partitions, lost: true when offsets were not committed), ``caught_up``,
        ``paused``/``resumed`` (topic, partition, queued, queued_bytes), ``commit`` (offsets as
        ``(topic, partition, next_offset)``, error) and ``error`` run on the event thread.
        """
        self._core.subscribe(callback)

    def stats(self) -> dict[str, Any]:
        """Counters over the consumer's life (received, handled, failed, dead_lettered,
        retries, batches, pauses, resumes, dropped, abandoned, commits, commit_errors) and
        ``partitions``: one dict per assigned partition with the same counters and queued,
        queued_bytes, paused, in_flight, position (next offset to commit) and committed."""
        return self._core.stats()

    # -- threads ---------------------------------------------------------------------------

    def _dispatch_forever(self) -> None:
        raw = self._core.require_raw()
        while True:
            stopped = self._engine_stopped.is_set()
            events = raw.poll_events(0.0 if stopped else _EVENT_SECONDS)
            for callback, args in self._core.notifications(events, self._start_worker):
                try:
                    callback(*args)
                except BaseException:  # SystemExit too: this thread starts every worker
                    log_failure(log, f"consumer notification callback {callback!r} failed")
            if stopped and not events:
                return

    def _start_worker(self, worker: int, topic: str, partition: int) -> None:
        self._workers = [w for w in self._workers if w.is_alive()]
        earlier = self._generations.earlier(worker, topic, partition)
        thread = threading.Thread(
            target=self._work,
            args=(worker, topic, partition, earlier),
            name=f"ferrokafka-consumer-{topic}-{partition}",
            daemon=True,
        )
        self._generations.add(topic, partition, thread)
        self._workers.append(thread)
        thread.start()

    def _work(
        self, worker: int, topic: str, partition: int, earlier: list[threading.Thread]
    ) -> None:
        if any(thread.is_alive() for thread in earlier):
            waiting_for_abandoned(topic, partition)
            for thread in earlier:
                while thread.is_alive() and not self._engine_stopped.is_set():
                    thread.join(_FETCH_SECONDS)
        raw = self._core.require_raw()
        while (batch := raw.fetch(worker, _FETCH_SECONDS)) is not None:
            if batch and not self._handle(raw, worker, topic, partition, batch):
                return

    def _handle(
        self, raw: _RawConsumer, worker: int, topic: str, partition: int, batch: Batch
    ) -> bool:
        """Runs the handler on ``batch`` until it is settled; False when the handler asked the
        process to end (``sys.exit``, ``KeyboardInterrupt``): the consumer then stops."""
        core, attempt = self._core, 0
        while True:
            started = core.handler_started(topic, partition, batch)
            failure: Exception | None = None
            try:
                self._handler(batch)
            except Exception as error:
                failure = error
            except BaseException as exiting:
                # Not a failure of the batch for the error policy: a request to end. The batch
                # is not committed (it is handed again, here or to the next owner) and the
                # consumer stops, so nothing waits for a worker that is gone.
                core.handler_exited(raw, worker, batch, exiting)
                self.stop()
                return False
            retry_in = core.handler_ended(raw, worker, batch, started, failure, attempt)
            if retry_in is None:
                return True
            # The partition waits: its next batch is fetched only after this one is settled. A
            # revocation (or a stop) cuts the wait short: the batch goes to the next owner.
            if raw.backoff(worker, retry_in):
                raw.ack(worker, batch, "abandoned")
                return True
            attempt += 1


def _is_coroutine_function(handler: object) -> bool:
    """Whether calling ``handler`` makes a coroutine: an ``async def`` function, or an object
    whose ``__call__`` is one (which ``inspect.iscoroutinefunction`` does not say of the
    object itself)."""
    call = getattr(type(handler), "__call__", None)  # noqa: B004 (the method, not a test)
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


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
