#!/usr/bin/env bash
# Fetches NVIDIA's perf_analyzer (bundled in the tritonclient 2.51.0 wheel) and the two shared libraries it
# needs (Debian's libb64, CUDA's runtime library from its PyPI wheel; no GPU is needed to run it) into
# .tools/perf_analyzer/. The compatibility tests use it when present and skip otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.tools/perf_analyzer
[ -x "$DEST/bin/perf_analyzer" ] && exit 0
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$DEST/bin" "$DEST/lib"
"$PY" -m pip download -q --no-deps tritonclient==2.51.0 nvidia-cuda-runtime-cu12==12.9.79 -d "$tmp"
unzip -q -o -j "$tmp"/tritonclient-2.51.0-*.whl 'tritonclient-2.51.0.data/data/bin/perf_analyzer' -d "$DEST/bin"
unzip -q -o -j "$tmp"/nvidia_cuda_runtime_cu12-*.whl 'nvidia/cuda_runtime/lib/libcudart.so.12' -d "$DEST/lib"
(cd "$tmp" && apt-get download -q libb64-0d >/dev/null 2>&1) || (apt-get update -q >/dev/null && cd "$tmp" && apt-get download -q libb64-0d >/dev/null)
dpkg -x "$tmp"/libb64-0d_*.deb "$tmp/b64"
cp "$tmp"/b64/usr/lib/x86_64-linux-gnu/libb64.so.0d "$DEST/lib/"
chmod +x "$DEST/bin/perf_analyzer"
echo "perf_analyzer ready in $DEST"
