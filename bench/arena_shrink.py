"""What the streaming encoder keeps after a burst of streams, with and without the periodic arena shrink.

    python -m bench.arena_shrink [--onnx models/demo_en/onnx/streaming_encoder.onnx] [--burst-batch 64]

Runs the inline streaming encoder (asr_server/asr/serving/inline_onnx.py) in a fresh process per setting:
warm-up at batch 2, a burst of rounds at --burst-batch (what 600 one-shot streams at once make of the scorer's
batches), then steady traffic at batch 2 again after the shrink interval has passed. Prints the process RSS
after each phase: with shrinking, the arena's spare memory goes back after the burst; without, it stays.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def one_setting(onnx: Path, shrink_every_s: float, burst_batch: int, burst_rounds: int) -> dict:
    from asr_server.asr.serving.inline_onnx import InlineStreamingEncoder, onnx_session
    from asr_server.asr.serving.streaming_scorer import EncoderJob

    session = onnx_session(onnx)
    now = [0.0]
    encoder = InlineStreamingEncoder(session, idle_seconds=1e9, clock=lambda: now[0], shrink_every_s=shrink_every_s)
    shape = session.get_inputs()[0].shape[1:]
    window = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    key = [0]

    def round_(batch: int) -> None:
        jobs = []
        for _ in range(batch):
            key[0] += 1
            jobs.append(EncoderJob(key[0], window, shape[0], start=True, end=True))
        encoder(jobs)
        now[0] += 0.1

    for _ in range(20):
        round_(2)
    figures = {"warm": rss_mb()}
    for _ in range(burst_rounds):
        round_(burst_batch)
    figures["burst"] = rss_mb()
    now[0] += 2 * max(shrink_every_s, 1.0) if np.isfinite(shrink_every_s) else 60.0
    for _ in range(20):
        round_(2)
    figures["after"] = rss_mb()
    return figures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--onnx", type=Path, default=ROOT / "models" / "demo_en" / "onnx" / "streaming_encoder.onnx")
    p.add_argument("--burst-batch", type=int, default=64)
    p.add_argument("--burst-rounds", type=int, default=10)
    p.add_argument("--child", type=float, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(json.dumps(one_setting(args.onnx, args.child, args.burst_batch, args.burst_rounds)))
        return 0
    from asr_server.asr.serving.inline_onnx import ARENA_SHRINK_EVERY_S

    print(f"streaming encoder {args.onnx}, burst of {args.burst_rounds} rounds at batch {args.burst_batch}")
    print("setting                       RSS MB warm / after burst / steady after")
    for label, every in (("never shrink", float("inf")), (f"shrink every {ARENA_SHRINK_EVERY_S:g} s", ARENA_SHRINK_EVERY_S)):
        out = subprocess.run([sys.executable, "-m", "bench.arena_shrink", "--onnx", str(args.onnx), "--burst-batch",
                              str(args.burst_batch), "--burst-rounds", str(args.burst_rounds), "--child", str(every)],
                             cwd=ROOT, capture_output=True, text=True, check=True)
        f = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{label:28s}  {f['warm']:.0f} / {f['burst']:.0f} / {f['after']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
