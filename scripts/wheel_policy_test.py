"""Run by scripts/wheels.sh (not by the suite: setup.sh's development wheel is linked against this
machine's glibc): every wheel in dist/, x86_64 and aarch64, is
manylinux2014 by auditwheel's own reading: no glibc symbol version above 2.17 and no shared
library outside the policy (OpenSSL, libcurl, zlib and librdkafka are linked in statically)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def wheels() -> list[Path]:
    found = sorted((ROOT / "dist").glob("ferrokafka-*.whl"))
    assert any(path.name.endswith("_x86_64.whl") for path in found), f"no x86_64 wheel: {found}"
    return found


@pytest.mark.parametrize("wheel", wheels(), ids=lambda path: path.name)
def test_wheel_is_manylinux2014_and_abi3(wheel: Path) -> None:
    arch = "aarch64" if wheel.name.endswith("_aarch64.whl") else "x86_64"
    assert wheel.name.endswith(f"-cp310-abi3-manylinux2014_{arch}.manylinux_2_17_{arch}.whl")
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f'consistent with the following platform tag: "manylinux_2_17_{arch}"' in " ".join(
        show.split()
    ), show
