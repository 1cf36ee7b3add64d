#!/usr/bin/env bash
# GPU check for a host with an NVIDIA GPU: device query, the GPU tests
# (quotient bit-exact against bellperson up to 2^24, pinned allocation,
# h kept on the device, proofs byte-identical to CPU and bellperson), the
# NVRTC compile test, then the benchmark table (H2D pinned vs pageable,
# idle and under memory load; NTT phase per size; quotient from host; G1
# and G2 MSMs with and without the tables of multiples) and
# the per-phase timings of one proof on the CUDA backend (`prover prove`),
# whole proofs per size next to the CPU backend and bellperson (`prover
# bench --cuda`), and a pipelined daemon run (scripts/gpu-daemon-run.sh:
# 16 partitions of chain 2^22, occupied and kernel busy per device,
# partitions a minute).
#
# Usage:
#   scripts/gpu-check.sh                 build with cargo, then run
#   scripts/gpu-check.sh --bin-dir DIR   run prebuilt test binaries from DIR
#                                        (the prover's it-* test binary), e.g.
#                                        on a GPU host without cargo
# Environment: GPU_CHECK_OUT (log folder, default target/gpu-check),
# PROVER_CUDA_MAX_LOG (largest bit-exact quotient size, default 24),
# PROVER_CUDA_BIG_MAX_LOG (the production sizes 2^25 up to this, default 27),
# PROVER_CUDA_STRESS_REPS (repetitions of the 2^26 quotient through size
# changes and pinned-region cycles, default 10),
# PROVER_MSM_MAX_LOG (largest MSM checked against the CPU, default 24),
# PROVER_BENCH_MAX_LOG (largest NTT bench size, default 26),
# PROVER_BENCH_MSM_MAX_LOG (largest G1 MSM bench size, default 26;
# PROVER_BENCH_MSM_MIN_LOG its smallest, default 16),
# PROVER_BENCH_G2_MAX_LOG (largest G2 MSM bench size, default 24),
# GPU_CHECK_PROVE_SIZES (chain sizes proven on the CUDA backend, default
# "65536 1048576"), GPU_CHECK_CHAIN_LOGS / GPU_CHECK_SHA_LOGS (whole-proof
# bench sizes, default 16,18,20,22 and 18,20,22; add 24 for the largest),
# GPU_CHECK_BIG_LOGS (production-size proofs with parameters made in
# memory, default "26,27"; sha256, whose set at 2^27 is larger than most
# disks), GPU_CHECK_SKIP_PROOFS, GPU_CHECK_SKIP_SETUP, GPU_CHECK_SKIP_BIG,
# GPU_CHECK_SKIP_DAEMON (leave those parts out), and the settings of
# scripts/gpu-setup-check.sh (SETUP_CHECK_*) and scripts/gpu-daemon-run.sh
# (GPU_DAEMON_*).
set -uo pipefail

cd "$(dirname "$0")/.."
bin_dir=""
if [ "${1:-}" = "--bin-dir" ]; then
    bin_dir=${2:?--bin-dir needs a folder}
fi
out=${GPU_CHECK_OUT:-target/gpu-check}
mkdir -p "$out"

# libnvrtc: the pip wheel's folder if present, and the toolkit's.
if nvrtc_dir=$(scripts/nvrtc-libdir.sh 2>/dev/null); then
    export LD_LIBRARY_PATH="$nvrtc_dir:${LD_LIBRARY_PATH:-}"
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done

if [ -z "$bin_dir" ]; then
    bin_dir=target/gpu-check-bin
    mkdir -p "$bin_dir"
    cargo test --release -p prover --test it --no-run \
        --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable"): print(m["executable"])' |
        while read -r exe; do cp "$exe" "$bin_dir/"; done
    cargo build --release -p prover --bin prover -p fleetctl --bin fleetctl &&
        cp target/release/prover target/release/fleetctl "$bin_dir/"
fi
# One integration-test binary per crate: the GPU tests are its cuda::
# module, the NVRTC compile test its kernels_compile:: module.
it_bin=$(ls -t "$bin_dir"/it-* 2>/dev/null | grep -v '\.d$' | head -1)
if [ -z "$it_bin" ]; then
    echo "test binaries not found in $bin_dir" >&2
    exit 2
fi

