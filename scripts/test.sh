#!/usr/bin/env bash
# The whole test suite, from nothing but the machine's toolchains: set-up, Rust checks and tests,
# Python lint and type checks, then pytest with the real Kafka broker and a local Spark session.
# One test broker serves the run: started here with scripts/kafka.sh (unless KAFKA_BOOTSTRAP names
# one already) on FERROKAFKA_TEST_KAFKA_PORT (19092), the port pytest's fixtures would use, and
# exported as KAFKA_BOOTSTRAP, so the Rust engine tests and pytest both use it; stopped on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

step() { printf '\n==> %s\n' "$*" >&2; }

bash scripts/setup.sh

step "cargo fmt --check"
cargo fmt --all --check
# Clippy and the Rust tests use the release profile of the wheel setup.sh just built, so the
# bundled librdkafka and OpenSSL are compiled once, not once more for the debug profile.
step "cargo clippy -D warnings"
cargo clippy --release --workspace --all-targets -- -D warnings
step "the core stays pure: no pyo3 or rdkafka under ferrokafka-core"
for dep in pyo3 rdkafka; do
    if cargo tree -p ferrokafka-core -e normal --prefix none | grep -q "^$dep "; then
        echo "ferrokafka-core depends on $dep" >&2
        exit 1
    fi
done
if [[ -z ${KAFKA_BOOTSTRAP:-} ]]; then
    export FERROKAFKA_TEST_KAFKA_PORT=${FERROKAFKA_TEST_KAFKA_PORT:-19092}
    step "Kafka test broker on 127.0.0.1:$FERROKAFKA_TEST_KAFKA_PORT"
    trap 'KAFKA_PORT=$FERROKAFKA_TEST_KAFKA_PORT bash scripts/kafka.sh stop' EXIT
    KAFKA_BOOTSTRAP=$(KAFKA_PORT=$FERROKAFKA_TEST_KAFKA_PORT bash scripts/kafka.sh start | tail -n 1)
    export KAFKA_BOOTSTRAP
fi

step "cargo test (the engines against the broker; the binding's few Rust tests, its unsafe Arrow C export)"
cargo test --release --workspace --exclude ferrokafka-py
cargo test --release -p ferrokafka-py --lib
step "cargo bench --no-run"
cargo bench -p ferrokafka-benches --no-run

step "ruff"
.venv/bin/ruff check python tests benches
.venv/bin/ruff format --check python tests benches
step "mypy and stubtest"
.venv/bin/mypy
.venv/bin/python -m mypy.stubtest ferrokafka._native --allowlist stubtest-allowlist.txt

step "pytest (unit, real Kafka broker, local Spark)"
export PYSPARK_PYTHON="$root/.venv/bin/python"
# The slowest tests are listed, to keep the suite fast (aim: 15 minutes).
.venv/bin/python -m pytest --durations=25 "$@"
