#!/usr/bin/env bash
# The staging benchmark (fleetctl/tests/it/bench_staging.rs): a lab of 32
# hosts, each link limited to BENCH_MBIT (default 100 Mbit/s, tbf; netem
# delay too where the kernel has netem), a stand-in prover padded to a real
# build's size whose prepare phase (`kernels warm`) takes 20 s, rolled out
# in batches of 8 without and with staging, the upload gzip-compressed and
# plain. Prints the rollout times, the serving gaps, the bytes sent and the
# speedups.
# Usage (root): scripts/bench-staging.sh
# Environment: BENCH_MBIT (0: no limit), BENCH_PAYLOAD (file whose bytes pad
# each release; default the cargo binary that builds the test, a Rust release
# build), BENCH_PAYLOAD_MIB (cap, default 48).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "the lab needs root" >&2
    exit 2
fi
exec cargo test -p fleetctl --test it bench_staging:: -- --ignored --nocapture
