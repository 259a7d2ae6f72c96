#!/usr/bin/env bash
# Fetches a real NVIDIA Triton Inference Server (tritonserver 2.51.0 with its python backend, as shipped in
# the nvidia-pytriton 0.7.0 wheel on PyPI) into .tools/triton/: its own virtual environment (venv/, numpy<2,
# which the python backend's stub needs) and a backend directory (backends/python/) laid out as tritonserver
# expects it. No GPU is needed. tests/compat/test_real_triton.py and bench/vs_triton.py use it when present
# and skip otherwise. Idempotent; prints where tritonserver is.
#
# The stub embeds Debian's libpython3.X in isolated mode (it ignores PYTHONPATH), and its sys.path ends with
# the backend directory. What the python models need is installed into stub_site/ (numpy<2, and the ASR
# models' runtime packages: kaldi-native-fbank, sentencepiece, numba, plus onnxruntime for the test-only
# python shim of the ONNX models) and linked into that directory with this project's asr_server package, the
# way a Triton image with `pip install asr-server` would see them; so unmodified Triton python models, and
# model_repo's ASR python models, load without an EXECUTION_ENV_PATH in their config.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.tools/triton
VENV=$DEST/venv
PY=${PYTHON:-python3}

if [ ! -f "$DEST/.ready" ]; then
  rm -rf "$DEST"
  mkdir -p "$DEST"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "nvidia-pytriton==0.7.0" "numpy<2" \
    >"$DEST/pip.log" 2>&1 || { cat "$DEST/pip.log" >&2; exit 1; }
  PYVER=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  DIST=$SITE/pytriton/tritonserver
  [ -x "$DIST/bin/tritonserver" ] || { echo "tritonserver not found in the nvidia-pytriton wheel" >&2; exit 1; }
  # The stub links the system's libpython of the venv's version (Debian package libpythonX.Y).
  if ! ldconfig -p 2>/dev/null | grep "libpython$PYVER.so.1.0" >/dev/null; then  # no -q: SIGPIPE + pipefail
    apt-get install -y -q "libpython$PYVER" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && apt-get install -y -q "libpython$PYVER" >/dev/null; }
  fi
  mkdir -p "$DEST/backends/python"
  cp "$DIST/backends/python/libtriton_python.so" "$DIST/backends/python/triton_python_backend_utils.py" \
    "$DEST/backends/python/"
  cp "$DIST/python_backend_stubs/$PYVER/triton_python_backend_stub" "$DEST/backends/python/"
  ln -s "$(realpath "$DIST/bin/tritonserver")" "$DEST/tritonserver"
  ln -s "$(realpath "$SITE/nvidia_pytriton.libs")" "$DEST/lib"
  touch "$DEST/.ready"
fi
if [ ! -f "$DEST/.stub_site_ready" ]; then
  rm -rf "$DEST/stub_site"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --target "$DEST/stub_site" "numpy<2" \
    kaldi-native-fbank sentencepiece numba onnxruntime >"$DEST/pip_stub.log" 2>&1 \
    || { cat "$DEST/pip_stub.log" >&2; exit 1; }
  for entry in "$DEST"/stub_site/*; do
    case "$(basename "$entry")" in bin|*.dist-info|__pycache__) continue ;; esac
    ln -sfn "$(realpath "$entry")" "$DEST/backends/python/$(basename "$entry")"
  done
  ln -sfn "$(realpath asr_server)" "$DEST/backends/python/asr_server"
  touch "$DEST/.stub_site_ready"
fi
echo "tritonserver ready: $(realpath "$DEST/tritonserver") (backends: $DEST/backends, LD_LIBRARY_PATH=$(realpath "$DEST/lib"))"
