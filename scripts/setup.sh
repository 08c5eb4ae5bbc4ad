#!/usr/bin/env bash
# Sets up a development environment from nothing but the machine's toolchains: a .venv with the
# pinned tools and peers, and the release wheel of ferrokafka built by maturin and installed in it.
# Safe to run again: pip, cargo and the wheel build reuse their caches.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

step() { printf '\n==> %s\n' "$*" >&2; }

need() {
    command -v "$1" >/dev/null 2>&1 && return 0
    step "installing $2 (needed for $1)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}
need java openjdk-17-jre-headless
need mvn maven
need cmake cmake
need cargo cargo
# The bundled OpenSSL (rdkafka's ssl-vendored) is built by its Configure script: perl with IPC::Cmd
# (not in perl-base) and make. openssl makes the secured test broker's certificates.
need make make
perl -MIPC::Cmd -e 1 2>/dev/null || { step "installing perl (needed to build OpenSSL)"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq perl >/dev/null; }
need openssl openssl
need chromium chromium                # headless browser for the dashboard test (Playwright)
need chromedriver chromium-driver
# Karafka Web's own tracking contracts (Ruby, vendored under tests/interop) judge ferrokafka's
# reports; Debian's ruby is all they need (about 35 s to install).
need ruby ruby

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    step "creating .venv with $($python --version)"
    "$python" -m venv .venv
fi
step "installing pinned tools (requirements-dev.txt)"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements-dev.txt

# The development wheel: abi3 (CPython 3.10+), linked by this machine's toolchain (its glibc).
# The wheels users get, manylinux2014 through zig and aarch64, come from scripts/wheels.sh, which
# compiles the bundled C libraries again for those targets: too slow for every CI run.
step "building the release wheel (maturin build --release, abi3)"
rm -rf dist
.venv/bin/maturin build --release --out dist --interpreter .venv/bin/python
.venv/bin/python -m pip install -q --force-reinstall --no-deps dist/ferrokafka-*.whl
step "installed $(.venv/bin/python -c 'import ferrokafka; print("ferrokafka", ferrokafka.__version__)')"
