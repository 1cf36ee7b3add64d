#!/usr/bin/env bash
# The 32 GiB PoRep C2 on a GPU host, from a forged committed-capacity C1
# (TEST DATA: its replica was never computed; see docs/filecoin.md) and
# TEST-ONLY parameters made on the GPU, every proof judged by
# filecoin-proofs' verify_seal. `setup` and `prove` split the work for a
# host kept between two runs; where a host may be gone soon after one run,
# `all` does both in one:
#
#   scripts/fil-32g-run.sh setup BIN_DIR OUT_DIR   # 512 MiB sanity run, then the 32 GiB parameters
#   scripts/fil-32g-run.sh prove BIN_DIR OUT_DIR [RUNS] [EXTRA_TOML]  # warm daemon, RUNS C2s (default 3)
#   scripts/fil-32g-run.sh all BIN_DIR OUT_DIR [RUNS] [EXTRA_TOML]    # the 32 GiB parameters, then prove
#
# Back-to-back C2s stop early when the next would pass FIL_32G_DEADLINE
# seconds (default 565) from the script's start.
#   scripts/fil-32g-run.sh winning BIN_DIR OUT_DIR  # a preloaded WinningPoSt (8 MiB sector) x5, and SnapDeals (SNAP_SIZE) x3 beside filecoin-proofs'
#
# `winning` seals the SnapDeals CC sector key with filecoin-proofs (about
# 5.5 minutes at 512 MiB on 16 cores); SNAP_FORGED=1 (default 0) forges it
# instead (`fil_bench snap-forged`: TEST DATA, random field elements never
# sealed, see docs/filecoin.md), so a large SNAP_SIZE fits one call.
#
# BIN_DIR holds `prover` and `fil_bench` (cargo build --release -p prover
# --bin prover --example fil_bench). The parameter cache is
# FIL_32G_CACHE (default /var/tmp/fil-32g/params), kept between the phases.
# EXTRA_TOML is appended to the daemon's config (e.g. a [gpu] memory_limit).
set -euo pipefail
started=$SECONDS
# Runs start only while this many seconds of the script remain unspent
# (a call on the device is cut at 10 minutes).
deadline=${FIL_32G_DEADLINE:-565}
phase=${1:?setup, prove, all or winning}
bin=$(cd "${2:?BIN_DIR}" && pwd)
out=${3:?OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${FIL_32G_WORK:-/var/tmp/fil-32g}
cache=${FIL_32G_CACHE:-$work/params}
mkdir -p "$work" "$cache"
export FIL_PROOFS_PARAMETER_CACHE="$cache"
export PROVER_KERNEL_CACHE="$work/kernels"
# The per-partition summary beside this script (shared with the other benchmarks).
here=$(cd "$(dirname "$0")" && pwd)
log() { echo "== $*" | tee -a "$out/summary.txt"; }
timed() { # NAME CMD...: stdout+stderr to OUT/NAME.log; wall time and peak RSS to the summary
    local name=$1 rc=0 t0 t1
    shift
    t0=$(date +%s%N)
    /usr/bin/time -f "%M" -o "$out/$name.rss" "$@" >"$out/$name.log" 2>&1 || rc=$?
    t1=$(date +%s%N)
    printf '%-34s rc=%d %8d ms  peak RSS %s MiB\n' "$name" "$rc" $(((t1 - t0) / 1000000)) \
        "$(($(tail -1 "$out/$name.rss" 2>/dev/null || echo 0) / 1024))" | tee -a "$out/summary.txt"
    return 0
}
# forge PROOF DIR: a forged CC C1 (c1.json) and its sector (sector.json) in DIR.
forge() {
    mkdir -p "$2"
    timed "forge-$1" "$bin/fil_bench" forge "$1" 42 "$2"
}
# start_daemon EXTRA_TOML: a daemon on GPU 0 over the cache; sets w, pid.
start_daemon() {
    w="$work/daemon"
    rm -rf "$w"
    mkdir -p "$w/run"
    cat >"$w/prover.toml" <<EOC
listen = "127.0.0.1:0"
drain_timeout = "1m"
[paths]
pid_file = "$w/run/prover.pid"
log_file = "$out/daemon.log"
timing_log = "$out/timing.jsonl"
params_dir = "$w/params"
[pool]
allocator = "cuda"
[gpu]
devices = [0]
[filecoin]
param_cache = "$cache"
allow_test_params = true
max_body_bytes = "257MiB"
$1
EOC
    cp "$w/prover.toml" "$out/prover.toml"
    "$bin/prover" daemon --config "$w/prover.toml" >"$out/daemon.out" 2>&1 &
    pid=$!
    local t0
    t0=$(date +%s%N)
    for _ in $(seq 600); do
        "$bin/prover" client ready --config "$w/prover.toml" >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || { log "daemon died at start"; tail -20 "$out/daemon.out"; exit 1; }
        sleep 1
    done
    log "daemon ready in $((($(date +%s%N) - t0) / 1000000)) ms"
}
log "host: $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB, $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
log "prover: $("$bin/prover" --version)"
log "disk: $(df -h "$work" | tail -1)"
case "$phase" in
setup)
    # 512 MiB end to end first: a fault in the forge, the GPU setup or the
    # verifier shows here in a minute, not after the 32 GiB set.
    p=StackedDrg512MiBV1_1
    timed "setup-$p" "$bin/prover" setup --filecoin "$p" --backend cuda --param-cache "$cache" --log warn
    forge "$p" "$work/$p"
    sector=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["sector_id"])' "$work/$p/sector.json")
    prover_id=$(python3 -c 'import json,sys;print(bytes(json.load(open(sys.argv[1]))["prover_id"]).hex())' "$work/$p/sector.json")
    timed "c2-$p" "$bin/prover" c2 --c1 "$work/$p/c1.json" --registered-proof "$p" \
        --sector-id "$sector" --prover-id "$prover_id" --allow-test-params \
        --param-cache "$cache" --backend cuda --out "$work/$p/c2.proof" \
        --report "$out/c2-$p.report.json" --log warn
    timed "verify-$p" "$bin/fil_bench" verify "$work/$p" "$work/$p/c2.proof"
    p=StackedDrg32GiBV1_1
    timed "setup-$p" "$bin/prover" setup --filecoin "$p" --backend cuda --param-cache "$cache" --log info
    ls -l "$cache" | tee -a "$out/summary.txt"
    forge "$p" "$work/$p"
    ls -l "$work/$p" | tee -a "$out/summary.txt"
    ;;
