"""Write the ASR pipelines into a Triton model repository (WeNet's layout and tensor names).

    python scripts/build_model_repo.py --model-dir models/demo_en --out model_repo_new [--export]

The command line of asr_server.repo_builder (the models it writes and why: asr_server/repo_builder/pipelines.py).
The repository is self-contained (graphs, python models, tokenizer files; paths relative to each model), so it
loads wherever it is moved or copied. The python models import `asr_server`, which must be installed where
they run (deploy/README.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from asr_server.repo_builder.model_folder import (build_from_graph_folders, check_model_folder, exports_up_to_date,
                                                  model_subsampling)
from asr_server.asr.decoding import token_lm
from asr_server.repo_builder.pipelines import BuildOptions

ROOT = Path(__file__).resolve().parent.parent


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", type=Path, required=True, help="WeNet-style model folder (units.txt, ...)")
    p.add_argument("--onnx-dir", type=Path, action="append", default=None,
                   help="folder with encoder/streaming_encoder/decoder.onnx (default: MODEL_DIR/onnx); or, given "
                        "twice, WeNet's wenet/bin/export_onnx_gpu.py output folders (one offline, one --streaming)")
    p.add_argument("--export", action="store_true", help="first export the graphs from MODEL_DIR's checkpoint "
                   "with scripts/export_onnx.py (skipped when they are newer than the checkpoint)")
    p.add_argument("--out", type=Path, required=True,
                   help="the model repository to write (a new or empty folder; an existing one only with --force)")
    p.add_argument("--force", action="store_true", help="write into --out although it is not empty (its ASR model "
                   "folders are replaced, other models kept): scripts/build_demo_repo.sh rebuilds model_repo/ so")
    p.add_argument("--beam", type=int, default=10, help="CTC prefix beam width and n-best for rescoring")
    p.add_argument("--chunk-size", type=int, default=16, help="encoder frames per streaming chunk")
    p.add_argument("--right-context", type=int, default=None,
                   help="input frames the subsampling reads ahead (default: from train.yaml's input_layer)")
    p.add_argument("--subsampling", type=int, default=None,
                   help="input frames per encoder frame (default: from train.yaml's input_layer)")
    p.add_argument("--max-batch", type=int, default=64, help="max_batch_size of the batching models")
    p.add_argument("--search", choices=("prefix_beam", "greedy"), default="prefix_beam",
                   help="CTC search of the scoring and wenet models")
    p.add_argument("--no-rescoring", dest="rescoring", action="store_false",
                   help="the CTC search result is final (no attention rescoring with the decoder)")
    p.add_argument("--hotwords", type=Path, default=None, help="the model's hotwords: one phrase per line, "
                   "optionally 'phrase<TAB>score' (requests may give their own with the parameter hotwords)")
    p.add_argument("--lm", type=Path, default=None, help="a token n-gram LM (ARPA over the model's units, .gz "
                   "allowed; scripts/build_lm.py) fused into the CTC prefix beam search; default: the model "
                   "folder's lm.arpa.gz when it has one")
    p.add_argument("--no-lm", action="store_true", help="no LM even when the model folder has one")
    p.add_argument("--lm-weight", type=float, default=token_lm.DEFAULT_WEIGHT, help="the LM's weight in the beam's "
                   "ranking")
    p.add_argument("--lm-bonus", type=float, default=token_lm.DEFAULT_BONUS, help="score added per token, against the LM's "
                   "preference for short hypotheses")
    p.add_argument("--endpoint", action="store_true", help="streaming endpointing on by default (requests turn "
                   "it on or off with the parameter endpoint)")
    p.add_argument("--encoder-backend", choices=("onnxruntime", "openvino"), default="onnxruntime",
                   help="openvino: the encoders as OpenVINO IR on the openvino backend (the 'openvino' extra; "
                        "bench/openvino_vs_ort.py compares the two)")
    p.add_argument("--timestamp-shift-ms", default="", help="START,END[,ONSET]: ms the model emits a word's "
                   "first/last token after it is spoken, and how much later still the first word after a pause; "
                   "word times move earlier by them (bench/asr_extras.py --calibrate measures them)")
    p.add_argument("--streaming-bls", dest="inline_graphs", action="store_false",
                   help="the streaming scorer (wenet) calls the streaming_encoder and decoder models through BLS "
                        "instead of running their ONNX graphs itself (the default, cheaper on CPU: bench.stream_cpu)")
    p.add_argument("--instance-process", action="store_true",
                   help="run each instance of the streaming scorers in a process of its own (its own interpreter "
                        "lock: lower tail latency near the CPU limit, bench/vs_sherpa.py; more memory per instance)")
    return p


def default_lm(model_dir: Path) -> Path | None:
    """The model folder's own LM, when it ships one."""
    path = model_dir / "lm.arpa.gz"
    return path if path.is_file() else None


def main() -> int:
    p = parser()
    args = p.parse_args()
    if args.instance_process and not args.inline_graphs:
        p.error("--instance-process cannot go with --streaming-bls (a model in its own process cannot call BLS)")
    try:
        check_model_folder(args.model_dir)
    except ValueError as exc:
        p.error(str(exc))
    if args.out.exists() and any(args.out.iterdir()) and not args.force:
        p.error(f"{args.out} is not empty: give a new folder, or --force to write into it (its ASR model "
                "folders are replaced)")
    if args.lm is not None and not args.lm.is_file():
        p.error(f"--lm {args.lm}: no such file")
    if args.lm is not None and args.search == "greedy":
        p.error("--lm reranks the prefix beam search: it cannot go with --search greedy")
    rate, context = model_subsampling(args.model_dir)
    onnx_dirs = args.onnx_dir or [args.model_dir / "onnx"]
    if args.export and len(onnx_dirs) > 1:
        p.error("--export writes one folder: give at most one --onnx-dir with it")
    if args.export and not exports_up_to_date(args.model_dir, onnx_dirs[0]):
        subprocess.run([sys.executable, str(ROOT / "scripts" / "export_onnx.py"), "--model-dir", str(args.model_dir),
                        "--out-dir", str(onnx_dirs[0]), "--chunk-size", str(args.chunk_size),
                        "--beam", str(args.beam)], check=True)
    options = BuildOptions(
        beam=args.beam, chunk_size=args.chunk_size, max_batch=args.max_batch, search=args.search,
        right_context=context if args.right_context is None else args.right_context,
        subsampling=rate if args.subsampling is None else args.subsampling, rescoring=args.rescoring,
        hotwords=args.hotwords, endpoint=args.endpoint, timestamp_shift_ms=args.timestamp_shift_ms,
        lm=None if args.no_lm or args.search == "greedy" else (args.lm or default_lm(args.model_dir)),
        lm_weight=args.lm_weight,
        lm_bonus=args.lm_bonus,
        inline_graphs=args.inline_graphs, instance_process=args.instance_process)
    try:
        build_from_graph_folders(args.model_dir, onnx_dirs, args.out, options)
    except ValueError as exc:  # graphs that do not match the chunk geometry
        p.error(str(exc))
    if args.encoder_backend == "openvino":
        from asr_server.repo_builder.openvino import switch_to_openvino

        print(f"encoders on openvino: {', '.join(switch_to_openvino(args.out))}")
    print(f"wrote the ASR pipelines into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
