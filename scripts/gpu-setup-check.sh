#!/usr/bin/env bash
# `prover setup --backend cuda` on a GPU host: the GPU setup tests (the
# fixed-base kernels against blstrs, CUDA parameter files byte-identical to
# the CPU setup's for chain 2^10..2^16 and sha256), then `prover setup`
# timed on the CPU and on CUDA for chain at 2^20, 2^22, 2^24 and (CUDA
# only) 2^26 into a scratch parameter folder, each set deleted once timed
# (a 2^26 set is about 40 GB), the CPU and CUDA digests compared where
# both ran. Prints a table and writes it to OUT_DIR/setup-table.md.
# For the sizes in SETUP_CHECK_PROVE_LOGS the CUDA set is kept long enough
# to prove with it: `prover bench --cuda --no-cpu` (whole proof, device
# time from CUDA events, bellperson's verifier), with the GPU's memory in
# use sampled by nvidia-smi; the bench tables go to OUT_DIR/bench-*.txt.
#
# Usage: scripts/gpu-setup-check.sh BIN_DIR OUT_DIR
#   BIN_DIR  holds the prover's `it-*` integration-test binary and the
#            `prover` binary (what scripts/gpu-check.sh copies there)
#   OUT_DIR  logs, the table, and the scratch parameter folder
# Environment: SETUP_CHECK_LOGS (chain sizes as log2, default
# "20 22 24 26"), SETUP_CHECK_CPU_MAX_LOG (largest CPU run, default 22:
# the CPU takes about 48 s at 2^22 on 16 cores), SETUP_CHECK_TIMEOUT
# (seconds per setup run, default 300), SETUP_CHECK_PROVE_LOGS (chain
# sizes proven with the CUDA set, default "26"; "" for none),
# SETUP_CHECK_BELLPERSON_SIZES (sizes timed against bellperson's generator,
# default "2^16,2^18"; "" for none).
set -uo pipefail

bin_dir=${1:?usage: scripts/gpu-setup-check.sh BIN_DIR OUT_DIR}
out=${2:?usage: scripts/gpu-setup-check.sh BIN_DIR OUT_DIR}
logs=${SETUP_CHECK_LOGS:-20 22 24 26}
cpu_max=${SETUP_CHECK_CPU_MAX_LOG:-22}
limit=${SETUP_CHECK_TIMEOUT:-300}
prove_logs=${SETUP_CHECK_PROVE_LOGS-26}
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)

# libnvrtc: the pip wheel's folder if present, and the toolkit's.
if nvrtc_dir=$(scripts/nvrtc-libdir.sh 2>/dev/null); then
    export LD_LIBRARY_PATH="$nvrtc_dir:${LD_LIBRARY_PATH:-}"
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$d"
done

it_bin=$(ls -t "$bin_dir"/it-* 2>/dev/null | grep -v '\.d$' | head -1)
prover="$bin_dir/prover"
if [ -z "$it_bin" ] || [ ! -x "$prover" ]; then
    echo "gpu-setup-check: need an it-* test binary and prover in $bin_dir" >&2
    exit 2
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-setup-check: no NVIDIA device answers nvidia-smi" >&2
    exit 2
fi

status=0
echo "== GPU setup tests ($it_bin cuda::setup_)"
# TEST_REQUIRE=gpu: a missing device fails the tests instead of skipping them.
if ! TEST_REQUIRE=gpu "$it_bin" cuda::setup_ --test-threads=1 --nocapture \
    >"$out/setup-tests.log" 2>&1; then
    status=1
fi
grep -E '^test |^setup |^fixed-base|test result' "$out/setup-tests.log"

scratch="$out/scratch-params"
rm -rf "$scratch"

# Peak resident memory of a run, where GNU time is installed.
gnu_time=""
[ -x /usr/bin/time ] && /usr/bin/time -f %M true >/dev/null 2>&1 && gnu_time=/usr/bin/time

# A chain proof with the parameters in DIR: prover bench on CUDA alone,
# the GPU's memory sampled every 200 ms; the largest sample is printed.
prove_with() {
    local dir=$1 log=$2 bench="$out/bench-chain-$2.txt" smi="$out/smi-chain-$2.csv"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$smi" 2>/dev/null &
    local smi_pid=$!
    timeout "$limit" "$prover" bench --cuda --no-cpu --no-baseline --no-compiled \
        --circuits chain --log-sizes "$log" --params-dir "$dir" >"$bench" 2>&1 || {
        echo "gpu-setup-check: prover bench at 2^$log failed:" >&2
        tail -5 "$bench" >&2
        status=1
    }
    kill "$smi_pid" 2>/dev/null
    wait "$smi_pid" 2>/dev/null
    grep -v '^[[:space:]]*$' "$bench" | grep -v ' INFO \| DEBUG ' >&2
    echo "gpu-setup-check: GPU memory in use at most $(sort -n "$smi" | tail -1) MiB during the 2^$log proof" >&2
}

