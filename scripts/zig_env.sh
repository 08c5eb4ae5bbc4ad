# Sourced by scripts/test.sh after setup.sh: exports the compiler environment that
# `maturin build --zig` gave the wheel's x86_64 build (zig's C compiler, archiver and linker,
# targeting glibc 2.17, through the wrappers maturin wrote for this checkout's .venv), so that
# `cargo clippy/test --release --target "$ZIG_TARGET"` reuse the librdkafka, OpenSSL, libcurl and
# zlib that build compiled instead of compiling them again with the system's gcc.
# shellcheck shell=bash
ZIG_TARGET=x86_64-unknown-linux-gnu
zig_wrappers=$(dirname "$(grep -l "\"$PWD/.venv/bin/maturin\" zig cc" \
    "$HOME"/.cache/cargo-zigbuild/*/wrappers/*/zigcc-$ZIG_TARGET.2.17-*.sh | head -n 1)")
export ZIG_TARGET
export CC_x86_64_unknown_linux_gnu=$(echo "$zig_wrappers"/zigcc-$ZIG_TARGET.2.17-*.sh)
export CXX_x86_64_unknown_linux_gnu=$(echo "$zig_wrappers"/zigcxx-$ZIG_TARGET.2.17-*.sh)
export AR_x86_64_unknown_linux_gnu=$zig_wrappers/ar
export RANLIB_x86_64_unknown_linux_gnu=$zig_wrappers/zigranlib.sh
export CMAKE_TOOLCHAIN_FILE_x86_64_unknown_linux_gnu=$zig_wrappers/cmake/$ZIG_TARGET-toolchain.cmake
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER=$CC_x86_64_unknown_linux_gnu
unset zig_wrappers
