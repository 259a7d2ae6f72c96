"""Our serving layer per streamed chunk, in one process and without the network: where the CPU goes.

    python -m bench.chunk_path [--streams 224] [--rounds 30] [--group 10] [--gap 25] [--profile 25]

`bench/stream_overhead.py` compares our server with a bare grpcio servicer over real connections; the gRPC
transport is common to both, so what it measures as "ours minus raw" is the work between a parsed
`ModelInferRequest` and a serialised `ModelStreamInferResponse`. This bench runs exactly that work in process,
through `InferenceService.ModelStreamInfer` itself: S streams of the bundled client's chunk requests (parsed
protobuf, as gRPC hands them over) for the bundled `streaming_wenet` config with a model that returns a fixed
transcript (bench/stream_overhead.py's), each answer serialised as gRPC would. Streams send in groups of
`--group` every `--gap` ms, by default past the batcher's queue delay; the config's two instances share a
group, so the default 10 gives batches of about 5, as under bench/stream_overhead.py's paced load (4.6).
`--group 1 --gap 2` sends one request at a time while batches form, as paced load over the network does.
Prints the process CPU per chunk (all threads, and by thread); with --profile, the top functions of the event
loop thread by own and inclusive time (cProfile).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tritonclient.grpc import service_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent

from bench._server import ECHO_TRANSCRIPT
from bench.lean_streams import chunk_request
from bench.stream_cpu import thread_cpu
from bench.stream_overhead import no_op_repository

CHUNK_SAMPLES = 10240  # 640 ms at 16 kHz: the bundled client's chunk
GROUP_GAP_MS = 25.0  # past streaming_wenet's 20 ms max_queue_delay: each group is its own batch


class _Context:
    """What ModelStreamInfer asks of a grpc.aio context."""

    def cancelled(self) -> bool:
        return False

    def set_code(self, code) -> None:
        pass

    def set_details(self, details) -> None:
        pass


class _Stream:
    """One stream's request iterator: a chunk each time the round releases it."""

    def __init__(self, sequence_id: int, rounds: int) -> None:
        self.sequence_id, self.rounds = sequence_id, rounds
        self.release: asyncio.Queue = asyncio.Queue()

    async def requests(self):
        # First, middle and last chunk parsed once, before the clock starts: the server reads them, never
        # writes them, so the middle one is sent again each round (the client's work is not measured).
        chunk = np.zeros(CHUNK_SAMPLES, np.float32)
        messages = []
        for first, last in ((True, False), (False, False), (False, True)):
            message = pb.ModelInferRequest()
            message.ParseFromString(chunk_request("streaming_wenet", chunk, chunk.size, first, last))
            message.parameters["sequence_id"].int64_param = self.sequence_id
            messages.append(message)
        for index in range(self.rounds):
            await self.release.get()
            yield messages[0 if index == 0 else 2 if index == self.rounds - 1 else 1]


async def run(repo: Path, streams: int, rounds: int, group: int, profile: cProfile.Profile | None,
              gap_s: float = GROUP_GAP_MS / 1000) -> dict:
    from asr_server.core import CorePort, InferenceCore
    from asr_server.protocol.grpc_service import InferenceService
    from asr_server.protocol.runtime_settings import RuntimeSettings
    from asr_server.repository.manager import ModelManager

    port = CorePort()
    manager = ModelManager([repo], port=port)
    core = InferenceCore(manager)
    port.connect(core, asyncio.get_running_loop())
    await manager.load("streaming_wenet")
    service = InferenceService(core, RuntimeSettings())

    answered = [0]
    errors = [0]
    right_answer = struct.pack("<I", len(ECHO_TRANSCRIPT)) + ECHO_TRANSCRIPT
    round_done = asyncio.Event()

    async def consume(stream: _Stream) -> None:
        async for response in service.ModelStreamInfer(stream.requests(), _Context()):
            response.SerializeToString()  # what gRPC does with each answer
            errors[0] += bool(response.error_message) or list(response.infer_response.raw_output_contents) != [
                right_answer]
            answered[0] += 1
            if answered[0] % streams == 0:
                round_done.set()

    all_streams = [_Stream(1000 + s, rounds) for s in range(streams)]
    consumers = [asyncio.create_task(consume(s)) for s in all_streams]
    cpu = wall = 0.0
    for index in range(rounds):
        if index == 2:  # two rounds of warm-up: sequences started, caches warm
            cpu, wall, threads = time.process_time(), time.monotonic(), thread_cpu(os.getpid())
            if profile is not None:
                profile.enable()
        round_done.clear()
        for start in range(0, streams, group):
            for stream in all_streams[start:start + group]:
                stream.release.put_nowait(True)
            await asyncio.sleep(gap_s)
        await round_done.wait()
    if profile is not None:
        profile.disable()
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    by_thread = thread_cpu(os.getpid())
    by_thread.subtract(threads)
    await asyncio.gather(*consumers)
    stats = core.statistics("streaming_wenet", "")
    await manager.shutdown()
    chunks = streams * (rounds - 2)
    return {"cpu_ms_per_chunk": 1000 * cpu / chunks, "chunks": chunks, "answered": answered[0],
            "errors": errors[0], "stats": stats, "cores": cpu / wall,
            "thread_ms_per_chunk": {name: 1000 * sec / chunks for name, sec in by_thread.most_common() if sec > 0}}


def mean_batch(stats) -> float:
    for _name, _version, s in stats:
        return s.inference_count / max(1, s.execution_count)
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--group", type=int, default=10, help="streams that send together (one round of batches)")
    parser.add_argument("--gap", type=float, default=GROUP_GAP_MS, metavar="MS",
                        help="time between groups; below the 20 ms queue delay (e.g. --group 1 --gap 2) requests "
                             "arrive one by one while batches form, as under paced load over the network")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print the top N functions")
    args = parser.parse_args()
    profile = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory() as tmp:
        repo = no_op_repository(Path(tmp))
        result = asyncio.run(run(repo, args.streams, args.rounds, args.group, profile, args.gap / 1000))
    print(f"{args.streams} streams x {args.rounds - 2} measured rounds, groups of {args.group} every {args.gap:g} ms: "
          f"{result['cpu_ms_per_chunk']:.3f} ms of CPU per chunk (all threads, {result['cores']:.2f} cores), "
          f"mean batch {mean_batch(result['stats']):.1f}, errors {result['errors']}")
    print("  by thread (ms per chunk; clock ticks of 10 ms): " + ", ".join(
        f"{name} {ms:.3f}" for name, ms in result["thread_ms_per_chunk"].items()))
    if profile is not None:
        stats = pstats.Stats(profile)
        stats.sort_stats("tottime").print_stats(args.profile)
        stats.sort_stats("cumulative").print_stats(args.profile)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
