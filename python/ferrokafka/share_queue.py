"""The share-group backend of :class:`ferrokafka.redelivery.QueueConsumer` (KIP-932).

On a broker with share groups (Kafka 4.2+, ``share.version`` >= 1) the broker itself tracks
every record: a poll *acquires* records under a lock of ``share.record.lock.duration.ms``, an
acknowledgement ACCEPTs (done), RELEASEs (deliver again now) or REJECTs (archive) it, a record
whose lock expires comes back, and the broker counts deliveries. This module maps the
``QueueConsumer`` API onto ``confluent_kafka.ShareConsumer`` in explicit acknowledgement mode:

- ``ack`` = ACCEPT; ``nack(redeliver="now")`` = RELEASE, or past ``max_redeliveries`` a copy to
  the dead-letter topic followed by REJECT.
- The redelivery count is the broker's delivery count minus one (plus the count a copy put back
  by a closing consumer carries), set on each message as the ``ferrokafka_redelivery_count``
  header, so ``redelivery_count(message)`` reads both backends.
- A message that comes back already past ``max_redeliveries`` (its handler died or overran the
  lock each time) is dead-lettered on arrival and never handed out.
- ``close`` puts back what was acquired and never handed out (the rest of a poll): copies with
  the same key, value and headers go to its queue partition, then the originals are ACCEPTed.
  Released by the broker instead, they would come back with their delivery count raised.
- The group's settings are written when the consumer starts (``share.auto.offset.reset``
  earliest, the lock = ``redelivery_timeout``, the broker's delivery limit = ``max_redeliveries``
  + 2 so the consumer sees the one past the limit and dead-letters it; the broker archives
  anything beyond as a backstop). Writing them is also how ``backend="auto"`` tells whether the
  broker has share groups.

Not available on this backend (they raise ``NotImplementedError``): ``keepalive`` (extending a
lock needs the RENEW acknowledgement of KIP-1222, which confluent-kafka 2.16 does not expose, so
the lock is the whole time a handler has; ``auto_keepalive`` has no effect) and
``nack(redeliver="after_timeout")`` (a record left unacknowledged blocks the next poll in explicit
mode). ``ShareConsumer`` is not thread-safe: every call here holds one lock, and polls wait in
short slices so ``close`` from another thread gets in.

The loop costs little more than confluent-kafka's own ``poll`` + ``acknowledge`` loop: a poll of
first deliveries is checked without a Python step per record and handed out as the list
confluent-kafka built; a list ``consume`` returned, acked whole and unchanged, is known to be open
(one comparison with a copy), else the messages handed out are kept one by one by identity (a
user's own object with ``partition()`` and ``offset()`` is matched by position, the slow way);
the ``acknowledge(message)`` calls are driven by ``map()`` (``acknowledge_offset`` takes over
twice as long). A second ack of a message is refused here: confluent-kafka takes it until the
commit. The acknowledgements go to the broker with the next poll or ``flush``.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from itertools import repeat
from typing import Any, cast

from ferrokafka._config import Config
from ferrokafka._extras import missing_extra

try:
    from confluent_kafka import (
        AcknowledgeType,
        ConsumerGroupState,
        ConsumerGroupType,
        KafkaException,
        Producer,
        ShareConsumer,
    )
    from confluent_kafka import KafkaError as ConfluentKafkaError
    from confluent_kafka import Message as ShareMessage
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
except ModuleNotFoundError as e:
    raise missing_extra("ferrokafka.share_queue", "share", e) from e

from ferrokafka._native import (
    REDELIVERY_COUNT_HEADER,
    queue_dead_letter_headers,
    redact_secrets,
    redelivery_count_in,
)
from ferrokafka.exceptions import (
    ClosedError,
    ConfigError,
    FerrokafkaError,
    KafkaError,
    KafkaFatalError,
    KafkaTimeoutError,
)
from ferrokafka.tracking import _CONSUMER_ONLY_KEYS  # one list of a producer's foreign keys

__all__ = ["ShareMessage", "ShareQueue", "configure_share_group"]

log = logging.getLogger("ferrokafka.redelivery")

_queues: weakref.WeakSet[ShareQueue] = weakref.WeakSet()
"""Every ShareQueue, whose librdkafka handles a forked child must never destroy."""


def _keep_the_parents_handles() -> None:
    """In a forked child: destroying an inherited librdkafka handle, as collecting the
    confluent-kafka objects does at the child's exit, fails an assertion in librdkafka and
    aborts the child (the handle's threads are the parent's). One reference more that nobody
    gives back keeps them alive until the child's process ends."""
    for queue in _queues:
        for handle in (queue._consumer, queue._dead_letters):
            if handle is not None:
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(handle))


