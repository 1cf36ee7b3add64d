#!/usr/bin/env bash
# On a GPU host: a WinningPoSt and a WindowPoSt partition of a 2 KiB sector
# through `prover post` on the CUDA and the CPU backend (same r, s: the bytes
# must be identical), each proof judged by filecoin-proofs' own verifier.
#
# Usage: scripts/fil-post-check.sh BIN_DIR OUT_DIR
#   BIN_DIR holds release builds of `prover` and the `fil_bench` example.
# TEST-ONLY parameters are generated (prover setup --filecoin) into a
# scratch parameter cache; the sector is sealed there too (well under a
# second at 2 KiB).
set -uo pipefail
bin=$(cd "${1:?BIN_DIR}" && pwd)
out=${2:?OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
if nvrtc_dir=$(scripts/nvrtc-libdir.sh 2>/dev/null); then
    export LD_LIBRARY_PATH="$nvrtc_dir:${LD_LIBRARY_PATH:-}"
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$d"
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export FIL_PROOFS_PARAMETER_CACHE="$scratch/params"
export PROVER_KERNEL_CACHE="${PROVER_KERNEL_CACHE:-$scratch/kernels}"
status=0
step() { # NAME CMD...: stdout+stderr to OUT/NAME.log, the exit code and wall time to the summary
    local name=$1 t0 t1 rc=0
    shift
    t0=$(date +%s%N)
    "$@" >"$out/$name.log" 2>&1 || rc=$?
    t1=$(date +%s%N)
    printf '%-28s rc=%d %6d ms\n' "$name" "$rc" $(((t1 - t0) / 1000000)) | tee -a "$out/summary.txt"
    [ "$rc" = 0 ] || status=1
    return 0
}
for p in winning-post:2KiB window-post:2KiB; do
    step "setup-${p%%:*}" "$bin/prover" setup --filecoin "$p" --param-cache "$FIL_PROOFS_PARAMETER_CACHE" --log warn
done
sealed="$out/sealed"
step seal "$bin/fil_bench" seal StackedDrg2KiBV1_1 "$scratch/sector" "$sealed"
prover_id=$(sed -n 's/.*"prover_id":"\([0-9a-f]*\)".*/\1/p' "$out/seal.log" | head -1)
randomness=$(printf '07%.0s' $(seq 32))
for kind in winning window; do
    step "$kind-vanilla" "$bin/fil_bench" post-vanilla "$kind" "$scratch/sector" "$sealed"
    for backend in cuda cpu; do
        step "$kind-$backend" "$bin/prover" post --kind "$kind" --vanilla "$sealed/$kind-vanilla.json" \
            --randomness "$randomness" --prover-id "$prover_id" --sector-size 2KiB \
            --param-cache "$FIL_PROOFS_PARAMETER_CACHE" --allow-test-params --backend "$backend" \
            --seed 7 --out "$out/$kind-$backend.proof" --report "$out/$kind-$backend.report.json" --log warn
        step "$kind-$backend-verify" "$bin/fil_bench" verify-post "$kind" "$sealed" "$out/$kind-$backend.proof"
    done
    if cmp -s "$out/$kind-cuda.proof" "$out/$kind-cpu.proof"; then
        echo "$kind: CUDA and CPU proofs for seed 7 are byte-identical" | tee -a "$out/summary.txt"
    else
        echo "$kind: CUDA and CPU proofs for seed 7 DIFFER" | tee -a "$out/summary.txt"
        status=1
    fi
done
exit $status
