"""``AsyncProducer``: a background batching producer with a bounded queue and backpressure.

The semantics are ruby-kafka's ``Kafka::AsyncProducer``: ``produce`` only queues a message and
returns at once; a Rust worker thread delivers the queue through librdkafka when
``delivery_threshold`` messages are buffered, every ``delivery_interval`` seconds, when
``deliver_messages()`` is called, or on ``flush``/``shutdown``. With both triggers at 0 (the
reference's default) nothing is delivered until you ask.

Example:
    >>> from ferrokafka import AsyncProducer
    >>> with AsyncProducer(
    ...     {"bootstrap.servers": "127.0.0.1:9092"}, delivery_threshold=100, delivery_interval=1.0
    ... ) as producer:
    ...     producer.produce(b"hello", topic="greetings")
    ...     producer.produce_many([b"a", b"b", b"c"], topic="greetings")
    3
    >>> producer.stats()["delivered"]  # leaving the block delivered what was still queued
    4
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Literal, TypeAlias

from ferrokafka import _exit, _instrumentation
from ferrokafka._config import Config
from ferrokafka._delivery_future import DeliveryFuture
from ferrokafka._native import (
    DeliveryReport,
    Message,
    ProducerDelivering,
    ProducerDropped,
    ProducerFailed,
    ProducerRetrying,
    ProducerShutDown,
    _RawAsyncProducer,
)
from ferrokafka._validation import NATIVE_MAX_SECONDS, checked_seconds, require_callable
from ferrokafka.exceptions import BufferOverflow

__all__ = [
    "AsyncProducer",
    "BatchDeliveryCallback",
    "DeliveryCallback",
    "DeliveryReport",
    "InstrumentationCallback",
]

# What the native producer's event poll returns, one class per kind. Delivery results are not
# among them: the binding calls the callbacks and completes the futures while draining.
ProducerEvent: TypeAlias = (
    ProducerFailed | ProducerDropped | ProducerDelivering | ProducerRetrying | ProducerShutDown
)

log = logging.getLogger("ferrokafka.producer")

DeliveryCallback: TypeAlias = Callable[[Exception | None, Message], object]
"""``on_delivery(error, message)``: error is ``None`` once the broker acknowledged the message."""
BatchDeliveryCallback: TypeAlias = Callable[[DeliveryReport], object]
"""``on_delivery(report)`` for a whole ``produce_many`` call, once all its records settled."""
InstrumentationCallback: TypeAlias = Callable[[str, dict[str, Any]], object]
"""``callback(event_name, payload)`` for the producer's instrumentation events."""

Value: TypeAlias = bytes | str | None
HeaderValue: TypeAlias = bytes | str | None
Headers: TypeAlias = Mapping[str, HeaderValue] | Sequence[tuple[str, HeaderValue]]
Record: TypeAlias = bytes | str | tuple[Value, Value] | Mapping[str, Any]

_POLL_SECONDS = 0.1
_LEAST_WAIT = 0.001
_LOST_TO_CTRL_C = "are lost: Ctrl-C ended the wait for their delivery"


