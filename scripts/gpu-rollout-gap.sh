#!/usr/bin/env bash
# The serving gap of `fleetctl rollout` on this GPU host (local transport):
#   1. first install of build A, kernel cache empty (prepare compiles);
#   2. build B (A with bytes appended: same kernels) over A: kernels cached;
#   3. build A over B with a new, empty kernel cache: a build whose kernels
#      the host has never compiled (prepare compiles while B serves);
#   4. the same without the prepare step (the new daemon compiles while
#      the old one serves: the rollout hands over);
#   5. build B over A without the handover step (drain, wait for the pinned
#      memory, start): the sequence the handover replaces.
# Prints per run the whole rollout time, the serving gap and the prepare
# step's time, from `--summary-json`.
#
# Usage: scripts/gpu-rollout-gap.sh BIN_DIR OUT_DIR
#   BIN_DIR holds `prover` and `fleetctl` (release builds).
# Environment: GPU_ROLLOUT_BUDGET (default 64GiB), GPU_ROLLOUT_POOL
# (preallocated pinned pool, default 32GiB).
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
bin_dir=$(cd "${1:?usage: gpu-rollout-gap.sh BIN_DIR OUT_DIR}" && pwd)
out=${2:?usage: gpu-rollout-gap.sh BIN_DIR OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
cleanup() {
    # Stop the daemon the rollouts left running (by its pid file).
    if [ -f "$work/deploy/run/prover.pid" ]; then
        kill -TERM "$(cat "$work/deploy/run/prover.pid")" 2>/dev/null
        sleep 5
    fi
    rm -rf "$work"
}
trap cleanup EXIT
cd "$work" || exit 1
cat >prover.toml <<EOC
listen = "127.0.0.1:$((20000 + RANDOM % 20000))"
drain_timeout = "60s"
test_params = true
[[preload]]
circuit = "chain"
size = 1024
[paths]
pid_file = "run/prover.pid"
log_file = "logs/prover.log"
timing_log = "logs/timing.jsonl"
params_dir = "params"
[memory]
budget = "${GPU_ROLLOUT_BUDGET:-64GiB}"
[pool]
allocator = "cuda"
preallocate = "${GPU_ROLLOUT_POOL:-32GiB}"
[gpu]
devices = [0]
EOC
cat >fleet.yaml <<EOI
hosts:
  gpu:
    transport: local
    install_dir: $work/deploy
    config_file: prover.toml
EOI
cp "$bin_dir/prover" prover-a
cp "$bin_dir/prover" prover-b
printf '\nbuild b\n' >>prover-b
grep -v -- '- prepare' "$repo/playbooks/rollout.yaml" >unprepared.yaml
grep -v -- '- handover' "$repo/playbooks/rollout.yaml" >no-handover.yaml
rollout() { # $1: name, $2: binary, $3: kernel cache, $4: playbook
    PROVER_KERNEL_CACHE="$work/$3" "$bin_dir/fleetctl" run -p "$4" -i fleet.yaml --plain \
        --binary "$2" --summary-json "$out/$1.json" >"$out/$1.txt" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        echo "gpu-rollout-gap: rollout $1 failed (exit $rc):" >&2
        tail -30 "$out/$1.txt" >&2
    fi
    return $rc
}
rollout 1-first-install prover-a cache1 rollout || exit 1
rollout 2-kernels-cached prover-b cache1 rollout || exit 1
rollout 3-kernels-new prover-a cache2 rollout || exit 1
rollout 4-kernels-new-no-prepare prover-b cache3 ./unprepared.yaml || exit 1
rollout 5-no-handover prover-a cache3 ./no-handover.yaml || exit 1
cp "$work/deploy/logs/prover.log" "$out/prover.log" 2>/dev/null
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import glob, json, os, sys
out = sys.argv[1]
print(f"{'rollout':<28} {'total s':>8} {'gap s':>7} {'prepare s':>10} {'handover s':>11} {'drain s':>8} {'verify s':>9}")
for path in sorted(glob.glob(f"{out}/*.json")):
    s = json.load(open(path))
    h = s["hosts"][0]
    step = lambda n: h["steps"].get(n, {}).get("ms")
    f = lambda ms: "-" if ms is None else f"{ms / 1e3:.1f}"
    name = os.path.basename(path)[:-5]
    print(f"{name:<28} {f(s['duration_ms']):>8} {f(h['serving_gap_ms']):>7} {f(step('prepare')):>10} {f(step('handover')):>11} {f(step('drain')):>8} {f(step('verify')):>9}")
PY
# What prepare and the new daemon did with the kernels in each run (a
# prepare that finds them cached is quick; one that compiles is not).
grep -H "kernels warm\|compiled .* units\|from cache" "$out"/*.txt 2>/dev/null | head -20
grep -c "kernels compiled by NVRTC" "$out/prover.log" 2>/dev/null | sed 's/^/units the last daemon compiled itself: /'
