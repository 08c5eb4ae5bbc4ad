"""Scheduled (delayed) messages, wire-compatible with Karafka Pro's scheduled messages.

A *proxy* message on a compacted schedules topic says "produce this message to that topic at that
epoch"; the :class:`Scheduler` daemon (this one, or a Ruby Karafka one sharing the topic) replays
the schedules topic, dispatches each due message to its target, and writes a tombstone for the
proxy. :func:`cancel` removes a pending schedule.

Example:
    >>> import threading, time
    >>> from ferrokafka import Client, Consumer, NewTopic
    >>> from ferrokafka.scheduling import Scheduler, create_topics, schedule_message
    >>> client = Client({"bootstrap.servers": "127.0.0.1:9092"})
    >>> create_topics(client, "schedules")
    ['schedules', 'schedules_states']
    >>> client.create_topics([NewTopic("reminders", 1)])
    ['reminders']
    >>> proxy = schedule_message(
    ...     client,
    ...     {"topic": "reminders", "payload": b"call back", "key": "user-7"},
    ...     int(time.time()) + 2,
    ...     {"topic": "schedules"},
    ... )
    >>> reminded = threading.Event()
    >>> def remind(batch) -> None:
    ...     print(batch.keys(), batch.values())
    ...     reminded.set()
    >>> reminders = Consumer(
    ...     {"bootstrap.servers": "127.0.0.1:9092", "group.id": "reminders"}, ["reminders"], remind
    ... )
    >>> with Scheduler({"bootstrap.servers": "127.0.0.1:9092"}, ["schedules"]), reminders:
    ...     reminded.wait(timeout=30.0)  # the reminder is dispatched 2 s after it was scheduled
    [b'user-7'] [b'call back']
    True
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ferrokafka import _daemon, _exit
from ferrokafka._config import Config
from ferrokafka._native import (
    WATERDROP_MAX_PAYLOAD_SIZE,
    Client,
    NewTopic,
    ProxyMessage,
    _RawScheduler,
    cancel_proxy,
    schedule_proxy,
)
from ferrokafka.producer import AsyncProducer
from ferrokafka.tracking import Reporter, SourceSample

__all__ = [
    "DEFAULT_GROUP_ID",
    "SCHEDULES_TOPIC_CONFIG",
    "STATES_POSTFIX",
    "ProxyMessage",
    "Scheduler",
    "cancel",
    "cancel_message",
    "create_topics",
    "schedule",
    "schedule_message",
    "send_proxy",
]

log = logging.getLogger("ferrokafka.scheduling")

DEFAULT_GROUP_ID = "karafka_scheduled_messages"
"""Karafka's consumer group for scheduler daemons: ferrokafka and Karafka daemons on one
schedules topic share its partitions instead of each dispatching everything."""

STATES_POSTFIX = "_states"
"""Appended to a schedules topic's name to name its states topic, as Karafka does."""

SCHEDULES_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.1",
    "segment.ms": "3600000",
    "segment.bytes": "52428800",
    "delete.retention.ms": "3600000",
}
"""Topic settings Karafka uses for the schedules and states topics."""

# Karafka's names for the proxy builders.
schedule = schedule_proxy
cancel = cancel_proxy

Sender = Client | AsyncProducer
"""Something that can send a proxy: a :class:`~ferrokafka.Client` (waits for the broker's
acknowledgement) or an :class:`~ferrokafka.AsyncProducer` (queues it)."""


def send_proxy(sender: Sender, proxy: ProxyMessage, timeout: float = 30.0) -> None:
    """Produce a proxy built by :func:`schedule` or :func:`cancel` to its schedules topic.

    Example:
        >>> send_proxy(client, cancel("orders-1", {"topic": "schedules"}))
    """
    # Only the blocking client waits for the acknowledgement, so only it takes the timeout.
    produce = (
        sender.produce
        if isinstance(sender, AsyncProducer)
        else functools.partial(sender.produce, timeout=timeout)
    )
    produce(
        topic=proxy.topic,
        value=proxy.value,
        key=proxy.key,
        partition=proxy.partition,
        partition_key=proxy.partition_key,
        headers=proxy.headers,
    )


