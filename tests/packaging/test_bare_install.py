"""``pip install ferrokafka`` without extras: every public module imports, or says which extra it
needs, and the share-group backend names the ``share`` extra when it is chosen.

The wheel setup.sh built into ``dist/`` is installed with ``--no-deps`` into a fresh venv of the
base interpreter of the test venv, so no optional package (confluent-kafka, pyspark, pyarrow,
pandas, starlette, uvicorn) can be found there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT, TopicFactory

pytestmark = pytest.mark.kafka

OPTIONAL = ("confluent_kafka", "pyspark", "pyarrow", "pandas", "starlette", "uvicorn")
# The modules that cannot work without their extra, and the extra each names.
NEEDS_EXTRA = {
    "ferrokafka.arrow": "spark",
    "ferrokafka.spark": "spark",
    "ferrokafka.dashboard": "dashboard",
    "ferrokafka.share_queue": "share",
}

PROBE = textwrap.dedent(
    """
    import importlib, importlib.util, json, pkgutil, sys

    import ferrokafka
    from ferrokafka.redelivery import QueueConsumer

    optional = sys.argv[2].split(",")
    imports = {}
    for info in pkgutil.walk_packages(ferrokafka.__path__, "ferrokafka."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        try:
            importlib.import_module(info.name)
            imports[info.name] = None
        except ImportError as e:
            imports[info.name] = f"{type(e).__name__}: {e}"
    config = {"bootstrap.servers": sys.argv[1]}
    try:
        QueueConsumer(config, "jobs", "jobs-markers", backend="share")
        share = None
    except ImportError as e:
        share = f"{type(e).__name__}: {e}"
    with QueueConsumer(config, sys.argv[3], sys.argv[4], backend="auto") as queue:
        auto = queue.backend
    print(json.dumps({
        "present": [m for m in optional if importlib.util.find_spec(m) is not None],
        "imports": imports,
        "share": share,
        "auto": auto,
    }))
    """
)


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv's python with only the ferrokafka wheel installed."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    base = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base), "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    dist = ROOT / "dist"
    assert any(dist.glob("ferrokafka-*.whl")), f"no wheel in {dist}: run scripts/setup.sh"
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--find-links",
            str(dist),
            "ferrokafka",
        ],
        check=True,
    )
    return python


def test_every_module_imports_or_names_its_extra_without_any_extra(
    bare_python: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    topics = (topic_factory(), topic_factory())  # the queue and markers topics of 'auto'
    probed = subprocess.run(
        [str(bare_python), "-c", PROBE, kafka_bootstrap, ",".join(OPTIONAL), *topics],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert probed.returncode == 0, probed.stderr
    found = json.loads(probed.stdout.strip().splitlines()[-1])
    assert found["present"] == [], "the bare venv must hold no optional package"
    imports: dict[str, str | None] = found["imports"]
    assert "ferrokafka.redelivery" in imports
    assert "ferrokafka.status" in imports
    failed = {name: error for name, error in imports.items() if error is not None}
    assert set(failed) == set(NEEDS_EXTRA), failed
    for name, extra in NEEDS_EXTRA.items():
        assert failed[name].startswith("ImportError: "), failed[name]
        assert f"pip install 'ferrokafka[{extra}]'" in failed[name], failed[name]
    share = found["share"]
    assert share is not None, "backend='share' started without confluent-kafka"
    assert "confluent_kafka" in share
    assert "pip install 'ferrokafka[share]'" in share
    assert found["auto"] == "markers"
