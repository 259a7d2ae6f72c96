"""What the streaming encoder keeps after a burst of streams: onnxruntime's arena as it is, the arena shrunk
every 10 s, and no arena (what the server's inline sessions use).

    python -m bench.arena_shrink [--onnx models/demo_en/onnx/streaming_encoder.onnx] [--burst-batch 64]

Runs the inline streaming encoder (asr_server/asr/serving/inline_onnx.py) in a fresh process per setting:
warm-up at batch 2, a burst of rounds at --burst-batch (what 600 one-shot streams at once make of the scorer's
batches), then steady traffic at batch 2 again after the shrink interval has passed. Prints the process RSS
after each phase, and the CPU time of a steady round (batch 2) and of a burst round: the price of each
setting in compute. An arena keeps its largest allocation; shrinking (`memory.enable_memory_arena_shrinkage`
on one run in ten seconds) hands part of it back; without an arena each tensor comes from and goes back to the
C allocator.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHRINK_EVERY_S = 10.0


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


class ShrinkingSession:
    """A session whose run ends with arena shrinkage once every `every_s` of the (simulated) clock."""

    def __init__(self, session, clock, every_s: float) -> None:
        import onnxruntime as ort

        self.session, self.clock, self.every_s, self.last = session, clock, every_s, clock()
        self.options = ort.RunOptions()
        self.options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def get_inputs(self):
        return self.session.get_inputs()

    def run(self, names, feeds, run_options=None):
        if self.clock() - self.last < self.every_s:
            return self.session.run(names, feeds)
        self.last = self.clock()
        return self.session.run(names, feeds, self.options)


def one_setting(onnx: Path, setting: str, burst_batch: int, burst_rounds: int) -> dict:
    from asr_server.asr.serving.inline_onnx import InlineStreamingEncoder, onnx_session
    from asr_server.asr.serving.streaming_scorer import EncoderJob

    now = [0.0]
    session = onnx_session(onnx, arena=setting != "none")
    if setting == "shrink":
        session = ShrinkingSession(session, lambda: now[0], SHRINK_EVERY_S)
    encoder = InlineStreamingEncoder(session, idle_seconds=1e9, clock=lambda: now[0])
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

    def timed(rounds: int, batch: int) -> float:
        """CPU ms per round."""
        t0 = time.process_time()
        for _ in range(rounds):
            round_(batch)
        return 1e3 * (time.process_time() - t0) / rounds

    timed(20, 2)
    figures = {"warm": rss_mb(), "steady_ms": timed(100, 2)}
    figures["burst_ms"] = timed(burst_rounds, burst_batch)
    figures["burst"] = rss_mb()
    now[0] += 2 * SHRINK_EVERY_S
    figures["after_ms"] = timed(100, 2)
    figures["after"] = rss_mb()
    return figures


SETTINGS = {"arena": "arena, never shrunk", "shrink": f"arena, shrunk every {SHRINK_EVERY_S:g} s",
            "none": "no arena (served)"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--onnx", type=Path, default=ROOT / "models" / "demo_en" / "onnx" / "streaming_encoder.onnx")
    p.add_argument("--burst-batch", type=int, default=64)
    p.add_argument("--burst-rounds", type=int, default=10)
    p.add_argument("--child", choices=SETTINGS, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(json.dumps(one_setting(args.onnx, args.child, args.burst_batch, args.burst_rounds)))
        return 0
    print(f"streaming encoder {args.onnx}, burst of {args.burst_rounds} rounds at batch {args.burst_batch}")
    print("setting                     RSS MB warm / after burst / steady after   CPU ms per round: steady / burst"
          " / steady after")
    for setting, label in SETTINGS.items():
        out = subprocess.run([sys.executable, "-m", "bench.arena_shrink", "--onnx", str(args.onnx), "--burst-batch",
                              str(args.burst_batch), "--burst-rounds", str(args.burst_rounds), "--child", setting],
                             cwd=ROOT, capture_output=True, text=True, check=True)
        f = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{label:27s}  {f['warm']:4.0f} / {f['burst']:4.0f} / {f['after']:4.0f}"
              f"{'':22s}{f['steady_ms']:6.2f} / {f['burst_ms']:6.1f} / {f['after_ms']:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