os.register_at_fork(after_in_child=_keep_the_parents_handles)


class _RedactSecrets(logging.Filter):
    """Cuts secrets out of the records of this logger, where confluent-kafka forwards its
    librdkafka's lines (which quote an OIDC token endpoint URL with its credentials), as the
    engines' lines are."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact_secrets(record.getMessage())
        record.args = None
        return True


log.addFilter(_RedactSecrets())


# The longest one poll holds the consumer's lock, so close() from another thread gets in.
_POLL_SLICE = 0.2
# Consumer-group settings that a share consumer refuses: a share group keeps them on the
# broker (group.share.session.timeout.ms, ...) or has no such thing.
_SHARE_REFUSED = frozenset(
    (
        "group.id",
        "group.instance.id",
        "group.protocol",
        "group.protocol.type",
        "group.remote.assignor",
        "partition.assignment.strategy",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "auto.commit.interval.ms",
        "auto.offset.reset",
    )
)


def _connection(config: Config) -> dict[str, Any]:
    """The settings for the dead-letter producer and the admin client (no consumer keys)."""
    return {k: v for k, v in config.items() if k not in _CONSUMER_ONLY_KEYS}


def _share_consumer_settings(config: Config, group_id: str) -> dict[str, Any]:
    dropped = sorted(k for k in config if k in _SHARE_REFUSED)
    if dropped:
        log.info("share backend: ignoring consumer-group settings %s", ", ".join(dropped))
    return {
        **{k: v for k, v in config.items() if k not in _SHARE_REFUSED},
        "group.id": group_id,
        "share.acknowledgement.mode": "explicit",
        "logger": log,
    }


def _ferrokafka_error(error: Any, what: str) -> KafkaError:
    """confluent-kafka's ``KafkaError`` as ferrokafka's, keeping code, name and flags."""
    try:
        kind = KafkaFatalError if error.fatal() else KafkaError
        return kind(
            redact_secrets(f"{what}: {error.str()}"),
            error.code(),
            error.name(),
            error.retriable(),
            error.fatal(),
        )
    except AttributeError:  # not a confluent KafkaError
        return KafkaError(redact_secrets(f"{what}: {error}"))


def configure_share_group(
    config: Config,
    group_id: str,
    redelivery_timeout: float,
    max_redeliveries: int,
    timeout: float = 30.0,
) -> None:
    """Writes the share group's settings, waiting up to ``timeout`` seconds in all; raises
    ``KafkaException`` when the broker refuses them (for example because it has no share
    groups), ``ConfigError`` when ``group_id`` is a live consumer group that is not a share group
    (a classic or KIP-848 group: the broker would answer the share heartbeat with "group id does
    not exist"), and ``ValueError`` for a lock that is not a positive number of seconds."""
    if not (math.isfinite(redelivery_timeout) and redelivery_timeout > 0):
        raise ValueError(f"redelivery_timeout must be > 0 seconds, got {redelivery_timeout}")
    deadline = time.monotonic() + timeout
    admin_settings: dict[str, Any] = {**_connection(config), "logger": log}
    admin = AdminClient(admin_settings)
    found = _answer(
        lambda left: admin.describe_consumer_groups([group_id], request_timeout=left)[group_id],
        deadline,
    )
    # A share group is invisible to this (classic) description: it looks dead, like no group.
    if found.state != ConsumerGroupState.DEAD:
        kind = "KIP-848" if found.type == ConsumerGroupType.CONSUMER else "classic"
        raise ConfigError(
            f"group_id {group_id!r} is a {kind} consumer group (e.g. of the markers backend or a "
            "Consumer); a share group needs an id of its own"
        )
    settings = {
        "share.auto.offset.reset": "earliest",
        "share.record.lock.duration.ms": str(round(redelivery_timeout * 1000)),
        "share.delivery.count.limit": str(max_redeliveries + 2),
    }
    resource = ConfigResource(
        ResourceType.GROUP,
        group_id,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in settings.items()
        ],
    )
    _answer(
        lambda left: admin.incremental_alter_configs([resource], request_timeout=left)[resource],
        deadline,
    )