# One `prover setup` run: writes "SECONDS SHA256 PEAK_GB" ("failed - -"
# when it fails) to $result, proves with the set where asked (PROVE_LOG),
# then deletes it. Run in this shell, not a subshell: the next run must
# not start before this one's set is gone.
result="$out/.setup-result"
run_setup() {
    local backend=$1 size=$2 dir="$scratch/$1" prove_log=${3:-}
    mkdir -p "$dir"
    local log="$out/setup-$backend-$size.log" rss="$out/setup-$backend-$size.rss"
    local cmd=(timeout "$limit" "$prover" setup --circuit chain --size "$size"
        --params-dir "$dir" --backend "$backend" --force --log info,prover=debug)
    [ -n "$gnu_time" ] && cmd=("$gnu_time" -f %M -o "$rss" "${cmd[@]}")
    local start end
    start=$(date +%s.%N)
    if ! "${cmd[@]}" >"$log" 2>&1; then
        echo "gpu-setup-check: prover setup --backend $backend --size $size failed:" >&2
        tail -5 "$log" >&2
        echo "failed - -" >"$result"
        rm -rf "$dir"
        return
    fi
    end=$(date +%s.%N)
    # The digest the store computed while writing (its sidecar records it),
    # rather than reading 40 GB again.
    local sha peak=-
    sha=$(grep -o '"sha256": *"[0-9a-f]*"' "$dir/chain-$size.json" | grep -o '[0-9a-f]\{64\}')
    [ -s "$rss" ] && peak=$(awk '{ printf "%.1f", $1 / 1048576 }' "$rss")
    echo "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') ${sha:--} $peak" >"$result"
    [ -n "$prove_log" ] && prove_with "$dir" "$prove_log"
    rm -rf "$dir"
}

table="| chain size | cpu (s) | cuda (s) | speedup | identical | cpu peak (GB) | cuda peak (GB) |
|---|---|---|---|---|---|---|"
for log in $logs; do
    size=$((1 << log))
    cpu_s=- cpu_sha=- cpu_peak=- speedup=- same=-
    if [ "$log" -le "$cpu_max" ]; then
        echo "== chain 2^$log on the CPU"
        run_setup cpu "$size"
        read -r cpu_s cpu_sha cpu_peak <"$result"
    fi
    echo "== chain 2^$log on CUDA"
    prove=""
    case " $prove_logs " in *" $log "*) prove=$log ;; esac
    run_setup cuda "$size" "$prove"
    read -r cuda_s cuda_sha cuda_peak <"$result"
    if [ "$cpu_s" = failed ] || [ "$cuda_s" = failed ]; then
        status=1
    fi
    if [ "$cpu_sha" != - ] && [ "$cuda_sha" != - ]; then
        if [ "$cpu_sha" = "$cuda_sha" ]; then same=yes; else same=NO; status=1; fi
        speedup=$(awk -v a="$cpu_s" -v b="$cuda_s" 'BEGIN { printf "%.1fx", a / b }')
    fi
    echo "   cpu $cpu_s s, cuda $cuda_s s, identical $same"
    table="$table
| 2^$log | $cpu_s | $cuda_s | $speedup | $same | $cpu_peak | $cuda_peak |"
done
rm -rf "$scratch" "$result"

# bellperson's generator beside ours (CPU and CUDA, all three sets compared)
# at the sizes where it finishes in reason: it spends about 255 doublings
# a point on one core per query.
if [ -n "${SETUP_CHECK_BELLPERSON_SIZES-2^16,2^18}" ]; then
    echo "== bellperson's generator beside ours"
    timeout "$limit" "$prover" setup --circuit chain --bench --backend cuda \
        --bench-sizes "${SETUP_CHECK_BELLPERSON_SIZES-2^16,2^18}" >"$out/setup-bellperson.md" 2>"$out/setup-bellperson.log" ||
        { echo "gpu-setup-check: prover setup --bench failed:" >&2; tail -5 "$out/setup-bellperson.log" >&2; status=1; }
    cat "$out/setup-bellperson.md"
fi

# Where each run's time went (the generator's and the writer's debug lines).
for f in "$out"/setup-*.log; do
    grep -ho 'generated parameters.*\|staged a file path=[^ ]*params .*\|parameter writer waited.*' "$f" | sed "s|^|$(basename "$f" .log): |"
done

echo
echo "$table" | tee "$out/setup-table.md"
echo "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores; commit $("$prover" --version 2>/dev/null)"
exit $status
