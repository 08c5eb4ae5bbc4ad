"""The one x86_64 wheel setup.sh built (abi3, manylinux2014) installs with pip into fresh venvs of
the oldest and the newest CPython on this machine (pyenv's), imports every public module there
and round-trips messages with the test broker (scripts/wheel_smoke.py); an independent client
(confluent-kafka) then counts what it wrote. scripts/wheels.sh runs it on every CPython found
(FERROKAFKA_WHEEL_PYTHONS=all)."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, read_messages

PYENV = Path.home() / ".pyenv" / "versions"
SMOKE = ROOT / "scripts" / "wheel_smoke.py"


def cpythons() -> list[Path]:
    """pyenv's CPython 3.10+ interpreters, oldest first."""
    found = sorted(
        (tuple(map(int, match.groups())), path / "bin" / "python")
        for path in PYENV.glob("3.*")
        if (match := re.fullmatch(r"3\.(\d+)\.(\d+)", path.name)) and int(match[1]) >= 10
    )
    assert found, f"no CPython 3.10+ under {PYENV}"
    return [python for _, python in found]


def chosen_pythons() -> list[Path]:
    found = cpythons()
    if os.environ.get("FERROKAFKA_WHEEL_PYTHONS") == "all":
        return found
    return sorted({found[0], found[-1]})


def the_abi3_wheel() -> Path:
    wheels = sorted((ROOT / "dist").glob("ferrokafka-*-cp310-abi3-manylinux*_x86_64.whl"))
    assert len(wheels) == 1, f"expected the one abi3 x86_64 wheel in dist/, found {wheels}"
    return wheels[0]


@pytest.mark.kafka
@pytest.mark.timeout(300)
@pytest.mark.parametrize("python", chosen_pythons(), ids=lambda path: path.parent.parent.name)
def test_abi3_wheel_installs_imports_and_round_trips(
    python: Path, kafka_bootstrap: str, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
    # The wheel alone: every module imports without the extras (confluent-kafka included).
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(the_abi3_wheel())],
        check=True,
    )
    topic = f"test-wheel-{python.parent.parent.name}-{uuid.uuid4().hex[:8]}"
    run = subprocess.run(
        [str(venv / "bin" / "python"), str(SMOKE), kafka_bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    version = python.parent.parent.name
    assert f"ok: Python {version} on x86_64" in run.stdout, run.stdout
    assert "_native.abi3.so" in run.stdout, run.stdout
    assert [m.value() for m in read_messages(kafka_bootstrap, topic, partitions=1)] == [
        b"v0",
        b"v1",
        b"v2",
        b"v3",
        b"v4",
    ]