class AsyncProducer(_exit.NotCopyable):
    """Queues messages and delivers them from a background thread, with backpressure.

    Args:
        config: librdkafka configuration, as confluent-kafka takes it (``enable.idempotence``,
            ``transactional.id``, ``linger.ms``, ... pass straight through). With
            ``transactional.id`` set, each delivery round is one transaction.
        max_queue_size: most messages buffered [1000].
        max_queue_bytes: most bytes (keys + values + headers) buffered [64 MiB].
        overflow: what a full queue does: ``"raise"`` :class:`~ferrokafka.BufferOverflow`
            [default], ``"block"`` for up to ``block_timeout`` seconds then raise, or
            ``"drop_oldest"`` (dropped messages are counted and reported in the
            ``drop_messages`` event).
        block_timeout: seconds the ``block`` policy waits for room [10].
        delivery_threshold: deliver once this many messages are buffered; 0 = off [0].
        delivery_interval: deliver every this many seconds; 0 = off [0].
        max_retries: re-sends after librdkafka reports a message failed; -1 = unlimited [-1].
            librdkafka's own retries (``message.timeout.ms``) come first.
        retry_backoff: seconds before a failed message is sent again [0].
        partition_key_hashing: how a ``partition_key`` chooses the partition: ``"waterdrop"``
            hashes it as WaterDrop does (CRC32 of as many leading UTF-8 bytes as the key has
            characters), so Ruby and Python producers agree; ``"bytes"`` hashes every byte
            ["waterdrop"].
        exit_timeout: most seconds spent delivering what is still buffered when the producer
            is collected or the interpreter exits without :meth:`shutdown` [5].

    A message that finally fails is never dropped silently: its ``on_delivery`` callback or
    future gets the error, a ``delivery_error`` event is published, and it is kept for
    :meth:`take_failed`. :meth:`shutdown` returns the messages it could not deliver. A producer
    that is collected, or still open when the interpreter exits, delivers what it holds within
    ``exit_timeout`` seconds and logs at WARNING how many messages, to which topics, it could
    not deliver.

    Example:
        >>> producer = AsyncProducer({"bootstrap.servers": "127.0.0.1:9092"})
        >>> events: list[str] = []
        >>> producer.subscribe(lambda name, payload: events.append(name))
        >>> future = producer.produce_future(b"v", topic="orders")
        >>> producer.deliver_messages()
        >>> future.result(timeout=10).offset()
        0
        >>> producer.shutdown()
        []
        >>> events
        ['enqueue_message', 'deliver_messages']
    """

    def __init__(
        self,
        config: Config,
        *,
        max_queue_size: int = 1000,
        max_queue_bytes: int = 64 * 1024 * 1024,
        overflow: Literal["raise", "block", "drop_oldest"] = "raise",
        block_timeout: float = 10.0,
        delivery_threshold: int = 0,
        delivery_interval: float = 0.0,
        max_retries: int = -1,
        retry_backoff: float = 0.0,
        partition_key_hashing: Literal["waterdrop", "bytes"] = "waterdrop",
        exit_timeout: float = 5.0,
    ) -> None:
        self.max_queue_size = max_queue_size
        # The one Python-only option: it bounds the delivery at exit, which Python drives.
        self.exit_timeout = checked_seconds("exit_timeout", exit_timeout, positive=False)
        self._raw = _RawAsyncProducer(
            dict(config),
            max_queue_size=max_queue_size,
            max_queue_bytes=max_queue_bytes,
            overflow=overflow,
            block_timeout=block_timeout,
            delivery_threshold=delivery_threshold,
            delivery_interval=delivery_interval,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            partition_key_hashing=partition_key_hashing,
        )
        self._events = _ProducerEvents(self._raw)
        self._shutdown_lock = threading.Lock()
        self._closed = False
        self._creator_pid = os.getpid()
        # Until someone subscribes, `produce` has no Python work to do: the binding's own method
        # (same arguments) stands in for it: two Python frames were about 1,500 of the 6,800
        # instructions a message cost (benches/RESULTS.md).
        # A plain store: reading `self.__dict__` would give every producer a dict of its own and
        # slow every attribute read (produce_future's, 450 instructions a call). Not over a
        # subclass's own `produce`, which must keep being called.
        if type(self).produce is AsyncProducer.produce:
            self.produce = self._raw.produce  # type: ignore[method-assign]
        _exit.register(self)

    # -- producing -------------------------------------------------------------------------

    def produce(
        self,
        value: Value,
        topic: str,
        key: Value = None,
        partition: int | None = None,
        partition_key: Value = None,
        headers: Headers | None = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Queue one message and return at once.

        ``partition_key`` chooses the partition (as WaterDrop does, see
        ``partition_key_hashing``) without being the message key; ``timestamp`` is in
        milliseconds. ``on_delivery(error, message)`` runs on the producer's event thread once
        the message is delivered or finally failed.

        Raises :class:`~ferrokafka.BufferOverflow` when the queue is full (``raise`` policy, or
        ``block`` after ``block_timeout``), ``TypeError``/``ValueError`` for bad arguments before
        anything is queued, and :class:`~ferrokafka.ClosedError` after :meth:`shutdown`.
        """
        # Runs once there are subscribers (until then `__init__` bound the binding's `produce`);
        # the binding keeps on_delivery until the record's result comes.
        self._queue(topic, value, key, partition, partition_key, headers, timestamp, on_delivery)

    def produce_future(
        self,
        value: Value,
        topic: str,
        key: Value = None,
        partition: int | None = None,
        partition_key: Value = None,
        headers: Headers | None = None,
        timestamp: int | None = None,
    ) -> Future[Message]:
        """Like :meth:`produce`, returning a future of the delivered :class:`Message`.

        In asyncio code: ``await asyncio.wrap_future(producer.produce_future(...))``.
        """
        future: Future[Message] = DeliveryFuture()
        self._queue(topic, value, key, partition, partition_key, headers, timestamp, None, future)
        return future

    def _queue(
        self,
        topic: str,
        value: Value,
        key: Value,
        partition: int | None,
        partition_key: Value,
        headers: Headers | None,
        timestamp: int | None,
        on_delivery: DeliveryCallback | None,
        future: Future[Message] | None = None,
    ) -> None:
        """Queue one record in the binding and publish what it did to the instrumentation
        subscribers: a ``buffer_overflow`` (then re-raised) or an ``enqueue_message``."""
        try:
            queue_size = self._raw.queue(
                topic, value, key, partition, partition_key, headers, timestamp, on_delivery, future
            )
        except BufferOverflow as overflow:
            self._events.publish("buffer_overflow", {"topic": topic, "limit": overflow.limit})
            raise
        if self._events.subscribers:
            self._events.publish(
                "enqueue_message",
                {"topic": topic, "queue_size": queue_size, "max_queue_size": self.max_queue_size},
            )

    def produce_many(
        self,
        records: Iterable[Record],
        topic: str | None = None,
        on_delivery: BatchDeliveryCallback | None = None,
    ) -> int:
        """Queue a batch in one call (one crossing into Rust); returns how many were queued.

        Each record is a value (``bytes``/``str``, for ``topic``), a ``(value, key)`` tuple, or a
        dict with any of ``value``, ``key``, ``topic``, ``partition``, ``partition_key``,
        ``headers``, ``timestamp`` (any other field raises ``TypeError``: a misspelled
        ``"vaule"`` would send a tombstone). The whole batch is checked before anything is
        queued. On overflow the :class:`~ferrokafka.BufferOverflow` says (in its message and in
        ``accepted``) how many records of the batch were queued before it: the first
        ``accepted`` records are delivered like any queued record, the rest were not queued.

        ``on_delivery(report)`` runs once, on the producer's event thread, when every queued
        record of the batch is acknowledged or finally failed: the
        :class:`~ferrokafka.DeliveryReport` gives each record's partition and offset in batch
        order, and the errors of the failed ones (which are also handed back as usual). It costs
        one Python call per batch, not one per record.
        """
        try:
            accepted, queue_size = self._raw.produce_many(records, topic, on_delivery)
        except BufferOverflow as overflow:
            self._events.publish(
                "buffer_overflow", {"topic": overflow.topic, "limit": overflow.limit}
            )
            raise
        if self._events.subscribers:
            self._events.publish(
                "enqueue_message",
                {
                    "topic": topic,
                    "message_count": accepted,
                    "queue_size": queue_size,
                    "max_queue_size": self.max_queue_size,
                },
            )
        return accepted

    def produce_many_future(
        self, records: Iterable[Record], topic: str | None = None
    ) -> Future[DeliveryReport]:
        """Like :meth:`produce_many`, returning a future of the batch's
        :class:`~ferrokafka.DeliveryReport` (one future per batch). Overflow raises as in
        :meth:`produce_many`; the :class:`~ferrokafka.BufferOverflow` then carries, as
        ``future``, the future of the report covering the ``accepted`` records queued before it
        (``None`` if there were none).

        In asyncio code: ``report = await asyncio.wrap_future(producer.produce_many_future(...))``.
        """
        future: Future[DeliveryReport] = Future()
        future.set_running_or_notify_cancel()
        try:
            self.produce_many(records, topic, on_delivery=future.set_result)
        except BufferOverflow as overflow:
            overflow.future = future if overflow.accepted else None
            raise
        return future

    # -- delivery control ------------------------------------------------------------------

    def deliver_messages(self) -> None:
        """Ask the background thread to deliver everything buffered; returns at once."""
        self._raw.deliver_messages()

    def flush(self, timeout: float = 30.0) -> None:
        """Deliver everything buffered and wait until every message is acknowledged or failed,
        and their callbacks ran. Raises :class:`~ferrokafka.KafkaTimeoutError` (a
        ``TimeoutError``) if that takes longer than ``timeout`` seconds, and
        :class:`~ferrokafka.KafkaError` naming the cause as soon as the brokers refuse the
        connection (TLS handshake or SASL authentication failed). Called in a callback (which
        runs on the event thread), it waits for the acknowledgements only: the event thread
        runs the other callbacks once this one returns."""
        self._raw.flush(timeout)
        self._events.drain_now()

    def shutdown(self, timeout: float = 30.0) -> list[Message]:
        """Deliver what is buffered (waiting up to ``timeout`` seconds), then stop.

        Returns every message that was not delivered and not yet taken with
        :meth:`take_failed`, each with ``error()`` set (to the cause when the brokers refused
        the connection, which also ends the wait at once); they also fail their callbacks and
        futures. Later calls to ``produce`` raise
        :class:`~ferrokafka.ClosedError`. Calling it again returns ``[]``, and so does a call in
        a callback while another thread shuts the producer down (that one, waiting for the
        callbacks to end, hands the messages back).

        A transactional producer still ends the transaction it has open after ``timeout``:
        its commit (when one was under way) and then an abort, up to 2 s each, so 4 s more at
        most against a broker that does not answer. What it hands back was then never
        committed, not merely unconfirmed.
        """
        handed_back = self._shut_down(timeout)
        if handed_back:
            log.error("shutdown: %d message(s) could not be delivered", len(handed_back))
        return handed_back

    def _shut_down(self, timeout: float) -> list[Message]:
        # One shutdown at a time: the exit hook waits for a collection finishing on a thread.
        # A callback's shutdown (on the event thread) cannot wait for another thread's, which
        # waits for the event thread to end.
        if not self._shutdown_lock.acquire(blocking=not self._events.on_event_thread()):
            return []
        try:
            if self._closed:
                return []
            undelivered = self._raw.shutdown(timeout)
            self._closed = True
            self._events.close()
            for ticket, message in undelivered:
                self._raw.settle(ticket, message)
            _exit.unregister(self)
            return self.take_failed() + [message for _, message in undelivered]
        finally:
            self._shutdown_lock.release()

    # -- the end of a producer nobody shut down ---------------------------------------------

    def begin_exit(self) -> None:
        """Part of the interpreter-exit protocol (``ferrokafka._exit``): start delivering."""
        if not self._closed:
            self._raw.deliver_messages()

    def finish_exit(self, timeout: float) -> None:
        """Part of the interpreter-exit protocol: deliver within ``timeout``, log the rest."""
        self._finish_unowned("at interpreter exit", timeout)

    def __del__(self) -> None:
        closed = getattr(self, "_closed", True)  # missing: __init__ failed before the engine ran
        if closed or sys.is_finalizing():
            return  # after finalization began, the engine's own drop reports what is lost
        if os.getpid() != self._creator_pid:
            return  # a forked child's copy: the parent's records, the parent's to deliver
        finish = functools.partial(
            self._finish_unowned, "collected without shutdown()", self.exit_timeout
        )
        _exit.finish_collected(finish, "ferrokafka-producer-close")

    def _finish_unowned(self, when: str, timeout: float) -> None:
        try:
            self._finish_unowned_within(when, timeout)
        except KeyboardInterrupt:
            # Ctrl-C anywhere in it, the wait included: what is still held is handed back at
            # once and named.
            self._say_lost(when, _LOST_TO_CTRL_C, self._shut_down(_LEAST_WAIT))
            raise

    def _finish_unowned_within(self, when: str, timeout: float) -> None:
        self._events.log_failures = False  # the lines below name them all
        # Failed before the end (each logged then) and never taken back: lost too, but not for
        # want of time, which the exit_timeout line below would wrongly say of them.
        failed_before = self.take_failed()
        if failed_before:
            log.warning(
                "AsyncProducer %s: %d message(s) that failed before it were never taken back "
                "with take_failed() and are lost: %s (last error: %s)",
                when,
                len(failed_before),
                _per_topic(failed_before),
                failed_before[-1].error(),
            )
        why = f"could not be delivered within exit_timeout={self.exit_timeout:g} s and are lost"
        if _exit.interrupted():  # Ctrl-C before this producer's wait began
            why = _LOST_TO_CTRL_C
        else:
            self._say_waiting(when, timeout)
        # shutdown needs a positive wait (a zero exit_timeout hands back at once) of at most
        # the native bound (exit_timeout=1e20 failed here and lost everything unsaid); a Ctrl-C
        # ending it is answered by _finish_unowned
        lost = self._shut_down(min(max(timeout, _LEAST_WAIT), NATIVE_MAX_SECONDS))
        self._say_lost(when, why, lost)

    def _say_waiting(self, when: str, timeout: float) -> None:
        # Why a process that ended seems to hang: said before the wait, where Ctrl-C ends it.
        stats = self._raw.stats()
        held = stats.queue_size + stats.retry_queue_size + stats.in_flight
        if held:
            log.info(
                "AsyncProducer %s: delivering %d message(s) still held, for at most %g s "
                "(Ctrl-C ends the wait)",
                when,
                held,
                timeout,
            )

    @staticmethod
    def _say_lost(when: str, why: str, lost: list[Message]) -> None:
        if lost:
            log.warning(
                "AsyncProducer %s: %d message(s) %s: %s (last error: %s)",
                when,
                len(lost),
                why,
                _per_topic(lost),
                lost[-1].error(),
            )

    def __enter__(self) -> AsyncProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.undelivered = self.shutdown()

    # -- observation -----------------------------------------------------------------------

    def subscribe(self, callback: InstrumentationCallback) -> None:
        """Call ``callback(event, payload)`` for each instrumentation event.

        Events: ``enqueue_message`` (topic, queue_size, max_queue_size; once per
        ``produce_many`` call with its message_count), ``buffer_overflow``
        (topic, limit), ``deliver_messages`` (message_count, queue_size), ``delivery_error``
        (topic, error, attempt, final, and the message when final), ``drop_messages``
        (message_count, messages). ``enqueue_message`` and ``buffer_overflow`` run on the
        producing thread, the others on the producer's event thread.
        """
        require_callable("callback", callback)
        self._events.subscribers.append(callback)
        # From now on `produce` publishes its events (see `__init__`).
        with contextlib.suppress(AttributeError):  # a second subscriber: already the method
            del self.produce

    def stats(self) -> dict[str, int]:
        """Counters: enqueued, delivered, failed, retried, dropped, overflowed, deliveries,
        queue_size, queue_bytes, in_flight, retry_queue_size (waiting to be sent again, after a
        failed send or given back by librdkafka's full queue). Every accepted message is
        delivered, failed, dropped, or counted in queue_size + retry_queue_size + in_flight."""
        return self._raw.stats().as_dict()

    def take_failed(self) -> list[Message]:
        """Messages that finally failed since the last call, each with ``error()`` set."""
        return self._events.take_failed()


def _per_topic(messages: list[Message]) -> str:
    """How many of ``messages`` went to each topic, for a log line: ``a (2), b (1)``."""
    counts: dict[str, int] = {}
    for message in messages:
        counts[message.topic()] = counts.get(message.topic(), 0) + 1
    return ", ".join(f"{topic} ({count})" for topic, count in sorted(counts.items()))


class _ProducerEvents:
    """The producer's event thread and what it feeds: subscribers and the failed messages.

    It is a separate object so that the thread never holds the :class:`AsyncProducer`: a
    producer its owner dropped is collected (and delivers what it holds, see ``__del__``) instead
    of being kept alive by its own thread.
    """

    def __init__(self, raw: _RawAsyncProducer) -> None:
        self._raw = raw
        self.subscribers: list[InstrumentationCallback] = []
        self.log_failures = True
        self._failed: list[Message] = []
        self._failed_lock = threading.Lock()
        self._dispatch_lock = threading.Lock()
        # Callers of drain_now waiting for the dispatch lock: the event thread lets them in
        # before it takes the lock again (a released threading.Lock goes to whoever runs first,
        # which is the event thread), so a flush does not wait out its polls.
        self._drainers = 0
        self._drainers_changed = threading.Condition()
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._dispatch_forever, name="ferrokafka-producer-events", daemon=True
        )
        self._thread.start()

    def on_event_thread(self) -> bool:
        """Whether the caller is the event thread: a callback or subscriber running there."""
        return threading.current_thread() is self._thread

    def close(self) -> None:
        """Ends the thread (the engine has shut down), then publishes what is left: here, or
        by the event thread itself when a callback on it closes (it is mid-dispatch)."""
        self._closed.set()
        if not self.on_event_thread():
            self._thread.join()
            self.drain_now()

    def take_failed(self) -> list[Message]:
        """Messages that finally failed since the last call, each with ``error()`` set."""
        with self._failed_lock:
            failed, self._failed = self._failed, []
        return failed

    def _dispatch_forever(self) -> None:
        while not self._closed.is_set():
            with self._drainers_changed:
                self._drainers_changed.wait_for(lambda: self._drainers == 0)
            with self._dispatch_lock:
                if self._dispatch(self._raw.poll_events(_POLL_SECONDS)):
                    return
        # Closed by a callback of the last dispatch (a shutdown there): what came since.
        self.drain_now()

    def drain_now(self) -> None:
        """Publishes every event already waiting, on the calling thread: the event thread's
        wait is ended and it lets this thread in next. On the event thread in a callback it
        does nothing: that thread is publishing, and goes on once the callback returns."""
        if self.on_event_thread() and self._dispatch_lock.locked():
            return
        with self._drainers_changed:
            self._drainers += 1
        try:
            if self._thread.is_alive():
                self._raw.wake_listener()
            with self._dispatch_lock:
                while events := self._raw.poll_events(0.0):
                    self._dispatch(events)
        finally:
            with self._drainers_changed:
                self._drainers -= 1
                self._drainers_changed.notify_all()

    def _dispatch(self, events: list[ProducerEvent]) -> bool:
        """Publishes ``events`` (their waiters were settled in the binding); True once the
        producer's last event came."""
        failures: dict[str, list[Any]] = {}  # topic -> [count, last error]: one log line each
        shut_down = False
        for event in events:
            if isinstance(event, ProducerFailed):
                message = event.message
                error = message.error()
                failures.setdefault(message.topic(), [0, error])[0] += 1
                failures[message.topic()][1] = error
                with self._failed_lock:
                    self._failed.append(message)
                self.publish(
                    "delivery_error",
                    {
                        "topic": message.topic(),
                        "error": error,
                        "attempt": event.attempts,
                        "final": True,
                        "message": message,
                    },
                )
            elif isinstance(event, ProducerRetrying):
                self.publish(
                    "delivery_error",
                    {
                        "topic": event.topic,
                        "error": event.error,
                        "attempt": event.attempt,
                        "final": False,
                    },
                )
            elif isinstance(event, ProducerDropped):
                messages = event.messages
                self.publish(
                    "drop_messages", {"message_count": len(messages), "messages": messages}
                )
            elif isinstance(event, ProducerDelivering):
                self.publish(
                    "deliver_messages",
                    {"message_count": event.message_count, "queue_size": event.queue_size},
                )
            elif isinstance(event, ProducerShutDown):
                shut_down = True
        for topic, (count, error) in failures.items() if self.log_failures else ():
            log.warning("%d message(s) to %s failed and were handed back: %s", count, topic, error)
        return shut_down

    def publish(self, name: str, payload: dict[str, Any]) -> None:
        _instrumentation.publish(self.subscribers, name, payload, log)
