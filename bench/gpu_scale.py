"""GPU scale check: the paced streams the bundled recogniser holds at chunk p99 < 300 ms with 1, 4 and 16
worker processes, the encoders and the decoder on the GPU. One script for a lent GPU machine (15 minutes).

    python -m bench.gpu_scale --device cuda [--workers 1,4,16] [--seconds 10] [--out gpu_scale.json]
    python -m bench.gpu_scale --device cpu --workers 1,2 --start 2 --max-streams 4 --seconds 2   # dry run

The repository: scripts/build_model_repo.py's pipelines for models/demo_en with the streaming scorer calling
the streaming_encoder and decoder models (BLS; the inline graphs would run on the CPU), then, on cuda, those
graphs traced to TorchScript on the pytorch backend with KIND_GPU instances (repo_builder/torchscript.py: the
GPU machine's onnxruntime has no CUDA provider). Each worker process loads its own copy on the GPU.
The load (bench/workers.py): --clients generator processes over several connections each, 640 ms chunks at
real time; the stream count doubles until the chunk p99 passes 300 ms, then one bisection step. The aim
(issue 36): >= 1,000 streams on one H100/H200. Prints a table and writes it to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / "models" / "demo_en"


def build_repository(work: Path, device: str) -> Path:
    """The streaming pipelines with BLS encoders; on cuda, the graphs as TorchScript on KIND_GPU."""
    from asr_server.repo_builder.model_folder import build_from_graph_folders, model_subsampling
    from asr_server.repo_builder.pipelines import BuildOptions

    subsampling, right_context = model_subsampling(MODEL_DIR)
    onnx_repo = work / "onnx_repo"
    build_from_graph_folders(MODEL_DIR, [MODEL_DIR / "onnx"], onnx_repo,
                             BuildOptions(subsampling=subsampling, right_context=right_context, inline_graphs=False))
    if not device.startswith("cuda"):
        return onnx_repo
    from asr_server.asr.nn.checkpoint import load_model_dir
    from asr_server.repo_builder.torchscript import torchscript_repository

    gpu_repo = work / "torchscript_repo"
    torchscript_repository(onnx_repo, gpu_repo, load_model_dir(MODEL_DIR).model.eval().to(device), kind="KIND_GPU")
    return gpu_repo


def main(argv: list[str] | None = None) -> int:
    from asr_server.child_process import stop_process
    from bench.workers import largest_held, start_server

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a dry run of the same steps")
    p.add_argument("--workers", default="1,4,16")
    p.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "demo_utts")
    p.add_argument("--seconds", type=float, default=10.0, help="audio per stream at each count")
    p.add_argument("--clients", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                   help="load generator processes")
    p.add_argument("--connections", type=int, default=8, help="gRPC connections per generator")
    p.add_argument("--start", type=int, default=64)
    p.add_argument("--max-streams", type=int, default=4096)
    p.add_argument("--resolution", type=float, default=0.25,
                   help="bisect until the gap between held and failed counts is at most this share of the held one")
    p.add_argument("--out", type=Path, default=None, help="write the table here as JSON")
    args = p.parse_args(argv)
    if not (MODEL_DIR / "onnx" / "streaming_encoder.onnx").exists():
        raise SystemExit(f"{MODEL_DIR}/onnx has no graphs: run bash scripts/build_demo_repo.sh first")
    table = {"device": args.device, "clients": args.clients, "connections": args.connections,
             "seconds": args.seconds, "held": {}, "trials": {}}
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_repository(Path(tmp), args.device)
        for workers in (int(w) for w in args.workers.split(",")):
            process, url = start_server(repo, workers)
            try:
                held, lines = largest_held(url, args)
            finally:
                stop_process(process, 120)
            table["held"][workers], table["trials"][workers] = held, lines
            print(f"--workers {workers}: {held} paced streams held (chunk p99 < 300 ms) on {args.device}", flush=True)
            print("\n".join(lines), flush=True)
    print(f"{'workers':>8} {'streams held':>13}")
    for workers, held in table["held"].items():
        print(f"{workers:>8} {held:>13}")
    if args.out is not None:
        args.out.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
