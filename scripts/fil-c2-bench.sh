#!/usr/bin/env bash
# PoRep C2 on a GPU host: our prover (CUDA) next to filecoin-proofs' own
# seal_commit_phase2 (its CPU path: this build has no GPU features) on the
# same C1 output, both judged by verify_seal. Also checks that the CUDA and
# CPU backends give the same proof bytes for the same r, s (2 KiB).
#
# Usage: scripts/fil-c2-bench.sh BIN_DIR OUT_DIR [SEAL_PROOF ...]
#   BIN_DIR holds release builds of `prover` and the `fil_bench` example
#   (cargo build --release -p prover --bin prover --example fil_bench).
#   Default proof types: StackedDrg2KiBV1_1 StackedDrg8MiBV1_1.
# Parameters are generated TEST-ONLY (prover setup --filecoin) into a
# scratch parameter cache; every step's output and timings go to OUT_DIR.
# FIL_BENCH_SEALED=DIR takes DIR/SEAL_PROOF/{c1.json,sector.json,seal.log}
# from an earlier `fil_bench seal` (the seal is seeded, so it is the one this
# script would make) instead of sealing here: a 512 MiB seal is minutes.
# Then (FIL_BENCH_DAEMON=1, the default) the same C1 output goes three
# times through a running daemon (`prover client c2`): the first job loads
# the parameter file and makes its bases resident on the GPU, the later
# ones are what a serving host pays per C2.
set -euo pipefail
bin=$(cd "${1:?BIN_DIR}" && pwd)
out=${2:?OUT_DIR}
shift 2
proofs=("$@")
[ ${#proofs[@]} -gt 0 ] || proofs=(StackedDrg2KiBV1_1 StackedDrg8MiBV1_1)
mkdir -p "$out"
out=$(cd "$out" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export FIL_PROOFS_PARAMETER_CACHE="$scratch/params"
export PROVER_KERNEL_CACHE="$scratch/kernels"
# The per-partition summary beside this script (shared with the other benchmarks).
here=$(cd "$(dirname "$0")" && pwd)
log() { echo "== $*" | tee -a "$out/summary.txt"; }
timed() { # NAME CMD...: runs CMD, stdout+stderr to OUT/NAME.log, wall time to the summary
    local name=$1
    shift
    local t0 t1 rc=0
    t0=$(date +%s%N)
    "$@" >"$out/$name.log" 2>&1 || rc=$?
    t1=$(date +%s%N)
    printf '%-36s rc=%d %6d ms\n' "$name" "$rc" $(((t1 - t0) / 1000000)) | tee -a "$out/summary.txt"
    return 0
}
# The C1 output of proof type $1 (folder $2) three times through a daemon.
daemon_c2() {
    local p=$1 d=$2 sector=$3 prover_id=$4 w="$scratch/daemon-$1"
    mkdir -p "$w"
    cat >"$w/daemon.toml" <<EOC
listen = "127.0.0.1:0"
drain_timeout = "2m"
[paths]
pid_file = "$w/prover.pid"
log_file = "$d/daemon.log"
timing_log = "$d/daemon-timing.jsonl"
params_dir = "$w/params"
[memory]
budget = "96GiB"
[pool]
allocator = "cuda"
[gpu]
devices = [0]
[filecoin]
param_cache = "$FIL_PROOFS_PARAMETER_CACHE"
allow_test_params = true
EOC
    "$bin/prover" daemon --config "$w/daemon.toml" >"$d/daemon.out" 2>&1 &
    local pid=$! i up=""
    for i in $(seq 300); do
        if "$bin/prover" client ready --config "$w/daemon.toml" >/dev/null 2>&1; then
            up=1
            break
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
    done
    if [ -z "$up" ]; then
        log "$p: the daemon did not come up (see $d/daemon.out)"
        kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        return 0
    fi
    for run in 1 2 3; do
        timed "$p.daemon-c2-$run" "$bin/prover" client c2 --config "$w/daemon.toml" \
            --c1 "$d/c1.json" --registered-proof "$p" --sector-id "$sector" \
            --prover-id "$prover_id" --out "$d/daemon-$run.proof" --timeout 10m
        timed "$p.daemon-c2-$run.verify" "$bin/fil_bench" verify "$d" "$d/daemon-$run.proof"
    done
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    # Per partition, from the daemon's own records: synthesis, device time.
    python3 "$here/partition-summary.py" "$d/daemon-timing.jsonl" | tee -a "$out/summary.txt"
}
log "host: $(nproc) cores, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
log "prover: $("$bin/prover" --version)"
for p in "${proofs[@]}"; do
    d="$out/$p"
    mkdir -p "$d"
    timed "$p.setup" "$bin/prover" setup --filecoin "$p" --param-cache "$FIL_PROOFS_PARAMETER_CACHE" --log warn
    if [ -n "${FIL_BENCH_SEALED:-}" ] && [ -f "$FIL_BENCH_SEALED/$p/c1.json" ]; then
        # Sealed elsewhere with the same seed (`fil_bench seal`, its stdout
        # kept as seal.log): C2 needs only the C1 output and the sector.
        cp "$FIL_BENCH_SEALED/$p/c1.json" "$FIL_BENCH_SEALED/$p/sector.json" "$d/"
        cp "$FIL_BENCH_SEALED/$p/seal.log" "$out/$p.seal.log"
        log "$p: sealed beforehand ($(cat "$out/$p.seal.log"))"
    else
        timed "$p.seal" "$bin/fil_bench" seal "$p" "$scratch/sector-$p" "$d"
    fi
    sector=$(sed -n 's/.*"sector_id": *\([0-9]*\).*/\1/p' "$d/sector.json" | head -1)
    prover_id=$(sed -n 's/.*"prover_id":"\([0-9a-f]*\)".*/\1/p' "$out/$p.seal.log" | head -1)
    c2() { # NAME BACKEND [ARGS]
        local name=$1 backend=$2
        shift 2
        timed "$p.$name" "$bin/prover" c2 --c1 "$d/c1.json" --registered-proof "$p" \
            --sector-id "$sector" --prover-id "$prover_id" --allow-test-params \
            --param-cache "$FIL_PROOFS_PARAMETER_CACHE" --backend "$backend" \
            --out "$d/$name.proof" --report "$d/$name.report.json" --log warn "$@"
        timed "$p.$name.verify" "$bin/fil_bench" verify "$d" "$d/$name.proof"
    }
    # The first CUDA run compiles the kernels (NVRTC) into the kernel cache.
    c2 ours-cuda-cold cuda
    c2 ours-cuda cuda
    c2 ours-cuda-seed cuda --seed 7
    c2 ours-cpu-seed cpu --seed 7
    if cmp -s "$d/ours-cuda-seed.proof" "$d/ours-cpu-seed.proof"; then
        log "$p: CUDA and CPU proofs for seed 7 are byte-identical"
    else
        log "$p: CUDA and CPU proofs for seed 7 DIFFER"
    fi
    timed "$p.filecoin-c2" "$bin/fil_bench" filecoin-c2 "$d" "$d/filecoin.proof"
    timed "$p.filecoin-c2.verify" "$bin/fil_bench" verify "$d" "$d/filecoin.proof"
    [ "${FIL_BENCH_DAEMON:-1}" = 1 ] && daemon_c2 "$p" "$d" "$sector" "$prover_id"
done
log done
