#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine with a Rust toolchain.
#
# Installs what the tests need when it is missing (OpenSSH server and client for
# the lab fleet, iproute2 and util-linux for its namespaces, the NVRTC pip wheel
# for the kernel compile check, Chromium for the HTML report screenshot), then
# runs formatting, lints and every test, and ends with a summary: how many tests
# passed, failed and were ignored, and how many of the passed ones skipped
# (checked nothing) and why.
#
# Usage: scripts/test.sh [--leave-out PARTS]
#   PARTS is a comma list (also read from TEST_LEAVE_OUT) of what CI has that
#   this run goes without: lab (root and sshd, for the lab fleet), chromium,
#   nvrtc, grpcio (Python's grpcio and grpcio-tools, the gRPC client that is
#   not ours). Without one of them, and without naming it, the script stops before
#   testing anything; with it named, the tests that need it skip and the
#   summary counts them. The GPU tests (and the netem test, on a kernel
#   without netem) always skip when the host lacks the part, counted likewise;
#   scripts/gpu-check.sh runs the GPU tests on a GPU host.
set -euo pipefail
cd "$(dirname "$0")/.."

leave_out=${TEST_LEAVE_OUT:-}
while [ $# -gt 0 ]; do
    case "$1" in
    --leave-out) leave_out=${2:?--leave-out needs a comma list: lab,chromium,nvrtc,grpcio}; shift 2 ;;
    --leave-out=*) leave_out=${1#--leave-out=}; shift ;;
    *) echo "test.sh: unknown argument $1 (usage: scripts/test.sh [--leave-out lab,chromium,nvrtc,grpcio])" >&2; exit 2 ;;
    esac
done
for part in ${leave_out//,/ }; do
    case "$part" in
    lab | chromium | nvrtc | grpcio) ;;
    *) echo "test.sh: --leave-out: unknown part '$part' (known: lab, chromium, nvrtc, grpcio)" >&2; exit 2 ;;
    esac
