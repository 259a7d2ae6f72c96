#!/usr/bin/env bash
# Export the bundled demo model's ONNX graphs (once; they are build outputs, not in git, to keep the
# repository small) and write the ASR pipelines into model_repo/. Quick when already up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MODEL=models/demo_en
if [ ! -f "$MODEL/final.pt" ]; then
  echo "no bundled model in $MODEL: skipping the ASR pipelines" >&2
  exit 0
fi
# --timestamp-shift-ms: the demo model emits a word's first token ~270 ms and its last ~130 ms after they are
# spoken, and the first word after a pause ~145 ms later still (medians over 30 espeak-ng sentences kept apart
# from the evaluation ones, bench/asr_extras.py --calibrate); word times are moved back by that.
"$PY" scripts/build_model_repo.py --model-dir "$MODEL" --out model_repo --force --export --timestamp-shift-ms 270,130,145
