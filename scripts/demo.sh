#!/usr/bin/env bash
# The one command for a fresh machine: set everything up, start the local Kafka broker, and run
# `ferrokafka demo` against it. The broker keeps running afterwards; stop it with
# `scripts/kafka.sh stop`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
bootstrap=$(bash scripts/kafka.sh start)
.venv/bin/ferrokafka demo --bootstrap-servers "$bootstrap"
printf '\nThe broker is still running at %s (stop it with: scripts/kafka.sh stop)\n' "$bootstrap" >&2
