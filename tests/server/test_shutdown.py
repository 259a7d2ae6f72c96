"""Shutdown with --exit-timeout-secs: idle ModelStreamInfer streams are closed at once, requests already
accepted (unary or on a stream) still get their answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as aioclient

from asr_server.server import Server
from tests.conftest import BUNDLED_REPO, copy_model, local_settings
from tests.helpers.fault_models import sleepy

GRACE_S = 8.0  # --exit-timeout-secs in these tests; stopping must take far less with idle streams open
SLOW_S = 1.0  # how long the in-flight request runs


def add_sub_request() -> dict:
    a = np.arange(4, dtype=np.float32)
    inputs = [aioclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    return {"model_name": "add_sub", "inputs": inputs}


def sleepy_inputs(seconds: float) -> list:
    tensor = aioclient.InferInput("SECONDS", [1], "FP32")
    tensor.set_data_from_numpy(np.array([seconds], np.float32))
    return [tensor]


async def test_stop_closes_idle_streams_and_answers_requests_in_flight(tmp_path: Path):
    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    sleepy(tmp_path)
    server = Server(local_settings(tmp_path, allow_http=False, exit_timeout_secs=GRACE_S))
    await server.start()
    url = f"127.0.0.1:{server.grpc_port}"
    clients = [aioclient.InferenceServerClient(url) for _ in range(3)]
    never = asyncio.Event()  # the idle streams' clients never send again nor close
    first_answered = asyncio.Event()

    async def idle_stream(client, requests: list, got: list) -> None:
        async def generate():
            for request in requests:
                yield request
            await never.wait()

        async for result, error in client.stream_infer(generate()):
            got.append(error or result.get_response().model_name)
            first_answered.set()

    try:
        idle_got, busy_got = [], []
        idle = asyncio.create_task(idle_stream(clients[0], [add_sub_request()], idle_got))
        await asyncio.wait_for(first_answered.wait(), 10)
        # A stream whose last request is still running when the server stops, and a unary request in flight.
        busy = asyncio.create_task(idle_stream(
            clients[1], [{"model_name": "sleepy", "inputs": sleepy_inputs(SLOW_S)}], busy_got))
        unary = asyncio.create_task(clients[2].infer("sleepy", sleepy_inputs(0.0)))
        await asyncio.sleep(0.3)  # both requests are in the server now (the unary one queued behind the stream's)
        started = asyncio.get_running_loop().time()
        await server.stop()
        took = asyncio.get_running_loop().time() - started
        assert took < SLOW_S + 2.5 < GRACE_S, f"stop took {took:.1f} s with idle streams open"
        await asyncio.wait_for(asyncio.gather(idle, busy), 5)  # both streams were ended by the server
        assert idle_got == ["add_sub"]
        assert busy_got == ["sleepy"]  # the request in flight was answered, not dropped
        assert (await unary).as_numpy("OUT").tolist() == [0.0]
    finally:
        never.set()
        for client in clients:
            await client.close()
        if not server._stopped.is_set():
            await server.stop()
