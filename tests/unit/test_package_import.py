"""What ``import ferrokafka`` loads: the package without asyncio, which only ``AsyncConsumer``
needs and which took about half of the import (the CLI's start, each Spark worker's); the class
is still there under both of its names."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


def test_importing_the_package_leaves_asyncio_to_the_async_consumer() -> None:
    probe = (
        "import sys, ferrokafka, ferrokafka.cli\n"
        "print('asyncio' in sys.modules)\n"
        "from ferrokafka import AsyncConsumer\n"
        "import ferrokafka.consumer as consumer\n"
        "print('asyncio' in sys.modules, consumer.AsyncConsumer is AsyncConsumer)\n"
        "print('AsyncConsumer' in dir(ferrokafka), 'AsyncConsumer' in dir(consumer))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert ran.stdout.split() == ["False", "True", "True", "True", "True"], ran.stdout


@pytest.mark.parametrize("module_name", ["ferrokafka", "ferrokafka.consumer"])
def test_a_name_the_package_lacks_raises_attribute_error_naming_it(module_name: str) -> None:
    module, missing = importlib.import_module(module_name), "NoSuchThing"
    with pytest.raises(AttributeError, match=f"{module_name}' has no attribute '{missing}"):
        getattr(module, missing)
