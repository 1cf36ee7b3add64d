#!/bin/sh
# Prints the directory holding libnvrtc.so.13 from the `nvidia-cuda-nvrtc`
# pip wheel, for LD_LIBRARY_PATH. Exits 1 with a hint when it is not installed.
set -eu
py=${PYTHON:-python3}
dir=$("$py" - <<'PY' 2>/dev/null || true
import os, glob
try:
    import nvidia
except ImportError:
    raise SystemExit(1)
for root in nvidia.__path__:
    for lib in sorted(glob.glob(os.path.join(root, "*", "lib", "libnvrtc.so.*"))):
        print(os.path.dirname(lib))
        raise SystemExit(0)
raise SystemExit(1)
PY
)
if [ -z "$dir" ]; then
    echo "libnvrtc.so.13 not found; install it with: pip install 'nvidia-cuda-nvrtc==13.0.*'" >&2
    exit 1
fi
echo "$dir"
