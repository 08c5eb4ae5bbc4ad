#!/usr/bin/env bash
# Builds every release artefact into dist/ and smoke-tests each one against a real broker:
#   - ferrokafka-<v>-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl (zig)
#   - ferrokafka-<v>-cp310-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl (zig, cross)
#   - ferrokafka-<v>.tar.gz                                  (maturin sdist)
# Both wheels pass `auditwheel show` as manylinux2014 and ldd, run on each wheel's architecture,
# lists only the policy's libraries (scripts/wheel_policy_test.py; the aarch64 ldd runs in the
# arm64 root, so after its smoke test); the x86_64 wheel is installed into a fresh venv of every
# pyenv CPython 3.10+, the aarch64 one into an arm64 Debian root under qemu
# (scripts/aarch64_smoke.sh), and the sdist is built by pip in a clean venv; each round-trips
# messages (scripts/wheel_smoke.py), counted by confluent-kafka.
# Slow (compiles librdkafka and OpenSSL twice more, for aarch64 and inside pip): not run by
# .ci/run, which checks setup.sh's abi3 wheel (native glibc) on the oldest and newest CPython
# (tests/packaging).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
started=$(date +%s)

# Each step is stamped with the wall-clock time, so the log shows how long every step took.
step() { printf '\n==> [%s] %s\n' "$(date +%T)" "$*" >&2; }

step "scripts/setup.sh (the development venv and wheel)"
bash scripts/setup.sh
export PATH="$root/.venv/bin:$PATH" # maturin --zig runs `python -m ziglang`

step "x86_64 wheel (zig, manylinux2014), in place of setup.sh's development wheel"
rm -f dist/ferrokafka-*.whl
.venv/bin/maturin build --release --zig --compatibility manylinux2014 --out dist \
    --interpreter .venv/bin/python

step "aarch64 wheel (zig, manylinux2014)"
rustup target add aarch64-unknown-linux-gnu
.venv/bin/maturin build --release --zig --compatibility manylinux2014 \
    --target aarch64-unknown-linux-gnu --out dist

step "sdist"
.venv/bin/maturin sdist --out dist
ls -l dist

export KAFKA_PORT=${KAFKA_PORT:-19692}
bootstrap=$(bash scripts/kafka.sh start | tail -n 1)
trap 'bash scripts/kafka.sh stop' EXIT

step "the aarch64 wheel on aarch64 (qemu)"
bash scripts/aarch64_smoke.sh dist/ferrokafka-*_aarch64.whl "$bootstrap"

step "both wheels' policy (auditwheel, ldd); the x86_64 wheel on every CPython 3.10+ (fresh venvs)"
KAFKA_BOOTSTRAP=$bootstrap FERROKAFKA_WHEEL_PYTHONS=all \
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/packaging scripts/wheel_policy_test.py

step "the sdist, built by pip in a clean venv"
sdist_venv=$(mktemp -d)/venv
.venv/bin/python -m venv "$sdist_venv"
"$sdist_venv/bin/python" -m pip install -q --upgrade pip
"$sdist_venv/bin/python" -m pip install dist/ferrokafka-*.tar.gz
topic=wheel-sdist-$(date +%s%N)
"$sdist_venv/bin/python" scripts/wheel_smoke.py "$bootstrap" "$topic"
.venv/bin/python scripts/wheel_smoke.py --count "$bootstrap" "$topic"
rm -rf "$(dirname "$sdist_venv")"

step "all artefacts built and smoke-tested in $(($(date +%s) - started)) s"
ls -l dist
