#!/usr/bin/env bash
# Build TensorRT engines (.plan) for encoder, streaming_encoder and decoder from a model repository's ONNX
# graphs; see scripts/build_trt.py for the options (--fp16, --workspace-mib, --timing-cache, --split-batch,
# --shape, --builder, --dry-run). Uses trtexec when it is on PATH, else the TensorRT Python API.
#   bash scripts/build_trt.sh --repo model_repo_int32 --out-dir plans --fp16
#   bash scripts/build_trt.sh --repo model_repo --dry-run      # prints commands and profiles, needs no TensorRT
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
exec "$PYTHON" "$ROOT/scripts/build_trt.py" "$@"
