#!/usr/bin/env bash
# WeNet-style model folder -> ONNX -> TensorRT plans -> TensorRT model repository -> running asr-server.
#   bash scripts/export_build_serve.sh MODEL_DIR WORK_DIR [--fp16] [--dry-run] [-- asr-server flags]
# Steps (each writes under WORK_DIR):
#   1. onnx_repo/   scripts/build_model_repo.py --export (exports the graphs when older than the checkpoint)
#   2. int32_repo/  the INT32 ONNX twin (asr_server.repo_builder.tensorrt --mode onnx_int32): the engines are built
#                   from these graphs so their INT32 tensors match the rewritten configs
#   3. plans/       scripts/build_trt.sh (profiles from int32_repo's configs; output check against ORT)
#   4. trt_repo/    asr_server.repo_builder.tensorrt --mode tensorrt: backend "tensorrt", <model>.plan, KIND_GPU
#   5. asr-server --model-repository WORK_DIR/trt_repo
# --dry-run runs steps 1-2 (CPU only) and prints the commands of steps 3-5 without TensorRT.
# UNVERIFIED past step 2: written on a machine without TensorRT or a GPU.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
[ $# -ge 2 ] || { sed -n 2,3p "$0"; exit 2; }
MODEL_DIR="$1"; WORK="$2"; shift 2
BUILD_FLAGS=(); DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --fp16) BUILD_FLAGS+=(--fp16) ;;
    --dry-run) DRY=1 ;;
    --) shift; break ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$WORK"
rm -rf "$WORK/onnx_repo" "$WORK/int32_repo" "$WORK/trt_repo"
"$PYTHON" "$ROOT/scripts/build_model_repo.py" --model-dir "$MODEL_DIR" --export --out "$WORK/onnx_repo"
"$PYTHON" -m asr_server.repo_builder.tensorrt "$WORK/onnx_repo" "$WORK/int32_repo" --mode onnx_int32
if [ "$DRY" = 1 ]; then
  bash "$ROOT/scripts/build_trt.sh" --repo "$WORK/int32_repo" --out-dir "$WORK/plans" "${BUILD_FLAGS[@]}" --dry-run
  echo "$PYTHON -m asr_server.repo_builder.tensorrt $WORK/int32_repo $WORK/trt_repo --mode tensorrt --plans $WORK/plans"
  echo "asr-server --model-repository $WORK/trt_repo $*"
  exit 0
fi
bash "$ROOT/scripts/build_trt.sh" --repo "$WORK/int32_repo" --out-dir "$WORK/plans" "${BUILD_FLAGS[@]}"
"$PYTHON" -m asr_server.repo_builder.tensorrt "$WORK/int32_repo" "$WORK/trt_repo" --mode tensorrt --plans "$WORK/plans"
exec "$(dirname "$PYTHON")/asr-server" --model-repository "$WORK/trt_repo" "$@"
