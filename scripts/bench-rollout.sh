#!/usr/bin/env bash
# The rollout benchmark (fleetctl/tests/it/bench_rollout.rs): the built-in
# rollout playbook in batches of 16 (without and with `stage: 16`) on a lab
# of BENCH_HOSTS hosts (default 64), against a bash loop that only uploads
# and restarts, host after host, on the same lab; the stand-in prover of the
# step tests. Prints each run's time and, per step, the mean and slowest host.
# Usage (root): scripts/bench-rollout.sh
# Environment: BENCH_HOSTS (1-128, default 64), BENCH_ROUNDS (default 1),
# BENCH_PAYLOAD_MIB (padding of
# each build from a Rust release binary, 0-64, default 0).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "the lab needs root" >&2
    exit 2
fi
exec cargo test -p fleetctl --test it bench_rollout:: -- --ignored --nocapture