def schedule_message(
    sender: Sender,
    message: Mapping[str, Any],
    epoch: int | float,
    envelope: Mapping[str, Any],
    *,
    max_payload_size: int = WATERDROP_MAX_PAYLOAD_SIZE,
) -> ProxyMessage:
    """Build the proxy for ``message`` at ``epoch`` (Unix seconds) and send it; returns it.
    A payload over ``max_payload_size`` bytes (WaterDrop's default, 1,000,012) raises
    :class:`ferrokafka.ScheduleError`. The proxy's ``partition_key`` is hashed by the sender's
    ``partition_key_hashing`` (as WaterDrop by default).

    Example: see the module docstring.
    """
    limit = max_payload_size
    proxy = schedule_proxy(message, epoch, envelope, max_payload_size=limit)  # type: ignore[arg-type]
    send_proxy(sender, proxy)
    return proxy


def cancel_message(sender: Sender, key: str, envelope: Mapping[str, Any]) -> ProxyMessage:
    """Build the proxy that cancels the schedule with proxy ``key`` and send it; returns it.

    Example:
        >>> cancel_message(client, "orders-1", {"topic": "schedules"})
        ProxyMessage(topic="schedules", key="orders-1", partition=None, value_len=0, headers=2)
    """
    proxy = cancel_proxy(key, envelope)  # type: ignore[arg-type]
    send_proxy(sender, proxy)
    return proxy


def create_topics(
    client: Client,
    schedules_topic: str,
    num_partitions: int = 5,
    replication_factor: int = -1,
    states_postfix: str = STATES_POSTFIX,
    timeout: float = 30.0,
) -> list[str]:
    """Create a schedules topic and its states topic with Karafka's settings (compacted, dirty
    ratio 0.1, 1 hour and 50 MiB segments, 1 hour delete retention), the same partition count
    for both. Topics
    that exist are left alone; returns the names created.

    Example:
        >>> create_topics(client, "schedules", num_partitions=3)
        ['schedules', 'schedules_states']
    """
    topics = [
        NewTopic(name, num_partitions, replication_factor, SCHEDULES_TOPIC_CONFIG)
        for name in (schedules_topic, f"{schedules_topic}{states_postfix}")
    ]
    return client.create_topics(topics, timeout=timeout, exist_ok=True)