status=0
# A GPU host without a device or without NVRTC would "pass" every GPU test
# having run nothing: refuse to go on.
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA device answers nvidia-smi" >&2
    exit 2
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so' &&
    ! ls ${LD_LIBRARY_PATH//:/ } 2>/dev/null | grep -q 'libnvrtc\.so'; then
    echo "gpu-check: libnvrtc not found (pip install 'nvidia-cuda-nvrtc==13.0.*')" >&2
    exit 2
fi
echo "== device" | tee "$out/device.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.mem \
    --format=csv 2>&1 | tee -a "$out/device.txt"

echo "== NVRTC compile test"
"$it_bin" kernels_compile:: --test-threads=1 2>&1 | tee "$out/kernels_compile.txt" || status=1

echo "== GPU tests (bit-exact up to 2^${PROVER_CUDA_MAX_LOG:-24})"
# TEST_REQUIRE=gpu: a GPU test that finds no device fails instead of skipping.
TEST_REQUIRE=gpu PROVER_CUDA_MAX_LOG=${PROVER_CUDA_MAX_LOG:-24} PROVER_MSM_MAX_LOG=${PROVER_MSM_MAX_LOG:-24} \
    PROVER_CUDA_BIG_MAX_LOG=${PROVER_CUDA_BIG_MAX_LOG:-27} PROVER_CUDA_STRESS_REPS=${PROVER_CUDA_STRESS_REPS:-10} \
    "$it_bin" cuda:: proofs::cuda_ --test-threads=1 --nocapture 2>&1 |
    tee "$out/cuda_tests.txt" || status=1
if grep -q "GPU tests skipped" "$out/cuda_tests.txt"; then
    echo "gpu-check: the GPU tests skipped themselves (no usable device or NVRTC)" >&2
    status=1
fi
# With --nocapture a test's own lines interleave with libtest's, so count
# from the summary line.
ran=$(grep -oE 'test result: [a-zA-Z]+\. [0-9]+ passed' "$out/cuda_tests.txt" | grep -oE '[0-9]+' | tail -1)
echo "gpu-check: ${ran:-0} GPU tests ran on the device and passed"

echo "== benchmark table"
"$it_bin" --ignored --exact cuda::gpu_bench_table --nocapture --test-threads=1 2>&1 |
    tee "$out/bench.txt" || status=1

echo "== per-phase timings of chain proofs on the CUDA backend"
if [ -x "$bin_dir/prover" ]; then
    params=$(mktemp -d)
    : >"$out/prove_cuda.txt"
    for size in ${GPU_CHECK_PROVE_SIZES:-65536 1048576}; do
        # Two partitions: the second shows the steady state (bases resident).
        "$bin_dir/prover" prove --backend cuda --size "$size" --partitions 2 \
            --params-dir "$params" --test-params 2>&1 | tee -a "$out/prove_cuda.txt" || status=1
    done
    rm -rf "$params"
else
    echo "no prover binary in $bin_dir: skipped"
fi

echo "== whole proofs: CUDA backend, CPU backend and bellperson on the same parameters"
if [ -x "$bin_dir/prover" ] && [ -z "${GPU_CHECK_SKIP_PROOFS:-}" ]; then
    params=$(mktemp -d)
    "$bin_dir/prover" bench --cuda --circuits chain --log-sizes "${GPU_CHECK_CHAIN_LOGS:-16,18,20,22}" \
        --params-dir "$params" --test-params 2>&1 | tee "$out/bench_proofs.txt" || status=1
    "$bin_dir/prover" bench --cuda --circuits sha256 --log-sizes "${GPU_CHECK_SHA_LOGS:-18,20,22}" \
        --params-dir "$params" --test-params 2>&1 | tee -a "$out/bench_proofs.txt" || status=1
    rm -rf "$params"
else
    echo "no prover binary in $bin_dir, or GPU_CHECK_SKIP_PROOFS set: skipped"
fi

echo "== parameter generation per size (CPU, CUDA, bellperson)"
if [ -x "$bin_dir/prover" ] && [ -z "${GPU_CHECK_SKIP_SETUP:-}" ]; then
    SETUP_CHECK_PROVE_LOGS=${SETUP_CHECK_PROVE_LOGS-} scripts/gpu-setup-check.sh "$bin_dir" "$out/setup" 2>&1 |
        tee "$out/setup_run.txt" || status=1
else
    echo "no prover binary in $bin_dir, or GPU_CHECK_SKIP_SETUP set: skipped"
fi

echo "== production sizes: sha256 with parameters made in memory on the GPU"
if [ -x "$bin_dir/prover" ] && [ -z "${GPU_CHECK_SKIP_BIG:-}" ]; then
    "$bin_dir/prover" --log info,prover=debug bench --cuda --no-cpu --no-baseline --params-in-memory --circuits sha256 \
        --log-sizes "${GPU_CHECK_BIG_LOGS:-26,27}" 2>&1 | tee "$out/bench_big.txt" || status=1
else
    echo "no prover binary in $bin_dir, or GPU_CHECK_SKIP_BIG set: skipped"
fi

echo "== pipelined daemon run"
if [ -x "$bin_dir/prover" ] && [ -x "$bin_dir/fleetctl" ] && [ -z "${GPU_CHECK_SKIP_DAEMON:-}" ]; then
    scripts/gpu-daemon-run.sh "$bin_dir" "$out/daemon" 2>&1 | tee "$out/daemon_run.txt" || status=1
else
    echo "no prover and fleetctl binaries in $bin_dir, or GPU_CHECK_SKIP_DAEMON set: skipped"
fi

echo "== summary"
grep -E "^test |test result" "$out/kernels_compile.txt" "$out/cuda_tests.txt" | sed 's/^[^:]*://'
grep -E '^\||^device|pinned/pageable' "$out/bench.txt"
[ -f "$out/prove_cuda.txt" ] && grep -E '│|partition\(s\)' "$out/prove_cuda.txt"
[ -f "$out/bench_proofs.txt" ] && grep -E '│' "$out/bench_proofs.txt"
[ -f "$out/setup/setup-table.md" ] && cat "$out/setup/setup-table.md" "$out/setup/setup-bellperson.md" 2>/dev/null
[ -f "$out/bench_big.txt" ] && grep -E '│|generated in memory|generated parameters' "$out/bench_big.txt"
[ -f "$out/daemon_run.txt" ] && grep -E 'partitions a minute|kernel busy|occupied' "$out/daemon_run.txt"
exit $status
