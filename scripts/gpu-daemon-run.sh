#!/usr/bin/env bash
# A pipelined daemon run on the CUDA backend: start `prover daemon` with a
# preloaded parameter set (bases resident before ready), submit one
# job of many partitions, wait for it, drain, and print proofs per minute
# and `fleetctl timing report` (occupied and kernel busy per device).
#
# Usage: scripts/gpu-daemon-run.sh BIN_DIR OUT_DIR
#   BIN_DIR holds `prover` and `fleetctl`; OUT_DIR receives daemon.out,
#   submit.json, report.txt and the daemon's logs.
# Environment: GPU_DAEMON_CIRCUIT (chain or sha256, default chain),
# GPU_DAEMON_SIZE (constraints, default 4194304 = 2^22),
# GPU_DAEMON_PARTITIONS (default 16), GPU_DAEMON_WORKERS (workers per
# device, default 2), GPU_DAEMON_SYNTH (synthesis threads, default 12),
# GPU_DAEMON_BUDGET (memory budget, default 96GiB), GPU_DAEMON_DEVICES
# (`"all"` or a TOML list such as `[0, 1]`, default "all"), GPU_DAEMON_PARAMS
# (parameter directory kept between runs, default a fresh one),
# GPU_DAEMON_COMPILED (synthesis from compiled constraints, default true),
# GPU_DAEMON_RS_SEED (seed of r, s: equal seeds give equal proof bytes,
# default 7).
set -uo pipefail

bin_dir=${1:?usage: gpu-daemon-run.sh BIN_DIR OUT_DIR}
out=${2:?usage: gpu-daemon-run.sh BIN_DIR OUT_DIR}
circuit=${GPU_DAEMON_CIRCUIT:-chain}
size=${GPU_DAEMON_SIZE:-4194304}
parts=${GPU_DAEMON_PARTITIONS:-16}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/daemon.toml" <<EOF
listen = "127.0.0.1:0"
drain_timeout = "5m"
test_params = true
[paths]
pid_file = "$work/run/prover.pid"
log_file = "$out/prover.log"
timing_log = "$out/timing.jsonl"
params_dir = "${GPU_DAEMON_PARAMS:-$work/params}"
[memory]
budget = "${GPU_DAEMON_BUDGET:-96GiB}"
[pool]
allocator = "cuda"
preallocate = "auto"
[gpu]
devices = ${GPU_DAEMON_DEVICES:-\"all\"}
workers_per_device = ${GPU_DAEMON_WORKERS:-2}
[synthesis]
concurrency = ${GPU_DAEMON_SYNTH:-12}
lookahead = 12
compiled = ${GPU_DAEMON_COMPILED:-true}
[[preload]]
circuit = "$circuit"
size = $size
EOF
"$bin_dir/prover" daemon --config "$work/daemon.toml" >"$out/daemon.out" 2>&1 &
pid=$!
ready=""
# Parameter generation at 2^22 takes about a minute on 16 cores; 2^24 several.
for i in $(seq 900); do
    if "$bin_dir/prover" client ready --config "$work/daemon.toml" >/dev/null 2>&1; then
        ready=$i
        break
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "gpu-daemon-run: the daemon exited before it was ready:" >&2
        tail -20 "$out/daemon.out" >&2
        exit 1
    fi
    sleep 1
done
if [ -z "$ready" ]; then
    echo "gpu-daemon-run: not ready after 900 s" >&2
    kill -TERM "$pid"
    wait "$pid"
    exit 1
fi
echo "daemon ready after about ${ready} s"
t0=$(date +%s.%N)
"$bin_dir/prover" client submit --config "$work/daemon.toml" --circuit "$circuit" --size "$size" \
    --partitions "$parts" --rs-seed "${GPU_DAEMON_RS_SEED:-7}" --wait --timeout 600s \
    >"$out/submit.json" 2>&1
rc=$?
t1=$(date +%s.%N)
python3 - "$out/submit.json" "$t0" "$t1" "$parts" "$size" "$rc" "$circuit" <<'PY'
import json, sys
path, t0, t1, parts, size, rc, circuit = sys.argv[1:]
wall = float(t1) - float(t0)
try:
    job = json.load(open(path))
    proofs = (job.get("result") or {}).get("proofs", [])
    verified = sum(1 for p in proofs if p.get("verified"))
    state = job.get("state")
except (OSError, ValueError) as e:
    verified, state = 0, f"unreadable ({e})"
print(f"submit rc {rc}, job {state}: {parts} partitions of {circuit} {size} in {wall:.2f} s "
      f"from submit to result, {int(parts) * 60 / wall:.1f} partitions a minute, {verified} verified")
PY
kill -TERM "$pid"
wait "$pid"
"$bin_dir/fleetctl" timing report "$out/timing.jsonl" | tee "$out/report.txt"
[ "$rc" -eq 0 ]