class Scheduler(_exit.StopsAtExit):
    """The scheduler daemon: dispatches due schedules from one or more schedules topics.

    Daemons with the same ``group_id`` split the schedules partitions between them; a partition
    moves to another daemon when its owner stops or dies. Each partition is replayed from its
    earliest offset (state ``loading``), then due schedules are dispatched as they come due, with
    sub-second lateness (state ``loaded``). State reports (zlib JSON) go to
    ``<topic>_states`` at most every ``state_interval`` seconds, at once when a partition is
    loaded and on stop.

    With ``transactional.id`` in ``config`` each dispatched chunk (targets plus tombstones) is one
    transaction and a restart never dispatches a schedule twice; without it, delivery is
    at-least-once (a crash between a target and its tombstone re-dispatches that schedule).
    Bad records are logged, counted (``skipped`` in :meth:`status` and the state report) and
    skipped. A tombstone is written only once its target was acknowledged. A schedule whose
    target the broker refuses for good (too large, illegal or unauthorised topic) is logged with
    its key, counted (``failed``), copied to ``dead_letter_topic`` when set, and never holds up
    the schedules behind it; transient failures are retried with backoff. Offsets are committed
    every second while running, so the group's lag is meaningful.

    Failover: a daemon that dies leaves its partitions idle for the group session timeout
    (``session.timeout.ms``, 10 s by default for ferrokafka daemons); with ``instance_id``
    (static membership) a daemon restarted under the same id takes them back at once.

    Args:
        config: librdkafka configuration (``bootstrap.servers``, ``transactional.id``, ...).
        schedules_topics: the schedules topics to serve.
        group_id: consumer group of the daemons sharing these topics; Karafka's by default,
            so ferrokafka and Karafka daemons split the partitions [DEFAULT_GROUP_ID].
        flush_batch_size: most messages (targets plus tombstones) per dispatched chunk [1000].
        state_interval: least seconds between periodic state reports of a partition [5, Karafka's
            tick].
        states_postfix: states topic name suffix ["_states"].
        horizon: seconds ahead for which schedules keep their payload in memory; later ones are
            read back from the topic when they come within it [3600].
        dead_letter_topic: topic that receives a copy of each schedule whose target is refused
            for good (header ``schedule_dead_letter_reason``); None: only counted and logged,
            the proxy stays on the schedules topic [None].
        partition_key_hashing: how a target's ``partition_key`` chooses its partition:
            ``"waterdrop"`` as WaterDrop hashes it, ``"bytes"`` every byte ["waterdrop"].
        instance_id: ``group.instance.id`` (static membership): a restart under the same id
            takes this daemon's partitions back at once; unique per daemon [None].
        reporter: a :class:`ferrokafka.tracking.Reporter` that reports this daemon: its
            consumer group's state and per partition librdkafka's offsets, with the schedules
            pending as ``lag`` [None].

    Example:
        >>> import time
        >>> create_topics(client, "schedules", num_partitions=2)
        ['schedules', 'schedules_states']
        >>> scheduler = Scheduler({"bootstrap.servers": "127.0.0.1:9092"}, ["schedules"])
        >>> while len([row for row in scheduler.status() if row["state"] == "loaded"]) < 2:
        ...     time.sleep(0.1)  # the group assigns the partitions; each is replayed
        >>> [(row["partition"], row["state"]) for row in scheduler.status()]
        [(0, 'loaded'), (1, 'loaded')]
        >>> scheduler.stop()
        True
    """

    def __init__(
        self,
        config: Config,
        schedules_topics: Sequence[str],
        *,
        group_id: str = DEFAULT_GROUP_ID,
        flush_batch_size: int = 1000,
        state_interval: float = 5.0,
        states_postfix: str = STATES_POSTFIX,
        horizon: float = 3600.0,
        dead_letter_topic: str | None = None,
        partition_key_hashing: Literal["waterdrop", "bytes"] = "waterdrop",
        instance_id: str | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        config = dict(config)
        if instance_id is not None:
            if not instance_id:
                raise ValueError("instance_id must not be empty (leave it None for none)")
            config["group.instance.id"] = instance_id
        self._reporter = reporter
        if reporter is not None:
            config = reporter.statistics_config(config)
        self._raw = _RawScheduler(
            config,
            schedules_topics=schedules_topics,
            group_id=group_id,
            flush_batch_size=flush_batch_size,
            state_interval=state_interval,
            states_postfix=states_postfix,
            horizon=horizon,
            dead_letter_topic=dead_letter_topic,
            partition_key_hashing=partition_key_hashing,
        )
        if reporter is not None:
            reporter.track(self)
        self._ended = False
        _exit.register(self)

    def run(self) -> None:
        """Block until :meth:`stop` is called from another thread (or the process is
        interrupted, in which case the daemon is stopped cleanly before the exception leaves).

        Raises:
            KafkaError: the daemon ended on its own: its connection was refused before it ever
                worked (a wrong password, an untrusted CA, a token that cannot be had), with
                librdkafka's description of the cause, as soon as librdkafka reports it.
        """
        _daemon.refuse_after_end(self, self._ended)
        try:
            self._raw.wait()
        except BaseException:
            self.stop()
            raise
        finally:
            self._ended = True

    def request_stop(self) -> None:
        """Ask the daemon to stop and return at once (safe from a signal handler)."""
        self._raw.request_stop()

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop: final state reports, offsets committed, group left. True once stopped."""
        self._ended = True
        return _daemon.stop(self, self._raw, self._reporter, timeout)

    def status(self) -> list[dict[str, Any]]:
        """Per assigned partition: topic, partition, state (loading, loaded, stopped, or
        blocked: a record with a newer schema version stopped the partition until the daemon is
        upgraded), pending, dispatched, skipped, failed (targets refused for good), applied
        (records read), broker (librdkafka's latest statistics of the partition, a dict of
        :class:`ferrokafka._native.BrokerOffsets` fields, or None before the first)."""
        return [row.as_dict() for row in self._raw.status()]

    def report_sample(self) -> SourceSample:
        """This daemon's part of a process report, built by the engine: librdkafka's
        statistics of its group consumer, with pending schedules as ``lag``."""
        return self._raw.report_sample()

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
