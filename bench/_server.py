"""The benchmarks' server processes, gRPC only, each on a free 127.0.0.1 port: our server on a model
repository (`serve_repository`), and a bare grpcio servicer on the same stubs to measure it against
(`serve_echo`).

Each runs as a multiprocessing (spawn) target; it puts the bound port on `port_queue` and serves until killed.
`server_process` starts one and stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing as mp
import struct
import subprocess
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


def stop_process(process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """Stop a server started as a command (`python -m asr_server ...`): SIGTERM, so that it drains (a supervisor
    drains its workers), then SIGKILL if it is still there after ``timeout_s``."""
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def serve_echo(port_queue) -> None:
    """The floor of Python gRPC here: ModelInfer returns its inputs as outputs (named OUTPUT0); ModelStreamInfer
    answers each request at once with ECHO_TRANSCRIPT as TRANSCRIPTS (BYTES, shape [1]). No conversion, no
    scheduling."""
    import grpc
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
                response = pb.ModelStreamInferResponse()
                answer = response.infer_response
                answer.model_name, answer.id = request.model_name, request.id
                answer.outputs.add(name="TRANSCRIPTS", datatype="BYTES").shape.append(1)
                answer.raw_output_contents.append(transcript)
                yield response

    async def main():
        server = grpc.aio.server()
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Echo(), server)
        port_queue.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


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
