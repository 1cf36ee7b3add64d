#!/usr/bin/env bash
# Times `fleetctl experiment -f experiments/instrumented-canary.yaml` end to
# end on a lab fleet of 4: 2 canaries and 2 baselines, 20 jobs per host (the
# example's workload), release builds. The candidate is the baseline build with a tag appended (a release
# of its own, the same program), so the experiment ships it, measures it,
# passes it and promotes it to the rest of the selection.
#
# Usage (root): scripts/bench-experiment.sh [ROUNDS]   (default 3)
# Prints one line per round and the experiment's report of the last one;
# logs and reports go to target/bench-experiment/.
set -euo pipefail

rounds=${1:-3}
cd "$(dirname "$0")/.."
root=$(pwd)
if [ "$(id -u)" != 0 ]; then
    echo "the lab needs root" >&2
    exit 2
fi

cargo build --release -p fleetctl -p prover >&2
fleetctl=$root/target/release/fleetctl
out=$root/target/bench-experiment
rm -rf "$out"
mkdir -p "$out"
sed -n '/^pub const LAB_DAEMON_CONFIG: &str = r#"/,/^"#;/p' tests/src/lib.rs | sed '1d;$d' > "$out/prover.toml"
cp experiments/instrumented-canary.yaml "$out/bench.yaml"

up=$("$fleetctl" lab up --hosts 4)
lab_dir=$(awk '/^ *dir:/ { print $2 }' <<<"$up")
lab_id=$(basename "$lab_dir")
trap '"$fleetctl" lab down --id "$lab_id" >&2 || true' EXIT
inv="$lab_dir/inventory.yaml"

cd "$out"
"$fleetctl" rollout --plain --binary "$root/target/release/prover" -i "$inv" \
    -e config_file=prover.toml > baseline.log 2>&1

for r in $(seq 1 "$rounds"); do
    cand="$out/prover-candidate-$r"
    cp "$root/target/release/prover" "$cand"
    printf 'bench-candidate-%s' "$r" >> "$cand"
    start=$(date +%s.%N)
    set +e
    "$fleetctl" experiment --plain -f bench.yaml --binary "$cand" -i "$inv" \
        -e config_file=prover.toml --json "round-$r.json" --html "round-$r.html" \
        > "round-$r.log" 2>&1
    code=$?
    set -e
    end=$(date +%s.%N)
    verdict=$(python3 -c "import json,sys; print(json.load(open('round-$r.json'))['verdict'])" 2>/dev/null || echo "?")
    printf 'round %s: %s s, exit %s, verdict %s\n' "$r" "$(awk "BEGIN { printf \"%.1f\", $end - $start }")" "$code" "$verdict"
done
sed -n '/^experiment /,$p' "round-$rounds.log"