all | prove)
    if [ "$phase" = all ]; then
        p=StackedDrg32GiBV1_1
        # Refused at once (exit 1) where the file is there already.
        timed "setup-$p" "$bin/prover" setup --filecoin "$p" --backend cuda --param-cache "$cache" --log info
        ls -l "$cache" | tee -a "$out/summary.txt"
    fi
    runs=${4:-3}
    extra=${5:-}
    p=StackedDrg32GiBV1_1
    d="$work/$p"
    [ -f "$d/c1.json" ] || forge "$p" "$d"
    sector=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["sector_id"])' "$d/sector.json")
    prover_id=$(python3 -c 'import json,sys;print(bytes(json.load(open(sys.argv[1]))["prover_id"]).hex())' "$d/sector.json")
    start_daemon "$extra"
    # GPU memory and the daemon's RSS, every 2 s, while it proves.
    (while kill -0 "$pid" 2>/dev/null; do
        echo "$(date +%s) $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader,nounits | head -1) $(awk '/VmRSS|VmHWM/{printf "%s ", $2}' /proc/$pid/status)"
        sleep 2
    done) >"$out/samples.txt" 2>/dev/null &
    sampler=$!
    last=0
    for run in $(seq "$runs"); do
        t0=$SECONDS
        if [ $((t0 - started + last + last / 5 + 15)) -gt "$deadline" ]; then
            log "run $run not started: $((t0 - started)) s spent, the last C2 took $last s"
            break
        fi
        timed "daemon-c2-$run" "$bin/prover" client c2 --config "$w/prover.toml" \
            --c1 "$d/c1.json" --registered-proof "$p" --sector-id "$sector" \
            --prover-id "$prover_id" --out "$d/daemon-$run.proof" --timeout 9m
        timed "verify-$run" "$bin/fil_bench" verify "$d" "$d/daemon-$run.proof"
        last=$((SECONDS - t0))
    done
    awk '/VmHWM/{print "daemon peak RSS " $2/1048576 " GiB"}' /proc/$pid/status | tee -a "$out/summary.txt"
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
    kill "$sampler" 2>/dev/null || true
    # Per partition, from the daemon's own records.
    python3 "$here/partition-summary.py" "$out/timing.jsonl" | tee -a "$out/summary.txt"
    ;;
