#!/usr/bin/env bash
# Prints the folder holding libnvrtc.so.13 from the nvidia-cuda-nvrtc wheel; exits 1 if absent.
set -euo pipefail
for py in python3 python; do
    command -v "$py" >/dev/null || continue
    dir="$("$py" - <<'PY' 2>/dev/null || true
import os
try:
    import nvidia
except ImportError:
    raise SystemExit(1)
for base in nvidia.__path__:
    for sub in ("cu13/lib", "cuda_nvrtc/lib"):
        d = os.path.join(base, sub)
        if os.path.exists(os.path.join(d, "libnvrtc.so.13")):
            print(d)
            raise SystemExit(0)
raise SystemExit(1)
PY
)"
    if [ -n "$dir" ]; then echo "$dir"; exit 0; fi
done
exit 1
