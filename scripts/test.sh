#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine with a Rust toolchain.
#
# Installs what the tests need when it is missing (OpenSSH server and client for
# the lab fleet, iproute2 and util-linux for its namespaces, the NVRTC pip wheel
# for the kernel compile check, Chromium for the HTML report screenshot), then
# runs formatting, lints and every test. Lab tests need root (namespaces, sshd).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null || missing+=(openssh-client)
command -v ip >/dev/null || missing+=(iproute2)
command -v nsenter >/dev/null || missing+=(util-linux)
command -v sha256sum >/dev/null || missing+=(coreutils)
command -v python3 >/dev/null || missing+=(python3 python3-pip)
command -v chromium >/dev/null || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
    echo "test.sh: installing ${missing[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# NVRTC compiles the CUDA kernels to PTX in CI, where there is no GPU.
if ! libdir="$(scripts/nvrtc-libdir.sh 2>/dev/null)"; then
    echo "test.sh: installing the nvidia-cuda-nvrtc wheel (CUDA 13.0)"
    python3 -m pip install -q --root-user-action=ignore 'nvidia-cuda-nvrtc==13.0.*' \
        || python3 -m pip install -q --break-system-packages 'nvidia-cuda-nvrtc==13.0.*'
    libdir="$(scripts/nvrtc-libdir.sh)"
fi
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "test.sh: cargo fmt --check"
cargo fmt --all -- --check
echo "test.sh: cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "test.sh: import circles"
python3 scripts/import-circles.py fleetctl/src prover/src wire/src
echo "test.sh: cargo test"
# The binaries must exist before the end-to-end tests deploy them.
cargo build --workspace --bins
cargo test --workspace --no-fail-fast 2>&1 | tee target/test-output.log
status=${PIPESTATUS[0]}
echo
echo "test.sh: summary"
grep -E '^test result:|^     Running|FAILED|panicked' target/test-output.log | grep -E 'test result|FAILED|panicked' || true
exit "$status"
