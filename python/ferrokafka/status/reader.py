"""The status reader: tails the reports, errors and scheduler state topics without a consumer
group into a :class:`~ferrokafka.status.view.StatusView`."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence

from ferrokafka._config import ConfigValue
from ferrokafka._native import Client
from ferrokafka._validation import check_config_mapping, checked_seconds
from ferrokafka.consumer import Consumer, TopicPartition
from ferrokafka.exceptions import FerrokafkaError
from ferrokafka.scheduling import STATES_POSTFIX
from ferrokafka.status.view import StatusSnapshot, StatusView
from ferrokafka.tracking import DEFAULT_ERRORS_TOPIC, DEFAULT_REPORTS_TOPIC, REPORT_TTL

__all__ = ["StatusReader"]

log = logging.getLogger("ferrokafka.status")


class StatusReader:
    """Tails the tracking topics into a :class:`StatusView` on background threads.

    It reads without a consumer group (it commits nothing and joins no group): each partition
    from the beginning once, then only new records, keeping its position. Every
    ``discover_interval`` seconds it looks for new partitions and, unless ``states_topics`` is
    given, for new topics ending in ``_states``, and adds them without re-reading the others. A
    topic that does not exist yet is simply empty until it appears (:attr:`missing_topics`
    names it meanwhile).

    Args:
        config: librdkafka settings (``bootstrap.servers``, security, ...); no ``group.id``.
        reports_topic, errors_topic: where the reporters write.
        states_topics: scheduler state topics to read; ``None`` [default] reads every topic
            whose name ends in ``_states``.
        discover_interval: seconds between looks for new topics and partitions [5].
        ttl, max_errors, history_points, forget_after: see :class:`StatusView`.

    Example:
        >>> from ferrokafka.status import StatusReader
        >>> reader = StatusReader({"bootstrap.servers": "127.0.0.1:9092"}, ttl=60.0, **topics)
        >>> reader.start() is reader
        True
        >>> reader.wait_caught_up(timeout=30.0)
        True
        >>> reader.snapshot().totals.alive
        2
        >>> reader.stop()
    """

    def __init__(
        self,
        config: Mapping[str, ConfigValue],
        *,
        reports_topic: str = DEFAULT_REPORTS_TOPIC,
        errors_topic: str = DEFAULT_ERRORS_TOPIC,
        states_topics: Sequence[str] | None = None,
        ttl: float = REPORT_TTL,
        max_errors: int = 100,
        history_points: int = 360,
        forget_after: float | None = 3600.0,
        discover_interval: float = 5.0,
    ) -> None:
        check_config_mapping(config)
        if "group.id" in config:
            raise ValueError(
                "the status reader reads without a consumer group and commits nothing: "
                "leave 'group.id' out of its config"
            )
        if isinstance(states_topics, str):
            raise TypeError("states_topics must be a list of topic names, not a single str")
        self.view = StatusView(
            reports_topic=reports_topic,
            errors_topic=errors_topic,
            ttl=ttl,
            max_errors=max_errors,
            history_points=history_points,
            forget_after=forget_after,
        )
        self._config = dict(config)
        self._states_topics = None if states_topics is None else list(states_topics)
        self._discover_interval = checked_seconds(
            "discover_interval", discover_interval, positive=True
        )
        self._client: Client | None = None
        self._assigned: set[tuple[str, int]] = set()
        self._missing: list[str] = []
        self._behind: set[tuple[str, int]] = set()
        self._caught_up = threading.Condition()
        # The running tail, in a box of its own: a reader dropped without stop() is stopped by
        # its finalizer, which must not hold the reader (nor may the tail's callbacks or the
        # discovery thread: each kept a dropped reader running for good, 16 threads apiece).
        self._tail = _Tail()
        weakref.finalize(self, _stop_tail, self._tail).atexit = False
        self._thread: threading.Thread | None = None
        self._lifecycle = threading.Lock()
        self._refreshing = threading.Lock()

    def start(self, timeout: float | None = None) -> StatusReader:
        """Look up the topics, start reading them, and keep looking for new ones; returns once
        the topics are known (``self``, for chaining). Starting twice is a no-op.

        Args:
            timeout: seconds the first look-up may take [``discover_interval`` + 10]; when no
                broker answered by then it raises :class:`~ferrokafka.KafkaTimeoutError` (or
                the :class:`~ferrokafka.KafkaError` saying why the broker refused).

        Example:
            >>> config = {"bootstrap.servers": "127.0.0.1:9092"}
            >>> reader = StatusReader(config, **topics).start()
            >>> reader.missing_topics
            []
        """
        with self._lifecycle:
            if self._thread is not None:
                return self
            # Each run has its own stop event: a look-up of the last run still waiting for a
            # hung broker (stop() does not wait for it) ends that run's thread, not this one's.
            self._tail.stopping = threading.Event()
            self._client = Client(self._config)
            self._reassign(self._wanted_partitions(self._client, timeout))
            self._thread = threading.Thread(
                target=_discover_forever,
                args=(weakref.ref(self), self._tail.stopping, self._discover_interval),
                name="ferrokafka-status-discovery",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading; the view keeps what was read. Calling it again is a no-op.

        Example:
            >>> reader.stop()
        """
        with self._lifecycle:
            self._tail.stopping.set()
            self._thread = None
        # The discovery thread is not waited for: its look-up may wait for a hung broker
        # (``discover_interval`` + 10 s), and once it ends it changes nothing (see refresh).
        with self._refreshing:
            self._replace_consumer(None)
            self._assigned = set()

    def __enter__(self) -> StatusReader:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def snapshot(self, now: float | None = None) -> StatusSnapshot:
        """The view now (see :meth:`StatusView.snapshot`).

        Example:
            >>> reader.snapshot().to_dict()["totals"]["alive"]
            2
        """
        return self.view.snapshot(now)

    @property
    def missing_topics(self) -> list[str]:
        """The topics this reader was told to read (reports, errors, the ``states_topics``
        given) that did not exist at the last look-up, sorted.

        Example:
            >>> reader = StatusReader(config, **{**topics, "reports_topic": "typo"}).start()
            >>> reader.missing_topics
            ['typo']
            >>> reader.stop()
        """
        return list(self._missing)

    def wait_caught_up(self, timeout: float) -> bool:
        """Wait until every partition read so far was read to the end it had when it was
        added; False if that took longer than ``timeout`` seconds.

        Example:
            >>> reader.wait_caught_up(timeout=30.0)
            True
        """
        deadline = time.monotonic() + timeout
        with self._caught_up:
            while self._behind:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._caught_up.wait(min(left, 0.5))
        return True

    def refresh(self) -> bool:
        """Look for new topics and partitions now and start reading them; True when the set
        of partitions read changed. :meth:`start` calls it, then every ``discover_interval``.

        Example:
            >>> reader.refresh()
            False
        """
        client = self._client
        if client is None:
            raise RuntimeError("the status reader is not started; call start() first")
        stopping = self._tail.stopping
        wanted = self._wanted_partitions(client, None)
        with self._refreshing:  # the discovery thread and a caller may refresh at once
            if stopping.is_set():  # stopped during the look-up: read nothing more
                return False
            return self._reassign(wanted)

    def _reassign(self, wanted: set[tuple[str, int]]) -> bool:
        if wanted == self._assigned:
            return False
        log.info(
            "reading %d partitions of %s",
            len(wanted),
            ", ".join(sorted({topic for topic, _ in wanted})) or "no topics",
        )
        # Stop the old tail first: its handlers and caught-up callbacks are over when stop()
        # returns, so the positions are final and no late callback touches the new set.
        self._replace_consumer(None)
        self._assigned = set()  # if starting the new tail fails, the next refresh retries
        positions = self.view.positions()
        with self._caught_up:
            self._behind = set(wanted)
            self.view.set_caught_up(not wanted)
            self._caught_up.notify_all()
        if wanted:
            subscriptions = [
                TopicPartition(
                    topic, partition, offset=positions.get((topic, partition), "beginning")
                )
                for topic, partition in sorted(wanted)
            ]
            self._replace_consumer(
                Consumer(
                    self._config,
                    subscriptions,
                    self.view.add_messages,
                    max_batch_size=500,
                    drain=1.0,
                    on_caught_up=_weakly(self._partition_caught_up),
                )
            )
        self._assigned = wanted
        return True

    def _wanted_partitions(self, client: Client, timeout: float | None) -> set[tuple[str, int]]:
        metadata = client.list_topics(
            timeout=self._discover_interval + 10.0 if timeout is None else timeout
        )
        names = {self.view.reports_topic, self.view.errors_topic, *(self._states_topics or [])}
        self._missing = sorted(names - metadata.topics.keys())
        if self._states_topics is None:
            names.update(n for n in metadata.topics if n.endswith(STATES_POSTFIX))
        return {
            (name, partition.id)
            for name in names
            if (topic := metadata.topics.get(name)) is not None
            for partition in topic.partitions
        }

    def _replace_consumer(self, consumer: Consumer | None) -> None:
        old, self._tail.consumer = self._tail.consumer, consumer
        if old is not None:
            old.stop()
        if consumer is not None:
            consumer.start()

    def _partition_caught_up(self, topic: str, partition: int, offset: int) -> None:
        with self._caught_up:
            self._behind.discard((topic, partition))
            if not self._behind:
                self.view.set_caught_up(True)
                log.debug(
                    "caught up with every tracking partition (last: %s[%d])", topic, partition
                )
            self._caught_up.notify_all()


class _Tail:
    """The consumer a reader reads the topics with while it runs, and the run's stop event."""

    consumer: Consumer | None = None

    def __init__(self) -> None:
        self.stopping = threading.Event()


def _stop_tail(tail: _Tail) -> None:
    """A reader collected without stop(): its discovery thread ends and its tail stops."""
    tail.stopping.set()
    if tail.consumer is not None:
        tail.consumer.stop()


def _weakly(method: Callable[[str, int, int], None]) -> Callable[[str, int, int], None]:
    """``method`` of an object the caller must not keep alive; nothing once it is collected."""
    held = weakref.WeakMethod(method)

    def call(topic: str, partition: int, offset: int) -> None:
        if (bound := held()) is not None:
            bound(topic, partition, offset)

    return call


def _discover_forever(
    reader: weakref.ref[StatusReader], stopping: threading.Event, interval: float
) -> None:
    """Refreshes the reader every ``interval`` until it stops or is collected."""
    while not stopping.wait(interval):
        alive = reader()
        if alive is None:
            return
        try:
            alive.refresh()
        except FerrokafkaError as error:
            log.warning("looking for new tracking topics failed (will retry): %s", error)
        del alive
