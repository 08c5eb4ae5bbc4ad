"""Runs a call in a forked child, for the tests that a native object refuses use after fork."""

from __future__ import annotations

import os
from collections.abc import Callable

from ferrokafka import FerrokafkaError


def outcome_in_child(use: Callable[[], object]) -> str:
    """What ``use()`` did in a forked child: a FerrokafkaError's message, another exception's
    repr, or "no error"."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            use()
            outcome = b"no error"
        except FerrokafkaError as err:
            outcome = str(err).encode()
        except BaseException as err:
            outcome = repr(err).encode()
        os.write(write_end, outcome)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        reported = pipe.read().decode()
    os.waitpid(pid, 0)
    return reported
