"""What our serving layer costs per streamed chunk, beside a bare grpcio server on the same stubs.

    python -m bench.stream_overhead [--streams 224] [--seconds 20] [--repeats 2]

The same paced streams (bench.stream_cpu's load: 640 ms chunks at real time, the bundled client) go to
  raw:  a grpcio aio ModelStreamInfer servicer that answers each request with a fixed transcript (no
        conversion, no scheduling: the floor of Python gRPC streaming here), and
  ours: our server on a repository holding the bundled streaming_wenet's config (sequence batcher, its
        controls and queue delay, two instances) with a model.py that returns the same fixed transcript,
so the difference is our protocol conversion, validation, sequence batching, thread hops and python-backend
wrapping, without the recogniser's work. Prints each server's CPU-seconds per audio-second (process CPU
time from /proc), per chunk, by thread, and ours / raw; the two alternate `--repeats` times.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench._server import serve_repository
from bench.stream_cpu import thread_cpu
from bench.vs_sherpa import cpu_seconds, load_data, ours_paced

TEXT = b"hello world"
NO_OP_MODEL = f'''"""Answers every chunk with a fixed transcript: the serving layer's cost without the recogniser."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            pb_utils.get_input_tensor_by_name(request, "WAV").as_numpy()
            text = pb_utils.Tensor("TRANSCRIPTS", np.array({TEXT!r}, dtype=np.object_))
            out.append(pb_utils.InferenceResponse([text]))
        return out
'''


def serve_raw(_repo: str, port_queue) -> None:
    """A grpcio aio server whose ModelStreamInfer answers each request at once with TEXT (BYTES, shape [1])."""
    import grpc
    from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc

    payload = struct.pack("<I", len(TEXT)) + TEXT  # Triton's BYTES element: 4-byte length, then the bytes

    class Echo(service_pb2_grpc.GRPCInferenceServiceServicer):
        async def ModelStreamInfer(self, request_iterator, context):
            async for request in request_iterator:
                response = pb.ModelStreamInferResponse()
                answer = response.infer_response
                answer.model_name, answer.id = request.model_name, request.id
                output = answer.outputs.add(name="TRANSCRIPTS", datatype="BYTES")
                output.shape.append(1)
                answer.raw_output_contents.append(payload)
                yield response

    async def main():
        server = grpc.aio.server()
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Echo(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        port_queue.put(port)
        await server.wait_for_termination()

    asyncio.run(main())


def no_op_repository(folder: Path) -> Path:
    """streaming_wenet's config from the bundled repository, with the fixed-answer model."""
    model = folder / "streaming_wenet"
    (model / "1").mkdir(parents=True)
    shutil.copy(ROOT / "model_repo" / "streaming_wenet" / "config.pbtxt", model / "config.pbtxt")
    (model / "1" / "model.py").write_text(NO_OP_MODEL)
    return folder


def measure(target, repo: Path, items, streams: int, seconds: float) -> dict:
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    proc = ctx.Process(target=target, args=(str(repo), ports), daemon=True)
    proc.start()
    try:
        url = f"127.0.0.1:{ports.get(timeout=120)}"
        asyncio.run(ours_paced(url, items, 2, 640.0, 2.0))  # warm-up
        threads0, cpu0, wall = thread_cpu(proc.pid), cpu_seconds(proc.pid), time.monotonic()
        result = asyncio.run(ours_paced(url, items, streams, 640.0, seconds))
        cpu, wall = cpu_seconds(proc.pid) - cpu0, time.monotonic() - wall
        by_thread = thread_cpu(proc.pid)
        by_thread.subtract(threads0)
    finally:
        proc.terminate()
        proc.join(10)
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
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = no_op_repository(Path(tmp))
        for repeat in range(args.repeats):
            runs = {name: measure(target, repo, items, args.streams, args.seconds)
                    for name, target in (("raw grpcio", serve_raw), ("ours", serve_repository))}
            for name, r in runs.items():
                threads = ", ".join(f"{t} {v:.4f}" for t, v in r["threads"].items())
                print(f"  {repeat + 1} {name:>10}: {r['cpu_per_audio_s']:.4f} CPU-s per audio-s = {r['ms_per_chunk']:.2f} "
                      f"ms per chunk ({r['cores']:.2f} cores; chunk p99 {r['chunk_p99_ms']:.0f} ms; errors "
                      f"{r['errors']}); by thread: {threads}")
            ratios.append(runs["ours"]["cpu_per_audio_s"] / runs["raw grpcio"]["cpu_per_audio_s"])
            print(f"  {repeat + 1}  ours / raw: {ratios[-1]:.2f}x, ours adds "
                  f"{runs['ours']['ms_per_chunk'] - runs['raw grpcio']['ms_per_chunk']:.2f} ms of CPU per chunk")
    print(f"ours / raw grpcio: {', '.join(f'{r:.2f}x' for r in ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
