#!/usr/bin/env bash
# The one command for a fresh machine: set everything up, start the local Kafka broker, and run
# `ferrokafka demo` against it, then the small Spark job `ferrokafka spark-demo` (skip it with
# FERROKAFKA_DEMO_SPARK=0). The broker keeps running afterwards; stop it with
# `scripts/kafka.sh stop`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
bootstrap=$(bash scripts/kafka.sh start)
.venv/bin/ferrokafka demo --bootstrap-servers "$bootstrap"
if [ "${FERROKAFKA_DEMO_SPARK:-1}" != 0 ]; then
    PYSPARK_PYTHON="$root/.venv/bin/python" .venv/bin/ferrokafka spark-demo --bootstrap-servers "$bootstrap"
fi
printf '\nThe broker is still running at %s (stop it with: scripts/kafka.sh stop)\n' "$bootstrap" >&2
