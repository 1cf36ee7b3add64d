#!/usr/bin/env bash
# The staging benchmark (fleetctl/tests/it/bench_staging.rs): a lab of 32
# hosts with 20 ms netem delay, a stand-in prover whose prepare phase
# (`kernels warm`) takes 20 s, rolled out in batches of 8 without and with
# staging. Prints the rollout times, the serving gaps and the speedup.
# Usage (root): scripts/bench-staging.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "the lab needs root" >&2
    exit 2
fi
exec cargo test -p fleetctl --test it bench_staging:: -- --ignored --nocapture
