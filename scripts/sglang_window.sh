#!/usr/bin/env bash
# The DDTREE plugin's CPU checks against one SGLang release, in a throwaway environment.
#
#   scripts/sglang_window.sh VERSION [PYTEST ARGS...]
#   scripts/sglang_window.sh 0.5.15                   # the release that runs on the GPU
#   TORCH=2.14.1 scripts/sglang_window.sh 0.5.15 -x   # another torch than the one SGLang pins
#
# Needs a CPU machine with python3.11 and PyPI; no GPU. The environment is a venv at
# $SGLANG_WINDOW_HOME/sglang-VERSION[-torchTORCH] (default /tmp/sglang-window), outside the
# repository, built on the first run (a few minutes, about 6 GB) and reused after; delete it to
# rebuild. It holds sglang==VERSION, torch==$TORCH (default: the release SGLang pins) with a matching
# torchvision, pytest, and SGLang's other requirements at its pins less the GPU-only ones (kernels,
# flash-attn, flashinfer, NVIDIA and CUDA libraries, torchaudio, torchcodec, torchao, timm). The
# repository is not installed: the checks run on its working tree.
#
# The checks, with SGLANG_DDTREE_ALLOW_UNTESTED=1 so that a release outside the window is checked too:
#   import  the plugin's SGLang-facing modules import (a missing module fails here; pytest would skip);
#   pytest  tests/test_sglang_*.py, slow ones included: registration through SGLang's load_plugins and
#           HookRegistry, ServerArgs resolution with --speculative-algorithm DDTREE, the worker against
#           SGLang's DFlashWorkerV2 (signatures, one decode round with the model calls stubbed), the
#           hooks on SGLang's own classes.
# Prints the versions, then "import: pass|FAIL" and "pytest: pass|FAIL" (after the failed tests).
# Exit status: 0 both pass, 1 a check failed, 2 the environment did not build (the log's tail shown).
set -euo pipefail

VERSION=${1:?usage: scripts/sglang_window.sh VERSION [PYTEST ARGS...]}
shift
REPO=$(cd "$(dirname "$0")/.." && pwd)
ENV=${SGLANG_WINDOW_HOME:-/tmp/sglang-window}/sglang-$VERSION${TORCH:+-torch$TORCH}
PY=$ENV/bin/python

build() {
  local pip=("$PY" -m pip install --disable-pip-version-check)
  python3.11 -m venv "$ENV"
  "${pip[@]}" packaging pytest
  "${pip[@]}" --no-deps "sglang==$VERSION"
  # SGLang's requirements for this platform less the GPU-only ones; torch: $TORCH, else SGLang's pin.
  "$PY" - "${TORCH:-}" > "$ENV/requirements.txt" <<'EOF'
import re
import sys
from importlib.metadata import requires

from packaging.requirements import Requirement

GPU_ONLY = re.compile(
    r"(torchaudio|torchcodec|torchao|torch-memory-saver|timm|nvidia-.*|nvshmem.*|cuda-.*|flash.*|sgl-.*"
    r"|sglang-kernel|tilelang|tokenspeed-mla|quack-kernels|humming-kernels|kernels|apache-tvm-ffi)"
)
torch = sys.argv[1]
for line in requires("sglang"):
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    name = re.sub(r"[-_.]+", "-", req.name).lower()
    if name == "torch":
        torch = torch or str(req.specifier).removeprefix("==")
    elif not GPU_ONLY.fullmatch(name):
        print(str(req).split(";")[0])
print(f"torch=={torch}")
EOF
  grep '^torch==' "$ENV/requirements.txt" > "$ENV/constraints.txt"
  "${pip[@]}" -r "$ENV/constraints.txt"
  "${pip[@]}" -c "$ENV/constraints.txt" -r "$ENV/requirements.txt"  # torchvision among them
  touch "$ENV/.built"
}

if [ ! -f "$ENV/.built" ]; then
  rm -rf "$ENV"
  mkdir -p "$ENV"
  echo "building $ENV (log: $ENV/build.log)"
  if ! build > "$ENV/build.log" 2>&1; then
    grep -v "is ignored" "$ENV/build.log" | tail -20
    echo "build: FAIL"
    exit 2
  fi
fi

cd "$REPO"
export PYTHONPATH=$REPO SGLANG_DDTREE_ALLOW_UNTESTED=1
echo "SGLang $("$PY" -c 'from sglang.version import __version__; print(__version__)' 2>/dev/null), \
torch $("$PY" -c 'import torch; print(torch.__version__)'), env $ENV"
status=0
if "$PY" -c "import ddtree_core.sglang.plugin, ddtree_core.sglang.spec_algo, ddtree_core.sglang.worker" \
  > "$ENV/import.log" 2>&1; then
  echo "import: pass"
else
  grep -v Warning "$ENV/import.log" | tail -5
  echo "import: FAIL"
  status=1
fi
if COLUMNS=200 "$PY" -m pytest -q -p no:cacheprovider tests/test_sglang_*.py "$@" > "$ENV/pytest.log" 2>&1; then
  echo "pytest: pass ($(tail -1 "$ENV/pytest.log"))"
else
  grep -E "^(FAILED|ERROR)" "$ENV/pytest.log" || true
  echo "pytest: FAIL ($(tail -1 "$ENV/pytest.log"); full output in $ENV/pytest.log)"
  status=1
fi
exit $status