_COORDINATOR_NOT_READY = frozenset(
    (
        ConfluentKafkaError.NOT_COORDINATOR,
        ConfluentKafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        ConfluentKafkaError.COORDINATOR_NOT_AVAILABLE,
    )
)


def _coordinator_not_ready(error: Any) -> bool:
    """An admin error that passes once the group's coordinator is ready (confluent-kafka marks
    none of them retriable)."""
    code = getattr(error, "code", None)
    return callable(code) and code() in _COORDINATOR_NOT_READY


def _answer(request: Callable[[float], Future[Any]], deadline: float) -> Any:
    """The result of the admin ``request`` (given the seconds left), asked again after a
    retriable error (NOT_COORDINATOR while a new group's coordinator is chosen, a coordinator
    still loading) until ``deadline``; the last error is raised then. Without this a new share
    group on a just-started broker failed now and then, and ``backend="auto"`` quietly fell back
    to markers."""
    pause = 0.05
    while True:
        left = max(deadline - time.monotonic(), 0.001)
        try:
            return request(left).result()
        except KafkaException as e:
            error = e.args[0] if e.args else None
            if not _coordinator_not_ready(error) or time.monotonic() + pause >= deadline:
                raise
            log.debug("share group setup: %s; asking again", error)
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


def _position(message: Any) -> tuple[int, int]:
    """The partition and offset of a message handed out; TypeError for anything else."""
    try:
        return message.partition() or 0, message.offset() or 0
    except (AttributeError, TypeError):
        raise TypeError(
            "QueueConsumer.ack, ack_many, nack and keepalive take the messages it handed out "
            f"(with partition() and offset()), got {type(message).__name__}"
        ) from None


