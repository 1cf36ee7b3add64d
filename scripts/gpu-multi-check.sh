#!/usr/bin/env bash
# The same job on one GPU and on every GPU of the host: wall time from
# submit to result, the speedup, and whether the proofs are byte-identical
# (same witness seed and r, s seed in both runs).
#
# Usage: scripts/gpu-multi-check.sh BIN_DIR OUT_DIR
# Environment: as scripts/gpu-daemon-run.sh (GPU_DAEMON_SIZE, default 2^22;
# GPU_DAEMON_PARTITIONS, default 10 here; the parameter directory is shared
# by both runs, so the set is generated once).
set -uo pipefail

bin_dir=${1:?usage: gpu-multi-check.sh BIN_DIR OUT_DIR}
out=${2:?usage: gpu-multi-check.sh BIN_DIR OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
params=$(mktemp -d)
trap 'rm -rf "$params"' EXIT
export GPU_DAEMON_PARAMS=$params GPU_DAEMON_PARTITIONS=${GPU_DAEMON_PARTITIONS:-10}
status=0
GPU_DAEMON_DEVICES='[0]' "$here/gpu-daemon-run.sh" "$bin_dir" "$out/one" | tee "$out/one.txt" || status=1
GPU_DAEMON_DEVICES='"all"' "$here/gpu-daemon-run.sh" "$bin_dir" "$out/all" | tee "$out/all.txt" || status=1
python3 - "$out" <<'PY' || status=1
import json, re, sys
out = sys.argv[1]
def run(name):
    job = json.load(open(f"{out}/{name}/submit.json"))
    proofs = job["result"]["proofs"]
    wall = float(re.search(r"in ([0-9.]+) s from submit", open(f"{out}/{name}.txt").read()).group(1))
    devices = sorted({p.get("device") for p in proofs}, key=str)
    return wall, [p["proof"] for p in proofs], devices
one, all_ = run("one"), run("all")
same = one[1] == all_[1]
print(f"one GPU {one[0]:.2f} s on devices {one[2]}, all GPUs {all_[0]:.2f} s on devices {all_[2]}: "
      f"speedup {one[0] / all_[0]:.2f}x, proofs byte-identical: {same}")
sys.exit(0 if same else 1)
PY
exit $status
