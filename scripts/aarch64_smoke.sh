#!/usr/bin/env bash
# Tests the aarch64 wheel on aarch64: a Debian arm64 root (debootstrap, once, kept under
# $FERROKAFKA_ARM64_ROOT) run through qemu-user-static's binfmt_misc handler, the wheel installed
# with pip into a venv of that root's python3, then scripts/wheel_smoke.py round-trips messages
# with the broker at BOOTSTRAP on this machine's 127.0.0.1 (a chroot shares the network), and
# confluent-kafka on the host counts them.
# Usage: scripts/aarch64_smoke.sh WHEEL BOOTSTRAP   (as root: debootstrap, mount and chroot)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wheel=$(realpath "$1")
cd "$root"
bootstrap=$2
arm64=${FERROKAFKA_ARM64_ROOT:-/var/tmp/ferrokafka-arm64-bookworm}

step() { printf '\n==> %s\n' "$*" >&2; }

if ! command -v debootstrap >/dev/null || [ ! -x /usr/libexec/qemu-binfmt/aarch64-binfmt-P ]; then
    step "installing debootstrap and qemu-user-static"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap qemu-user-static >/dev/null
fi
# The kernel runs aarch64 binaries through qemu once binfmt_misc knows the handler; the F flag
# (Debian's qemu-aarch64.conf) makes that work inside the chroot too.
binfmt=/proc/sys/fs/binfmt_misc
[ -e $binfmt/register ] || mount -t binfmt_misc binfmt_misc $binfmt
[ -e $binfmt/qemu-aarch64 ] || grep -v '^#' /usr/lib/binfmt.d/qemu-aarch64.conf >$binfmt/register

if [ ! -x "$arm64/usr/bin/python3" ]; then
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    step "debootstrap arm64 bookworm from $mirror into $arm64 (once: a few minutes)"
    rm -rf "$arm64"
    debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv \
        bookworm "$arm64" "$mirror" >/dev/null
fi

work=$arm64/tmp/ferrokafka-smoke
cleanup() {
    umount "$arm64/proc" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mount -t proc proc "$arm64/proc"
rm -rf "$work" && mkdir -p "$work"
cp "$wheel" "$root/scripts/wheel_smoke.py" "$work/"

step "installing $(basename "$wheel") into a venv of the arm64 root's python3 (under qemu)"
chroot "$arm64" /usr/bin/python3 -m venv /tmp/ferrokafka-smoke/venv
# The wheel has no dependencies: nothing is fetched.
chroot "$arm64" /tmp/ferrokafka-smoke/venv/bin/python -m pip install -q --no-index \
    "/tmp/ferrokafka-smoke/$(basename "$wheel")"

topic=wheel-aarch64-$(date +%s%N)
step "round-trip on aarch64 with $bootstrap, topic $topic"
chroot "$arm64" /tmp/ferrokafka-smoke/venv/bin/python /tmp/ferrokafka-smoke/wheel_smoke.py \
    "$bootstrap" "$topic"

step "counting the records with confluent-kafka on the host"
.venv/bin/python scripts/wheel_smoke.py --count "$bootstrap" "$topic"
