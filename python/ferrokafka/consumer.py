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

import inspect
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
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
    from ferrokafka._async_consumer import AsyncConsumer

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


def _async_consumer_on_demand(
    namespace: dict[str, Any],
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of the module with ``namespace`` (this one and
    the package) that name ``AsyncConsumer``: its module is loaded when it is first named, since
    it needs asyncio, which took about half of every ``import ferrokafka``."""

    def named(name: str) -> object:
        if name == "AsyncConsumer":
            from ferrokafka._async_consumer import AsyncConsumer

            return AsyncConsumer
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")

    def names() -> list[str]:
        return sorted([*namespace, "AsyncConsumer"])

    return named, names


__getattr__, __dir__ = _async_consumer_on_demand(globals())
