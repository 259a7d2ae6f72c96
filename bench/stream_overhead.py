"""What our serving layer costs per streamed chunk, beside a bare grpcio server on the same stubs.

    python -m bench.stream_overhead [--streams 224] [--seconds 20] [--repeats 2]

The same paced streams (bench.stream_cpu's load: 640 ms chunks at real time, the bundled client) go to
  raw:  bench._server.serve_echo, a grpcio aio servicer whose ModelStreamInfer answers each request with a
        fixed transcript (no conversion, no scheduling: the floor of Python gRPC streaming here), and
  floor: bench._server.serve_batching_floor, a grpcio aio servicer built as our streaming path is (a reader
        task per stream, chunks of all streams batched for 20 ms, each batch run on a thread, answers
        written back from the event loop) and doing nothing else: what that architecture costs in Python, and
  ours: our server on a repository holding the bundled streaming_wenet's config (sequence batcher, its
        controls and queue delay, two instances) with a model.py that returns the same fixed transcript,
so ours minus raw is our protocol conversion, validation, sequence batching, thread hops and python-backend
wrapping, without the recogniser's work, and ours minus floor the part of it that the architecture does not
need. Prints each server's CPU-seconds per audio-second (process CPU
time from /proc), per chunk, by thread, and ours / raw; the two alternate `--repeats` times.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench._server import ECHO_TRANSCRIPT, serve_batching_floor, serve_echo, serve_repository, server_process
from bench.stream_cpu import thread_cpu
from bench.vs_sherpa import cpu_seconds, load_data, ours_paced

NO_OP_MODEL = f'''"""Answers every chunk with a fixed transcript: the serving layer's cost without the recogniser."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            pb_utils.get_input_tensor_by_name(request, "WAV").as_numpy()
            text = pb_utils.Tensor("TRANSCRIPTS", np.array({ECHO_TRANSCRIPT!r}, dtype=np.object_))
            out.append(pb_utils.InferenceResponse([text]))
        return out
'''


def no_op_repository(folder: Path) -> Path:
    """streaming_wenet's config from the bundled repository, with the fixed-answer model."""
    model = folder / "streaming_wenet"
    (model / "1").mkdir(parents=True)
    shutil.copy(ROOT / "model_repo" / "streaming_wenet" / "config.pbtxt", model / "config.pbtxt")
    (model / "1" / "model.py").write_text(NO_OP_MODEL)
    return folder


def measure(target, args: tuple, items, streams: int, seconds: float) -> dict:
    with server_process(target, *args) as (proc, port):
        url = f"127.0.0.1:{port}"
        asyncio.run(ours_paced(url, items, 2, 640.0, 2.0))  # warm-up
        threads0, cpu0, wall = thread_cpu(proc.pid), cpu_seconds(proc.pid), time.monotonic()
        result = asyncio.run(ours_paced(url, items, streams, 640.0, seconds))
        cpu, wall = cpu_seconds(proc.pid) - cpu0, time.monotonic() - wall
        by_thread = thread_cpu(proc.pid)
        by_thread.subtract(threads0)
    audio = result["audio_s"]
    return {"cpu_per_audio_s": cpu / audio, "ms_per_chunk": 1000 * cpu / (audio / 0.64), "errors": result["errors"],
            "chunk_p99_ms": result["chunk_p99_ms"], "cores": cpu / wall,
            "threads": {name: sec / audio for name, sec in by_thread.most_common() if sec > 0.005}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "demo_utts")
    parser.add_argument("--streams", type=int, default=224)
    parser.add_argument("--seconds", type=float, default=20.0, help="audio per stream")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    items = load_data(args.data)
    print(f"{args.streams} paced streams, 640 ms chunks, ~{args.seconds:.0f} s of audio each")
    ratios, floors = [], []
    with tempfile.TemporaryDirectory() as tmp:
        repo = no_op_repository(Path(tmp))
        for repeat in range(args.repeats):
            runs = {name: measure(target, extra, items, args.streams, args.seconds)
                    for name, target, extra in (("raw grpcio", serve_echo, ()),
                                                ("floor", serve_batching_floor, ()),
                                                ("ours", serve_repository, (str(repo),)))}
            for name, r in runs.items():
                threads = ", ".join(f"{t} {v:.4f}" for t, v in r["threads"].items())
                print(f"  {repeat + 1} {name:>10}: {r['cpu_per_audio_s']:.4f} CPU-s per audio-s = "
                      f"{r['ms_per_chunk']:.2f} ms per chunk ({r['cores']:.2f} cores; chunk p99 "
                      f"{r['chunk_p99_ms']:.0f} ms; errors {r['errors']}); by thread: {threads}")
            raw = runs["raw grpcio"]
            ratios.append(runs["ours"]["cpu_per_audio_s"] / raw["cpu_per_audio_s"])
            floors.append(runs["floor"]["cpu_per_audio_s"] / raw["cpu_per_audio_s"])
            print(f"  {repeat + 1}  ours / raw: {ratios[-1]:.2f}x, ours adds "
                  f"{runs['ours']['ms_per_chunk'] - raw['ms_per_chunk']:.2f} ms of CPU per chunk; "
                  f"floor / raw: {floors[-1]:.2f}x")
    print(f"ours / raw grpcio: {', '.join(f'{r:.2f}x' for r in ratios)}; "
          f"batching floor / raw grpcio: {', '.join(f'{r:.2f}x' for r in floors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