done
left_out() { [[ ",$leave_out," == *",$1,"* ]]; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
if ! left_out lab; then
    [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
    command -v ssh >/dev/null || missing+=(openssh-client)
    command -v ip >/dev/null || missing+=(iproute2)
    command -v nsenter >/dev/null || missing+=(util-linux)
fi
command -v sha256sum >/dev/null || missing+=(coreutils)
command -v python3 >/dev/null || missing+=(python3 python3-pip)
chromium_on_path() { command -v chromium || command -v chromium-browser || command -v google-chrome; }
left_out chromium || chromium_on_path >/dev/null || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
    echo "test.sh: installing ${missing[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# NVRTC compiles the CUDA kernels to PTX in CI, where there is no GPU.
if ! left_out nvrtc; then
    if ! libdir="$(scripts/nvrtc-libdir.sh 2>/dev/null)"; then
        echo "test.sh: installing the nvidia-cuda-nvrtc wheel (CUDA 13.0)"
        python3 -m pip install -q --root-user-action=ignore 'nvidia-cuda-nvrtc==13.0.*' \
            || python3 -m pip install -q --break-system-packages 'nvidia-cuda-nvrtc==13.0.*' \
            || true
        libdir="$(scripts/nvrtc-libdir.sh 2>/dev/null)" || libdir=""
    fi
    if [ -n "$libdir" ]; then
        export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
fi

# The gRPC tests' client is Python's, generated from the proto at test time.
if ! left_out grpcio && ! python3 -c 'import grpc, grpc_tools' 2>/dev/null; then
    echo "test.sh: installing grpcio and grpcio-tools (PyPI)"
    python3 -m pip install -q --root-user-action=ignore 'grpcio==1.*' 'grpcio-tools==1.*' \
        || python3 -m pip install -q --break-system-packages 'grpcio==1.*' 'grpcio-tools==1.*' \
        || true
fi

# What CI has must be here, or be left out by name: a run without root would
# otherwise go green having tested no SSH at all.
lacking=()
if ! left_out lab; then
    [ "$(id -u)" -eq 0 ] || lacking+=("lab: the lab fleet needs root (namespaces, veth pairs, sshd)")
    [ -x /usr/sbin/sshd ] || lacking+=("lab: no /usr/sbin/sshd (openssh-server)")
fi
left_out chromium || chromium_on_path >/dev/null || lacking+=("chromium: not on PATH")
left_out grpcio || python3 -c 'import grpc, grpc_tools' 2>/dev/null || lacking+=("grpcio: python3 cannot import grpc and grpc_tools (pip install grpcio grpcio-tools)")
left_out nvrtc || [ -n "${libdir:-}" ] || lacking+=("nvrtc: libnvrtc not found (pip install 'nvidia-cuda-nvrtc==13.0.*')")
if [ ${#lacking[@]} -gt 0 ]; then
    printf 'test.sh: %s\n' "${lacking[@]}" >&2
    echo "test.sh: to test without these, name them: scripts/test.sh --leave-out PARTS (or TEST_LEAVE_OUT=PARTS)" >&2
    exit 2
fi
export TEST_LEAVE_OUT="$leave_out"

# A run from a fresh clone never rebuilds incrementally: the incremental cache
# only costs disk (4 GB of a 14 GB build).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# A link that fails for want of disk says only "linking with cc failed".
echo "test.sh: free disk where the build goes: $(df -h --output=avail . | tail -1 | tr -d ' ')"
echo "test.sh: cargo fmt --check"
cargo fmt --all -- --check
echo "test.sh: cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "test.sh: import circles"
bash scripts/import-circles-check.sh
python3 scripts/import-circles.py fleetctl/src prover/src wire/src testkit/src
echo "test.sh: cargo test"
# The binaries must exist before the end-to-end tests deploy them.
cargo build --workspace --bins
# Each test that skips appends a line here (fleet-testkit); the summary counts them.
export TEST_SKIP_LOG="$PWD/target/test-skips.log"
: >"$TEST_SKIP_LOG"
set +e
cargo test --workspace --no-fail-fast 2>&1 | tee target/test-output.log
status=${PIPESTATUS[0]}
set -e
echo
echo "test.sh: summary"
grep -E 'FAILED|panicked' target/test-output.log || true
read -r passed failed ignored < <(awk '/^test result:/ {
        for (i = 1; i <= NF; i++) {
            if ($(i+1) ~ /^passed;/) p += $i
            if ($(i+1) ~ /^failed;/) f += $i
            if ($(i+1) ~ /^ignored;/) g += $i
        }
    } END { print p + 0, f + 0, g + 0 }' target/test-output.log)
skipped=$(wc -l <"$TEST_SKIP_LOG")
echo "test.sh: $passed passed ($skipped of them skipped a check the host cannot run), $failed failed, $ignored ignored (GPU benchmarks and diagnostics, run by hand)"
if [ "$skipped" -gt 0 ]; then
    echo "test.sh: skipped, by what the host lacks:"
    cut -f2 "$TEST_SKIP_LOG" | sort | uniq -c | while read -r count need; do
        case "$need" in
        gpu) why="no CUDA device or NVRTC: expected without a GPU (CI has none); scripts/gpu-check.sh runs them on a GPU host" ;;
        netem) why="this kernel has no netem qdisc" ;;
        *) why="left out by this run (--leave-out $leave_out)" ;;
        esac
        printf '  %-9s %3d  %s\n' "$need" "$count" "$why"
        cut -f2,3 "$TEST_SKIP_LOG" | awk -F'\t' -v n="$need" '$1 == n { print "              " $2 }'
    done
    if [ "$(cut -f2 "$TEST_SKIP_LOG" | sort -u)" = gpu ]; then
        echo "test.sh: every skipped test is a GPU test"
    fi
fi
exit "$status"