winning)
    # A WinningPoSt on a warm daemon whose set was preloaded (constraints
    # recorded, bases on the GPU), end to end, client to proof; and a
    # SnapDeals update of a CC sector (SNAP_SIZE, default 8MiB) proved by
    # the same daemon next to filecoin-proofs' own
    # generate_empty_sector_update_proof_with_vanilla, both verified.
    p=StackedDrg8MiBV1_1
    snap_size=${SNAP_SIZE:-8MiB}
    d="$work/win"
    s="$work/snap"
    rm -rf "$d" "$work/win-sector" "$s" "$work/snap-sector"
    timed "seal-$p" "$bin/fil_bench" seal "$p" "$work/win-sector" "$d"
    timed "setup-winning" "$bin/prover" setup --filecoin winning-post:8MiB --backend cuda --param-cache "$cache" --log warn
    timed "vanilla-winning" "$bin/fil_bench" post-vanilla winning "$work/win-sector" "$d"
    snap_cmd=snap
    if [ "${SNAP_FORGED:-0}" = 1 ]; then
        snap_cmd=snap-forged # a forged sector key (test data) skips the CC seal
    fi
    timed "$snap_cmd-vector-$snap_size" "$bin/fil_bench" "$snap_cmd" "StackedDrg${snap_size}V1" "$work/snap-sector" "$s"
    cat "$out/$snap_cmd-vector-$snap_size.log" >>"$out/summary.txt"
    timed "setup-snap-$snap_size" "$bin/prover" setup --filecoin "snap-deals:$snap_size" --backend cuda --param-cache "$cache" --log warn
    timed "filecoin-snap" "$bin/fil_bench" filecoin-snap "$s" "$s/filecoin.proof"
    cat "$out/filecoin-snap.log" >>"$out/summary.txt"
    timed "verify-filecoin-snap" "$bin/fil_bench" verify-snap "$s" "$s/filecoin.proof"
    prover_id=$(python3 -c 'import json,sys;print(bytes(json.load(open(sys.argv[1]))["prover_id"]).hex())' "$d/sector.json")
    start_daemon "preload = [\"winning-post:8MiB\", \"snap-deals:$snap_size\"]"
    for run in 1 2 3 4 5; do
        timed "winning-$run" "$bin/prover" client post --config "$w/prover.toml" --kind winning \
            --vanilla "$d/winning-vanilla.json" --randomness "$(printf '07%.0s' $(seq 32))" \
            --prover-id "$prover_id" --sector-size 8MiB --out "$d/winning-$run.proof" --timeout 1m
        timed "verify-winning-$run" "$bin/fil_bench" verify-post winning "$d" "$d/winning-$run.proof"
    done
    mapfile -t snap_args <"$s/snap-args.txt"
    for run in 1 2 3; do
        timed "daemon-snap-$run" "$bin/prover" client snap --config "$w/prover.toml" \
            "${snap_args[@]}" --out "$s/daemon-$run.proof" --timeout 5m
        timed "verify-snap-$run" "$bin/fil_bench" verify-snap "$s" "$s/daemon-$run.proof"
    done
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
    grep -h '"kind":"proof"' "$out/timing.jsonl" | tee -a "$out/summary.txt" || true
    ;;
*)
    echo "phase: setup, prove or winning" >&2
    exit 2
    ;;
esac
log done
