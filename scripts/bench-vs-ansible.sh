#!/usr/bin/env bash
# fleetctl against Ansible on the same rollout: a lab of N hosts, the real
# prover, the same steps (fleetctl's playbooks/rollout.yaml and its Ansible
# transcription fleetctl/benches/ansible/rollout.yml: canary then batches of
# 3, upload, drain, wait for memory, switch, start detached, ready, 3 s
# watch, smoke proof, health gate). Each timed run upgrades every host to a
# build it has never seen, so both tools upload and restart everywhere.
#
# Usage (root): scripts/bench-vs-ansible.sh [HOSTS] [ROUNDS]   (default 32 2)
# Needs ansible-playbook on PATH or ANSIBLE_PLAYBOOK=/path/to/it
# (`pip install ansible-core`). Prints a table; logs go to target/bench-vs-ansible/.
set -euo pipefail

hosts=${1:-32}
rounds=${2:-2}
cd "$(dirname "$0")/.."
root=$(pwd)
ansible=${ANSIBLE_PLAYBOOK:-$(command -v ansible-playbook || true)}
if [ -z "$ansible" ]; then
    echo "ansible-playbook not found: pip install ansible-core, or set ANSIBLE_PLAYBOOK" >&2
    exit 2
fi
if [ "$(id -u)" != 0 ]; then
    echo "the lab needs root" >&2
    exit 2
fi

cargo build --release -p fleetctl -p prover >&2
fleetctl=$root/target/release/fleetctl
out=$root/target/bench-vs-ansible
rm -rf "$out"
mkdir -p "$out/builds"
sed -n '/^pub const LAB_DAEMON_CONFIG: &str = r#"/,/^"#;/p' tests/src/lib.rs | sed '1d;$d' > "$out/prover.toml"

up=$("$fleetctl" lab up --hosts "$hosts")
lab_dir=$(awk '/^ *dir:/ { print $2 }' <<<"$up")
lab_id=$(basename "$lab_dir")
trap '"$fleetctl" lab down --id "$lab_id" >&2 || true' EXIT

# The lab's hosts as an Ansible inventory: same key, same pinned host keys.
{
    echo "[lab]"
    awk '/^  h[0-9]+:/ { name = $1; sub(":", "", name); addr = $0;
         sub(/.*address: /, "", addr); sub(/[,} ].*/, "", addr);
         print name " ansible_host=" addr }' "$lab_dir/inventory.yaml"
    echo "[lab:vars]"
    echo "ansible_user=root"
    echo "ansible_ssh_private_key_file=$lab_dir/client_key"
    # The same key exchange preference fleetctl uses, so neither tool pays
    # for the post-quantum hybrid and the other not.
    echo "ansible_ssh_common_args=-o UserKnownHostsFile=$lab_dir/known_hosts -o StrictHostKeyChecking=yes -o KexAlgorithms=^curve25519-sha256"
} > "$out/ansible-inventory.ini"

# Distinct builds of the same binary: a trailing tag changes the sha256 (a
# new release for both tools) and nothing else.
build() {
    local f="$out/builds/prover-$1"
    cp target/release/prover "$f"
    printf 'bench-build-%s' "$1" >> "$f"
    echo "$f"
}

run_fleetctl() {
    "$fleetctl" run -p rollout -i "$lab_dir/inventory.yaml" -e "config_file=$out/prover.toml" \
        --binary "$1" --plain > "$out/$2.log" 2>&1
}

run_ansible() {
    local sha
    sha=$(sha256sum "$1" | cut -c1-64)
    ANSIBLE_CONFIG=$root/fleetctl/benches/ansible/ansible.cfg \
        "$ansible" -i "$out/ansible-inventory.ini" fleetctl/benches/ansible/rollout.yml \
        -e "binary=$1" -e "config=$out/prover.toml" -e "sha=$sha" > "$out/$2.log" 2>&1
}

timed() {
    local start end
    start=$(date +%s.%N)
    "$@" || { echo "FAILED: $* (logs in $out)" >&2; exit 1; }
    end=$(date +%s.%N)
    printf '%.2f' "$(echo "$end - $start" | bc)"
}

# Every host on a first build, so each timed run is an upgrade.
run_fleetctl "$(build 0)" initial

declare -a f_times a_times
n=1
for r in $(seq "$rounds"); do
    f_times+=("$(timed run_fleetctl "$(build $n)" "fleetctl-$r")")
    n=$((n + 1))
    a_times+=("$(timed run_ansible "$(build $n)" "ansible-$r")")
    n=$((n + 1))
done

# Both tools must have left every host on the last build, daemon running.
last_sha=$(sha256sum "$out/builds/prover-$((n - 1))" | cut -c1-64)
"$fleetctl" status -i "$lab_dir/inventory.yaml" --json > "$out/status.json"
bad=$(awk '/ansible_host=/ { print $1 }' "$out/ansible-inventory.ini" | while read -r h; do
    ssh -n -F "$lab_dir/ssh_config" "$h" "readlink /data/prover/current" | grep -q "$last_sha" || echo "$h"
done)
if [ -n "$bad" ]; then
    echo "hosts not on the last build: $bad" >&2
    exit 1
fi

# One command on every host and its output back: what `fleetctl status`
# does (the probe and the daemon's /status) against an Ansible ad-hoc shell
# of the same command, with new connections and with the masters kept from
# the run before.
probe='cd /data/prover && current/prover health --config current/prover.toml; current/prover client status --config current/prover.toml'
status_fleetctl() {
    "$fleetctl" status -i "$lab_dir/inventory.yaml" "${@:2}" > "$out/$1.log" 2>&1
}
status_ansible() {
    ANSIBLE_CONFIG=$root/fleetctl/benches/ansible/ansible.cfg ANSIBLE_SSH_CONTROL_PATH_DIR=$2 \
        "${ansible%-playbook}" lab -i "$out/ansible-inventory.ini" -m ansible.builtin.shell \
        -a "$probe" > "$out/$1.log" 2>&1
}
declare -a fs_new fs_kept as_new as_kept
status_fleetctl status-warmup
status_ansible adhoc-warmup "$out/cp-kept"
for r in $(seq 3); do
    fs_new+=("$(timed status_fleetctl "status-new-$r" -e ssh_persist=0)")
    fs_kept+=("$(timed status_fleetctl "status-kept-$r")")
    as_new+=("$(timed status_ansible "adhoc-new-$r" "$out/cp-new-$r")")
    as_kept+=("$(timed status_ansible "adhoc-kept-$r" "$out/cp-kept")")
done

echo
echo "| one command on $hosts lab hosts | new connections (s) | kept connections (s) |"
echo "|---|---|---|"
echo "| fleetctl status | ${fs_new[*]} | ${fs_kept[*]} |"
echo "| ansible lab -m shell (same command) | ${as_new[*]} | ${as_kept[*]} |"

echo
echo "| rollout to $hosts lab hosts ($(nproc) cores) | runs (s) |"
echo "|---|---|"
echo "| fleetctl run -p rollout | ${f_times[*]} |"
echo "| ansible-playbook (pipelining, ControlPersist, forks 64) | ${a_times[*]} |"
