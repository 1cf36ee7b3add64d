#!/usr/bin/env bash
# On a GPU host: whole proofs with the witness pass in pieces, and a warm
# daemon's PoRep C2 next to filecoin-proofs' own, in one run.
#
# 1. `prover bench --cuda` at 2^22 for sha256 and chain: synthesis the
#    bellperson way, the whole-circuit witness pass on one thread, the pass
#    in pieces, a/b/c, and whole proofs on the CUDA backend (every proof
#    judged by bellperson's verifier; compiled proofs compared byte for byte).
# 2. scripts/fil-c2-bench.sh for the given seal proofs (default
#    StackedDrg512MiBV1_1), which ends with three C2s through one daemon.
#
# Usage: scripts/gpu-witness-check.sh BIN_DIR OUT_DIR [SEAL_PROOF ...]
#   BIN_DIR: release builds of `prover` and the `fil_bench` example.
#   FIL_BENCH_SEALED=DIR: sectors sealed beforehand (see fil-c2-bench.sh).
#   WITNESS_CHECK_LOG_SIZES (default 22), WITNESS_CHECK_SKIP_FIL=1.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "${1:?BIN_DIR}" && pwd)
out=${2:?OUT_DIR}
shift 2
mkdir -p "$out"
out=$(cd "$out" && pwd)
if nvrtc_dir=$(scripts/nvrtc-libdir.sh 2>/dev/null); then
    export LD_LIBRARY_PATH="$nvrtc_dir:${LD_LIBRARY_PATH:-}"
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$d"
done
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-witness-check: no NVIDIA device answers nvidia-smi" >&2
    exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
echo "cores: $(nproc)" | tee -a "$out/device.txt"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0
"$bin/prover" bench --cuda --no-cpu --no-baseline --circuits sha256,chain \
    --log-sizes "${WITNESS_CHECK_LOG_SIZES:-22}" --test-params \
    --params-dir "$scratch/params" --repeat 3 --json "$out/bench.json" \
    --log warn >"$out/bench.log" 2>&1 || status=1
cat "$out/bench.log"
if [ "${WITNESS_CHECK_SKIP_FIL:-0}" != 1 ]; then
    [ $# -gt 0 ] || set -- StackedDrg512MiBV1_1
    scripts/fil-c2-bench.sh "$bin" "$out/fil" "$@" || status=1
fi
exit $status
