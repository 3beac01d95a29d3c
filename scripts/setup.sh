#!/usr/bin/env bash
# Set up agentgym for development in ./.venv (idempotent). Needs Python >= 3.11 and PyPI.
#   bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip setuptools wheel
.venv/bin/python -m pip install --quiet -e ".[dev]"
.venv/bin/agentgym --version
