#!/usr/bin/env bash
# Creates .venv (once) with the project and its test tools. torch is pinned to the local CPU build:
# an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
# the commit message check (CONTRIBUTING.md), for clones that commit
if git rev-parse --git-dir >/dev/null 2>&1; then git config core.hooksPath scripts/hooks; fi
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[dev,openvino]"  # openvino: a 59 MB wheel, seconds to install
PYTHON="$VENV/bin/python" bash scripts/build_demo_repo.sh
