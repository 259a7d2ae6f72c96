#!/usr/bin/env bash
# NVIDIA's Triton Model Analyzer (PyPI triton-model-analyzer) in its own virtual environment,
# .tools/model_analyzer/, apart from the project's: it pins its own tritonclient/protobuf/numpy versions.
# tests/analyzer/test_triton_model_analyzer.py runs it in remote launch mode against our server and skips
# without it. It needs perf_analyzer too (scripts/get_perf_analyzer.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.tools/model_analyzer
[ -x "$DEST/bin/model-analyzer" ] && exit 0
python3 -m venv "$DEST"
"$DEST/bin/python" -m pip install -q --upgrade pip
"$DEST/bin/python" -m pip install -q "triton-model-analyzer==1.58.0"
echo "model-analyzer ready in $DEST"
