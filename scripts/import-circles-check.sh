#!/usr/bin/env bash
# Checks scripts/import-circles.py on two tiny crates: a circle hidden
# behind a child module whose name starts with a sibling's (`record` and
# `record_split`) is found, and the same crate with the circle broken is clean.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/circle/a" "$t/clean/a"
for c in circle clean; do
    printf 'mod record;\nmod record_split;\npub use record::R;\npub use record_split::S;\npub struct E;\n' >"$t/$c/a/mod.rs"
    printf 'pub struct R;\n' >"$t/$c/a/record.rs"
    printf 'mod a;\n' >"$t/$c/lib.rs"
done
printf 'use super::E;\npub struct S(E);\n' >"$t/circle/a/record_split.rs"
printf 'use super::record::R;\npub struct S(R);\n' >"$t/clean/a/record_split.rs"
if python3 "$here/import-circles.py" "$t/circle" >"$t/out" 2>&1; then
    echo "import-circles-check: the a <-> a::record_split circle was not found:" >&2
    cat "$t/out" >&2
    exit 1
fi
grep -q 'circle of 2 modules: a, a::record_split' "$t/out" || {
    echo "import-circles-check: unexpected report:" >&2
    cat "$t/out" >&2
    exit 1
}
python3 "$here/import-circles.py" "$t/clean" >"$t/out" 2>&1 || {
    echo "import-circles-check: a clean crate was reported:" >&2
    cat "$t/out" >&2
    exit 1
}
echo "import-circles-check: ok"
