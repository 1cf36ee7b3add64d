#!/usr/bin/env python3
"""One line per partition (and per proof) of a daemon's timing log.

Usage: scripts/partition-summary.py TIMING.jsonl

For the benchmark scripts' summaries (fil-c2-bench.sh, fil-32g-run.sh):
each partition record's circuit, job, partition, every phase in ms, the
device's busy time and the bytes it uploaded; each proof record whole but
for host and build. Lines that are not JSON records are skipped.
"""
import json
import sys


def main(path):
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if not isinstance(r, dict):
                continue
            if r.get("kind") == "proof":
                rest = {k: v for k, v in r.items() if k not in ("host", "build")}
                print("  proof " + json.dumps(rest))
            if r.get("kind") != "partition":
                continue
            phases = r.get("phases_ms") or {}
            print(
                f"  {r.get('circuit', '?')} job {str(r.get('job_id', ''))[:10]} p{r.get('partition')}: "
                + " ".join(f"{k}={v:.0f}" for k, v in phases.items() if isinstance(v, (int, float)))
                + f" device_busy={r.get('device_busy_ms') or 0:.0f}"
                + f" h2d_gb={(r.get('h2d_bytes') or 0) / 1e9:.1f}"
            )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2])
    main(sys.argv[1])
