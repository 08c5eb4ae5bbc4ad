"""Run by scripts/wheels.sh (not by the suite: setup.sh's development wheel is linked against this
machine's glibc): every wheel in dist/, x86_64 and aarch64, is
manylinux2014 by auditwheel's own reading: no glibc symbol version above 2.17 and no shared
library outside the policy (OpenSSL, libcurl, zlib and librdkafka are linked in statically).
ldd, run on each wheel's own architecture (the aarch64 one inside the arm64 Debian root that
scripts/aarch64_smoke.sh made, under qemu), confirms it from the loader's side."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import auditwheel.policy
import pytest

from tests.conftest import ROOT

ARM64_ROOT = Path(os.environ.get("FERROKAFKA_ARM64_ROOT", "/var/tmp/ferrokafka-arm64-bookworm"))


def wheels() -> list[Path]:
    found = sorted((ROOT / "dist").glob("ferrokafka-*.whl"))
    assert any(path.name.endswith("_x86_64.whl") for path in found), f"no x86_64 wheel: {found}"
    return found


def arch_of(wheel: Path) -> str:
    return "aarch64" if wheel.name.endswith("_aarch64.whl") else "x86_64"


def manylinux2014_libraries() -> frozenset[str]:
    """The shared libraries a manylinux2014 wheel may need from the system (auditwheel's policy)."""
    policies = json.loads(
        (Path(auditwheel.policy.__file__).parent / "manylinux-policy.json").read_text()
    )
    (policy,) = (p for p in policies if p["name"] == "manylinux_2_17")
    return frozenset(policy["lib_whitelist"])


def ldd(extension: Path, arch: str, tmp_path: Path) -> str:
    """ldd's listing of the extension, by the loader of its own architecture."""
    if arch == "x86_64":
        return subprocess.run(
            ["ldd", str(extension)], capture_output=True, text=True, check=True
        ).stdout
    inside = ARM64_ROOT / "tmp" / f"ferrokafka-ldd-{tmp_path.name}"
    inside.mkdir(parents=True)
    try:
        shutil.copy(extension, inside)
        return subprocess.run(
            ["chroot", str(ARM64_ROOT), "ldd", f"/tmp/{inside.name}/{extension.name}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        shutil.rmtree(inside)


@pytest.mark.parametrize("wheel", wheels(), ids=lambda path: path.name)
def test_wheel_is_manylinux2014_and_abi3(wheel: Path) -> None:
    arch = arch_of(wheel)
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


@pytest.mark.parametrize("wheel", wheels(), ids=lambda path: path.name)
def test_wheel_loads_only_manylinux2014_libraries(wheel: Path, tmp_path: Path) -> None:
    arch = arch_of(wheel)
    with zipfile.ZipFile(wheel) as archive:
        archive.extract("ferrokafka/_native.abi3.so", tmp_path)
    listing = ldd(tmp_path / "ferrokafka" / "_native.abi3.so", arch, tmp_path)
    # "soname => path": the libraries found through DT_NEEDED (the vDSO and the loader itself,
    # listed without "=>", are the kernel's and glibc's).
    needed = {line.split("=>")[0].strip() for line in listing.splitlines() if "=>" in line}
    assert needed, listing
    assert needed <= manylinux2014_libraries(), listing
