"""An instrumentation subscriber for tests: it keeps every event a client publishes and lets a
test wait for one, instead of sleeping."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Recorder:
    """Collects instrumentation events (a client's ``subscribe`` callback) and lets a test wait
    for one, or for a condition on them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._changed = threading.Condition()

    @classmethod
    def subscribed(cls, client: Any) -> Recorder:
        """A Recorder subscribed to ``client`` (anything with ``subscribe(callback)``)."""
        recorder = cls()
        client.subscribe(recorder)
        return recorder

    def __call__(self, name: str, payload: dict[str, Any]) -> None:
        with self._changed:
            self.events.append((name, payload))
            self._changed.notify_all()

    def named(self, name: str) -> list[dict[str, Any]]:
        with self._changed:
            return [payload for event, payload in self.events if event == name]

    def first(self, name: str, timeout: float = 15.0) -> dict[str, Any]:
        """The first `name` event, waiting up to `timeout` seconds for it."""
        with self._changed:
            assert self._changed.wait_for(lambda: self.named(name), timeout), f"no {name} event"
            return self.named(name)[0]

    def wait_for(self, predicate: Callable[[], object], what: str, timeout: float = 30.0) -> None:
        with self._changed:
            assert self._changed.wait_for(predicate, timeout), f"timed out waiting for {what}"
