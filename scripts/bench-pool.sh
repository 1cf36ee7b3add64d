#!/bin/bash
# Pinned pool benchmark on a GPU host, from a prebuilt prover binary.
# Usage: scripts/bench-pool.sh [path/to/prover] (a release binary; no toolchain needed).
B=$(realpath "${1:-$(dirname "$0")/prover}")
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "cores $(nproc); $(grep MemTotal /proc/meminfo); THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null); $(uname -r)"
ulimit -l unlimited 2>/dev/null; echo "memlock $(ulimit -l)"
f() { grep -E "RESULT|cuda pinned pool|WARN|ERROR|bench-pool|panick"; }
if [ -z "$DAEMON_ONLY" ]; then
echo "== warm-up: the VM's memory grows on first use"
timeout 120 "$B" bench-pool --gib 100 --no-baseline 2>&1 | f
for slab in 1024 256; do
echo "== 32 and 96 GiB, $slab MiB slabs, registered"
timeout 120 "$B" bench-pool --gib 32,96 --slab-mib $slab --no-baseline 2>&1 | f
done
fi
echo "== daemon, mlock pool, CPU backend: 32 GiB preallocated, cap 32 GiB"
D=$(mktemp -d); cd "$D"
cat > p.toml <<T
listen = "127.0.0.1:7979"
drain_timeout = "30s"
[memory]
budget = "${BUDGET:-64GiB}"
[pool]
allocator = "mlock"
preallocate = "${POOL:-32GiB}"
max_bytes = "${POOL:-32GiB}"
[gpu]
devices = []
T
t0=$(date +%s.%N)
"$B" daemon --config p.toml > out.log 2>&1 &
pid=$!
until grep -q "lifecycle: ready" logs/prover.log 2>/dev/null; do sleep 0.05; kill -0 $pid 2>/dev/null || break; done
t1=$(date +%s.%N); echo "ready_after_s $(awk "BEGIN{print $t1 - $t0}")"
until grep -q "preallocation done" logs/prover.log 2>/dev/null; do sleep 0.05; kill -0 $pid 2>/dev/null || break; done
t2=$(date +%s.%N); echo "whole_pool_after_s $(awk "BEGIN{print $t2 - $t0}")"
grep VmLck /proc/$pid/status; grep -E "Mlocked|MemAvailable" /proc/meminfo
kill -TERM $pid; t3=$(date +%s.%N); wait $pid; echo "exit rc $?"
t4=$(date +%s.%N); echo "drain_exit_s $(awk "BEGIN{print $t4 - $t3}")"
grep -E "Mlocked|MemAvailable" /proc/meminfo
grep -E "pinned pool|ready|exiting|ERROR|WARN" logs/prover.log | sed -e 's/\x1b\[[0-9;]*m//g' | cut -c1-220