class ShareQueue:
    """The share-group half of ``QueueConsumer``; see the module docs."""

    def __init__(
        self,
        config: Config,
        queue_topic: str,
        group_id: str,
        max_redeliveries: int,
        dead_letter_topic: str | None,
    ) -> None:
        self._queue_topic = queue_topic
        self._max_redeliveries = max_redeliveries
        self._dead_letter_topic = dead_letter_topic
        self._producer_settings: dict[str, Any] = {
            **_connection(config),
            "enable.idempotence": True,
            "logger": log,
        }
        # Writes the dead letters, and the copies a close puts back (then made if need be).
        self._dead_letters: Producer | None = (
            Producer(self._producer_settings) if dead_letter_topic else None
        )
        self._lock = threading.Lock()
        self._closed = False
        # Cleared when a close begins: a consume under way on another thread hands out nothing
        # it polls after that.
        self._handing_out = True
        # confluent-kafka's handles are not fork-safe, and what is buffered and handed out is
        # the parent's to settle: a forked child is refused (as the markers backend's engine
        # refuses), before taking a lock a parent thread may have held at the fork.
        self._creator_pid = os.getpid()
        self._consumer = ShareConsumer(_share_consumer_settings(config, group_id))
        self._consumer.subscribe([queue_topic])
        _queues.add(self)
        # Handed out, not yet acknowledged (the next poll waits for none of them): the lists
        # ``consume`` returned, each with a copy to tell it was not changed, until a message is
        # settled on its own; then their messages one by one, by identity.
        self._handed_out: dict[int, tuple[list[ShareMessage], list[ShareMessage]]] = {}
        self._open: dict[int, ShareMessage] = {}
        self._buffer: list[ShareMessage] = []
        self._stats = dict.fromkeys(
            ("received", "acked", "nacked", "keepalives", "failed_markers", "dead_lettered"), 0
        )

    def consume(self, num_messages: int, timeout: float | None) -> list[ShareMessage]:
        self._refuse_in_forked_child()
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                self._check_open()
                if not self._handing_out:
                    raise ClosedError("QueueConsumer is closed")
                if not self._buffer:
                    self._poll(min(_POLL_SLICE, max(deadline - time.monotonic(), 0.0)))
                if self._buffer:
                    taken = self._buffer[:num_messages]
                    del self._buffer[:num_messages]
                    self._handed_out[id(taken)] = (taken, taken[:])
                    return taken
            if time.monotonic() >= deadline:
                return []

    def _poll(self, wait: float) -> None:
        if self._open or self._handed_out:
            self._by_message()
            raise RuntimeError(
                "share backend: ack or nack every message already handed out before consuming "
                f"more ({len(self._open)} open; KIP-932 explicit acknowledgement)"
            )
        try:
            polled = self._consumer.poll(wait).records()
        except KafkaException as e:
            raise _ferrokafka_error(e.args[0] if e.args else e, "share consumer poll") from e
        # Nearly every poll holds only first deliveries and no errors: checked in two passes
        # without a Python step per message, then the batch is handed out as it came.
        counts = list(map(ShareMessage.delivery_count, polled))
        # error() is None or a KafkaError, which is always true.
        if counts.count(1) == len(polled) and not any(map(ShareMessage.error, polled)):
            self._buffer = polled
            self._stats["received"] += len(polled)
            return
        self._take_mixed(polled)

    def _take_mixed(self, polled: list[ShareMessage]) -> None:
        """A poll with errors or redeliveries: each message looked at on its own."""
        usable: list[tuple[ShareMessage, int]] = []
        for message in polled:
            if message.error() is not None:
                log.warning("share consumer: %s", message.error())
                continue
            # A copy a closing consumer put back carries the count of its original.
            carried = redelivery_count_in(message.headers())
            usable.append((message, carried + (message.delivery_count() or 1) - 1))
        failure: Exception | None = None
        for message, count in usable:
            if count > self._max_redeliveries:
                # Its lock ran out every time (handler died or overran): dead-letter it unseen.
                # A failure is raised after the batch: every record of a poll must be settled
                # or handed out before the next poll.
                self._keep_open([message])
                try:
                    self._dead_letter(message, count)
                except (KafkaError, ValueError) as e:
                    failure = failure or e
                continue
            if count > 0:
                received = cast("list[tuple[str, bytes | None]]", message.headers() or [])
                headers = [h for h in received if h[0] != REDELIVERY_COUNT_HEADER]
                message.set_headers([*headers, (REDELIVERY_COUNT_HEADER, str(count).encode())])
            self._buffer.append(message)
            self._stats["received"] += 1
        if failure is not None:
            raise failure

    def _keep_open(self, messages: list[ShareMessage]) -> None:
        self._open.update(zip(map(id, messages), messages, strict=True))

    def _by_message(self) -> None:
        """The messages of every list handed out, open one by one from now on."""
        for _, copy in self._handed_out.values():
            self._keep_open(copy)
        self._handed_out.clear()

    def _refuse_in_forked_child(self) -> None:
        if os.getpid() != self._creator_pid:
            raise FerrokafkaError(
                "ferrokafka.redelivery.QueueConsumer was created in process "
                f"{self._creator_pid} and cannot be used after fork (this is process "
                f"{os.getpid()}); create a new one in the child"
            )

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("QueueConsumer is closed")

    def _opened(self, message: Any) -> ShareMessage:
        """The open message ``message`` stands for: itself, or for another object (a user's
        wrapper) the open message at its partition and offset; TypeError for anything without
        them, ValueError when none is open there."""
        self._by_message()
        if id(message) in self._open:
            return message  # type: ignore[no-any-return]
        partition, offset = _position(message)
        for opened in self._open.values():
            if (opened.partition() or 0, opened.offset() or 0) == (partition, offset):
                return opened
        raise ValueError(
            f"{self._queue_topic}-{partition}@{offset} is not an open message of this "
            "consumer (already acked or nacked, or handed out by another consumer)"
        )

    def _take(self, messages: Sequence[Any]) -> list[ShareMessage]:
        """Takes ``messages`` out of the open ones: all of them, or none when one is not open."""
        # A list as ``consume`` returned it, unchanged: all open, nothing to look up.
        handed_out = self._handed_out.pop(id(messages), None)
        if handed_out is not None:
            if handed_out[0] is messages and messages == handed_out[1]:
                return handed_out[1]
            self._handed_out[id(messages)] = handed_out
        self._by_message()
        open_ = self._open
        before = len(open_)
        found = list(map(open_.pop, map(id, messages), repeat(None)))
        if before - len(open_) == len(found):
            return cast(list[ShareMessage], found)
        # Not open by identity (a user's wrapper, or twice in ``messages``): one by one.
        self._keep_open([m for m in found if m is not None])
        taken: list[ShareMessage] = []
        try:
            for message in messages:
                taken.append(self._opened(message))
                del open_[id(taken[-1])]
        except (TypeError, ValueError):
            self._keep_open(taken)
            raise
        return taken

    def _settle(self, messages: Sequence[Any], kind: AcknowledgeType) -> None:
        """Acknowledges each of ``messages`` as ``kind``; none when one is not open. What
        fails to be acknowledged stays open."""
        taken = self._take(messages)
        pending = iter(taken)
        try:
            # map() drives the calls: no Python step per message.
            deque(map(self._consumer.acknowledge, pending, repeat(kind)), maxlen=0)
        except Exception as e:
            # map() had taken the failed message out of ``pending`` too.
            rest = list(pending)
            unsettled = taken[len(taken) - len(rest) - 1 :]
            message = unsettled[0]
            self._keep_open(unsettled)
            if not isinstance(e, KafkaException):
                raise
            where = f"{kind.name} of {self._queue_topic}-{message.partition()}@{message.offset()}"
            raise _ferrokafka_error(e.args[0] if e.args else e, where) from e

    def ack_many(self, messages: Sequence[Any]) -> None:
        self._refuse_in_forked_child()
        with self._lock:
            self._check_open()
            self._settle(messages, AcknowledgeType.ACCEPT)
            self._stats["acked"] += len(messages)

    def nack(self, message: Any, now: bool) -> None:
        _position(message)  # a TypeError naming what nack takes, before anything else
        if not now:
            raise NotImplementedError(
                "share backend: nack(redeliver='after_timeout') is not available (an "
                "unacknowledged record blocks the next poll); use redeliver='now'"
            )
        self._refuse_in_forked_child()
        with self._lock:
            self._check_open()
            opened = self._opened(message)
            count = redelivery_count_in(opened.headers())
            if count >= self._max_redeliveries:
                self._dead_letter(opened, count)
            else:
                self._settle([opened], AcknowledgeType.RELEASE)
            self._stats["nacked"] += 1

    def _dead_letter(self, message: ShareMessage, count: int) -> None:
        """Copies the open ``message`` to the dead-letter topic (or logs it as dropped), then
        REJECTs it. A copy that fails is RELEASEd instead, so the message comes back."""
        partition, offset = _position(message)
        if self._dead_letters is None or self._dead_letter_topic is None:
            log.error(
                "%s-%s@%s: redelivered %s times, no dead_letter_topic: dropped (key %r)",
                self._queue_topic,
                partition,
                offset,
                count,
                message.key(),
            )
        else:
            # The tracker's headers, built by its own function (one layout for both backends).
            headers: list[tuple[str, str | bytes | None]] = list(
                queue_dead_letter_headers(
                    message.headers(),
                    queue_topic=self._queue_topic,
                    partition=partition,
                    offset=offset,
                    count=count,
                )
            )
            failures: list[Any] = []
            self._dead_letters.produce(
                self._dead_letter_topic,
                message.value(),
                message.key(),
                headers=headers,
                on_delivery=lambda err, _msg: failures.append(err) if err else None,
            )
            unsent = self._dead_letters.flush(30)
            if unsent > 0 or failures:
                self._settle([message], AcknowledgeType.RELEASE)
                what = f"dead letter of {self._queue_topic}-{partition}@{offset} not written"
                if failures:
                    raise _ferrokafka_error(failures[0], f"{what}; released for redelivery")
                raise KafkaTimeoutError(f"{what} within 30 s; released for redelivery")
            self._stats["dead_lettered"] += 1
        self._settle([message], AcknowledgeType.REJECT)

    def keepalive(self) -> None:
        raise NotImplementedError(
            "share backend: a record lock cannot be extended with confluent-kafka 2.16 (no "
            "RENEW acknowledgement); the lock lasts redelivery_timeout"
        )

    def flush(self, timeout: float) -> None:
        """Sends the acknowledgements made so far and waits for the broker's answer."""
        self._refuse_in_forked_child()
        with self._lock:
            self._check_open()
            self._commit(timeout)

    def _commit(self, timeout: float) -> None:
        results = self._consumer.commit_sync(timeout)
        failed = {tp: err for tp, err in (results or {}).items() if err is not None}
        if failed:
            self._stats["failed_markers"] += len(failed)
            (tp, error), *_ = failed.items()
            cause = error.args[0] if error.args else error
            raise _ferrokafka_error(cause, f"acknowledgements for {tp.topic}-{tp.partition}")

    def stats(self) -> dict[str, int]:
        self._refuse_in_forked_child()  # the parent's counters, frozen at the fork
        return dict(self._stats)

    def stop_handing_out(self) -> None:
        """A close begins: ``consume`` raises ``ClosedError`` from now on (one under way, within
        a poll slice)."""
        self._handing_out = False

    def close(self, timeout: float, not_handed_out: Sequence[ShareMessage] = ()) -> None:
        """Puts back on the queue what was acquired and never handed out (``not_handed_out``,
        which the caller took and kept, and this backend's own buffer), sends pending
        acknowledgements and leaves the group, then delivers pending dead letters, all within
        ``timeout`` seconds. Idempotent."""
        self._refuse_in_forked_child()
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout
        with self._lock:
            try:
                self._put_back(list(not_handed_out), deadline)
                self._consumer.commit_sync(max(deadline - time.monotonic(), 0.001))
            except KafkaException as e:
                log.warning("share acknowledgements not committed on close: %s", e)
            finally:
                self._consumer.close()
                if self._dead_letters is not None:
                    left = self._dead_letters.flush(max(deadline - time.monotonic(), 0.0))
                    if left:
                        log.warning(
                            "share backend: %d dead letter(s) to %s not delivered on close",
                            left,
                            self._dead_letter_topic,
                        )

    def _put_back(self, kept: list[ShareMessage], deadline: float) -> None:
        """Copies the acquired messages nobody handled to their queue partition, headers (and
        so redelivery count) unchanged, and ACCEPTs each one whose copy the broker
        acknowledged. Left to the broker, which releases them when the consumer leaves, they
        would come back with their delivery count raised, as if a handler had failed them:
        with ``max_redeliveries=0``, dead-lettered unseen. One whose copy fails or is not
        acknowledged by ``deadline`` stays with the broker (logged with the count): it comes
        back counted, and twice if its copy lands after all."""
        buffered, self._buffer = self._buffer, []
        self._keep_open(buffered)
        unhandled = kept + buffered
        if not unhandled:
            return
        if self._dead_letters is None:
            self._dead_letters = Producer(self._producer_settings)
        copied: list[ShareMessage] = []
        failures: list[Any] = []

        def on_copy(original: ShareMessage) -> Callable[[Any, Any], None]:
            def delivered(err: Any, _msg: Any) -> None:
                if err:
                    failures.append(err)
                else:
                    copied.append(original)

            return delivered

        for message in unhandled:
            self._dead_letters.produce(
                self._queue_topic,
                message.value(),
                message.key(),
                partition=message.partition() or 0,
                headers=message.headers() or [],
                on_delivery=on_copy(message),
            )
        unsent = self._dead_letters.flush(max(deadline - time.monotonic(), 0.0))
        # Only the copies acknowledged by now: the close's later flush may still report others,
        # but their originals go back to the broker with the consumer.
        put_back = list(copied)
        if put_back:
            self._settle(put_back, AcknowledgeType.ACCEPT)
            log.info(
                "QueueConsumer closing: %d messages it acquired and never handed out put back "
                "on %s, their redelivery count unchanged",
                len(put_back),
                self._queue_topic,
            )
        left = len(unhandled) - len(put_back)
        if left:
            cause = failures[0] if failures else f"{unsent} not acknowledged in time"
            log.warning(
                "QueueConsumer closing: %d of %d messages it acquired and never handed out "
                "could not be put back on %s (%s); the broker delivers them again, counting a "
                "redelivery",
                left,
                len(unhandled),
                self._queue_topic,
                cause,
            )
