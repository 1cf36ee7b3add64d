#!/usr/bin/env bash
# Kernel start-up on a GPU host: a cold daemon start with an empty kernel
# cache (time to ready, per-unit NVRTC compile times, the load of the
# cubins), a warm start with the cache that run left, and
# `prover kernels warm` alone (empty cache, then filled). Prints a table.
#
# Usage: scripts/gpu-kernel-start.sh BIN_DIR OUT_DIR
#   BIN_DIR holds `prover`; OUT_DIR receives each daemon's JSON log, the
#   `kernels warm` reports and summary.txt.
# Environment: GPU_KERNEL_DEVICES (TOML list or "all", default [0]),
# GPU_KERNEL_BUDGET (memory budget, default 32GiB).
set -uo pipefail

bin_dir=${1:?usage: gpu-kernel-start.sh BIN_DIR OUT_DIR}
out=${2:?usage: gpu-kernel-start.sh BIN_DIR OUT_DIR}
prover="$bin_dir/prover"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))

config() { # $1: run name
    cat >"$work/$1.toml" <<EOC
listen = "127.0.0.1:$port"
drain_timeout = "30s"
[paths]
pid_file = "$work/$1.pid"
log_file = "$out/$1.log"
timing_log = "$work/$1-timing.jsonl"
params_dir = "$work/params"
[log]
format = "json"
[memory]
budget = "${GPU_KERNEL_BUDGET:-32GiB}"
[pool]
allocator = "cuda"
preallocate = "1GiB"
[gpu]
devices = ${GPU_KERNEL_DEVICES:-[0]}
EOC
}

now() { date +%s.%N; }

# Starts a daemon with kernel cache $2, waits for ready, prints seconds to
# ready, stops it.
start() { # $1: run name, $2: cache dir
    config "$1"
    local t0 t1 pid
    t0=$(now)
    PROVER_KERNEL_CACHE="$2" "$prover" daemon --config "$work/$1.toml" >"$out/$1.stderr" 2>&1 &
    pid=$!
    for _ in $(seq 3000); do
        if "$prover" client ready --config "$work/$1.toml" --timeout 2s >/dev/null 2>&1; then
            t1=$(now)
            kill -TERM "$pid"
            wait "$pid"
            python3 -c "print(f'{$t1 - $t0:.2f}')"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "gpu-kernel-start: the $1 daemon exited before it was ready:" >&2
            tail -20 "$out/$1.stderr" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "gpu-kernel-start: the $1 daemon was not ready after 300 s" >&2
    kill -TERM "$pid"
    wait "$pid"
    return 1
}

cold_cache="$work/cache-daemon"
cold=$(start cold "$cold_cache") || exit 1
warm=$(start warm "$cold_cache") || exit 1

warm_cache="$work/cache-warm"
t0=$(now)
PROVER_KERNEL_CACHE="$warm_cache" "$prover" kernels warm --json >"$out/kernels-warm-cold.json" 2>"$out/kernels-warm-cold.stderr" || {
    echo "gpu-kernel-start: prover kernels warm failed:" >&2
    cat "$out/kernels-warm-cold.stderr" >&2
    exit 1
}
t1=$(now)
PROVER_KERNEL_CACHE="$warm_cache" "$prover" kernels warm --json >"$out/kernels-warm-again.json" 2>&1 || exit 1
t2=$(now)

python3 - "$out" "$cold" "$warm" "$t0" "$t1" "$t2" <<'PY' | tee "$out/summary.txt"
import json, sys
out, cold, warm, t0, t1, t2 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), *map(float, sys.argv[4:])

def log_events(name):
    evs = []
    for line in open(f"{out}/{name}.log"):
        try:
            evs.append(json.loads(line))
        except ValueError:
            pass
    return evs

def fields(e):
    return e.get("fields", e)

print(f"{'measurement':<44} {'seconds':>9}")
print(f"{'cold daemon start, empty cache: to ready':<44} {cold:>9.2f}")
print(f"{'warm daemon start, filled cache: to ready':<44} {warm:>9.2f}")
print(f"{'prover kernels warm, empty cache (process)':<44} {t1 - t0:>9.2f}")
print(f"{'prover kernels warm, filled cache (process)':<44} {t2 - t1:>9.2f}")
for name in ("cold", "warm"):
    for e in log_events(name):
        f = fields(e)
        if f.get("message") == "kernels loaded":
            print(f"{name + ': all units compiled (wall)':<44} {float(f['compile_ms']) / 1e3:>9.2f}")
            print(f"{name + ': cubins loaded by the driver':<44} {float(f['load_ms']) / 1e3:>9.2f}")
print()
print("cold start, per unit (NVRTC + assembler, units in parallel):")
for e in log_events("cold"):
    f = fields(e)
    if f.get("message") == "kernels compiled by NVRTC":
        print(f"  {f['unit']:<22} {int(f['ms']) / 1e3:>7.1f} s  {f['bytes']} bytes")
r = json.load(open(f"{out}/kernels-warm-cold.json"))
print(f"\nkernels warm (empty cache) for {r['arch']}, driver {r['driver']}, nvrtc {r['nvrtc']}: wall {r['wall_ms'] / 1e3:.1f} s")
for u in r["units"]:
    ms = u["compile_ms"]
    print(f"  {u['unit']:<22} {u['from']:<9} {'-' if ms is None else f'{ms / 1e3:.1f} s'}")
again = json.load(open(f"{out}/kernels-warm-again.json"))
print("kernels warm again: " + ", ".join(sorted({u['from'] for u in again['units']})))
PY
