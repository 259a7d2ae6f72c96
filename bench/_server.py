"""The benchmarks' server processes, gRPC only, each on a free 127.0.0.1 port: our server on a model
repository (`serve_repository`), and bare grpcio servicers on the same stubs to measure it against: one that
answers each request at once (`serve_echo`) and one that batches streamed chunks and runs each batch on a
thread as our server does, with nothing else (`serve_batching_floor`).

Each runs as a multiprocessing (spawn) target; it puts the bound port on `port_queue` and serves until killed.
`server_process` starts one and stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing as mp
import struct
from pathlib import Path
from typing import Iterator

ECHO_TRANSCRIPT = b"hello world"  # what serve_echo's ModelStreamInfer answers to every request


@contextlib.contextmanager
def server_process(target, *args, timeout_s: float = 120.0) -> Iterator[tuple[mp.Process, int]]:
    """`target(*args, port_queue)` in a spawned process: yields (the process, its gRPC port); terminated on exit."""
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, ports), daemon=True)
    proc.start()
    try:
        yield proc, ports.get(timeout=timeout_s)
    finally:
        proc.terminate()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()


def serve_echo(port_queue) -> None:
    """The floor of Python gRPC here: ModelInfer returns its inputs as outputs (named OUTPUT0); ModelStreamInfer
    answers each request at once with ECHO_TRANSCRIPT as TRANSCRIPTS (BYTES, shape [1]). No conversion, no
    scheduling."""
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    transcript = struct.pack("<I", len(ECHO_TRANSCRIPT)) + ECHO_TRANSCRIPT  # BYTES element: 4-byte length, bytes

    class Echo(service_pb2_grpc.GRPCInferenceServiceServicer):
        async def ModelInfer(self, request, context):
            response = pb.ModelInferResponse(model_name=request.model_name, model_version="1", id=request.id)
            for tensor in request.inputs:
                response.outputs.add(name="OUTPUT0", datatype=tensor.datatype, shape=tensor.shape)
            response.raw_output_contents.extend(request.raw_input_contents)
            return response

        async def ModelStreamInfer(self, request_iterator, context):
            async for request in request_iterator:
                yield _echo_answer(pb, request, transcript)

    _serve_servicer(Echo(), port_queue)


def _serve_servicer(servicer, port_queue) -> None:
    """Serve a bare GRPCInferenceService servicer on a free 127.0.0.1 port (put on `port_queue`) until killed."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    async def main():
        server = grpc.aio.server()
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
        port_queue.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


def _echo_answer(pb, request, transcript: bytes):
    """ECHO_TRANSCRIPT as a streamed answer to `request` (TRANSCRIPTS, BYTES, shape [1])."""
    response = pb.ModelStreamInferResponse()
    answer = response.infer_response
    answer.model_name, answer.id = request.model_name, request.id
    answer.outputs.add(name="TRANSCRIPTS", datatype="BYTES").shape.append(1)
    answer.raw_output_contents.append(transcript)
    return response


def serve_batching_floor(port_queue, queue_delay_s: float = 0.02) -> None:
    """The least a batching streaming server costs in Python: ModelStreamInfer reads each stream's requests in
    a task of its own (so that requests are answered as they complete, not one at a time), collects chunks of
    all streams for `queue_delay_s` (streaming_wenet's max_queue_delay), hands each batch to a one-thread
    executor that views each WAV as an array, and answers on the event loop after one thread hop: the
    architecture of our server's streaming path with no conversion, validation, sequence state, statistics or
    python-backend objects. Measured beside serve_echo, it shows what the architecture costs and what our
    implementation adds."""
    import concurrent.futures

    import numpy as np
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    transcript = struct.pack("<I", len(ECHO_TRANSCRIPT)) + ECHO_TRANSCRIPT
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    class BatchingFloor(service_pb2_grpc.GRPCInferenceServiceServicer):
        def __init__(self) -> None:
            self.batch: list = []  # (request, its stream's outbox) collected since the timer started
            self.timer = None

        def flush(self) -> None:
            batch, self.batch, self.timer = self.batch, [], None
            loop = asyncio.get_running_loop()

            def work() -> None:
                for request, _ in batch:
                    np.frombuffer(request.raw_input_contents[0], np.float32)
                loop.call_soon_threadsafe(deliver)

            def deliver() -> None:
                for request, outbox in batch:
                    outbox.put_nowait(_echo_answer(pb, request, transcript))

            executor.submit(work)

        async def ModelStreamInfer(self, request_iterator, context):
            outbox: asyncio.Queue = asyncio.Queue()
            counts = [0, 0]  # requests read, answers written
            reading = [True]

            async def read() -> None:
                async for request in request_iterator:
                    counts[0] += 1
                    self.batch.append((request, outbox))
                    if self.timer is None:
                        self.timer = asyncio.get_running_loop().call_later(queue_delay_s, self.flush)
                reading[0] = False
                outbox.put_nowait(None)  # wakes the writer, which may be waiting with nothing left to answer

            reader = asyncio.get_running_loop().create_task(read())
            try:
                while reading[0] or counts[1] < counts[0]:
                    answer = await outbox.get()
                    if answer is not None:
                        counts[1] += 1
                        yield answer
            finally:
                reader.cancel()

    _serve_servicer(BatchingFloor(), port_queue)


def serve_repository(repo: str, port_queue) -> None:
    from asr_server.server import Server
    from asr_server.settings import ServerSettings

    logging.basicConfig(level=logging.WARNING)

    async def main():
        settings = ServerSettings(model_repositories=(Path(repo),), grpc_address="127.0.0.1", grpc_port=0,
                                  allow_http=False, allow_metrics=False)
        server = Server(settings)
        await server.start()
        port_queue.put(server.grpc_port)
        await asyncio.Event().wait()

    asyncio.run(main())
