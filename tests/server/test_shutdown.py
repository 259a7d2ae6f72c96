"""Shutdown with --exit-timeout-secs: idle ModelStreamInfer streams are closed at once, requests already
accepted (unary or on a stream) still get their answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import grpc
import tritonclient.grpc.aio as aioclient

from asr_server.server import Server
from tests.conftest import BUNDLED_REPO, copy_model, local_settings
from tests.helpers.fault_models import sleepy
from tests.helpers.waiting import wait_until

# --exit-timeout-secs in these tests: stopping must take far less with idle streams open (they must not hold it
# for the grace period), with room for a loaded machine's unloads
GRACE_S = 30.0
SLOW_S = 3.0  # how long the in-flight request runs: the test sees it in the server on a loaded machine


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

        try:
            async for result, error in client.stream_infer(generate()):
                got.append(error or result.get_response().model_name)
                first_answered.set()
        except grpc.aio.AioRpcError as exc:  # how the stream ended, when not OK
            got.append(str(exc.code()))

    try:
        idle_got, busy_got = [], []
        idle = asyncio.create_task(idle_stream(clients[0], [add_sub_request()], idle_got))
        await asyncio.wait_for(first_answered.wait(), 10)
        # A stream whose last request is still running when the server stops, and a unary request in flight.
        busy = asyncio.create_task(idle_stream(
            clients[1], [{"model_name": "sleepy", "inputs": sleepy_inputs(SLOW_S)}], busy_got))
        unary = asyncio.create_task(clients[2].infer("sleepy", sleepy_inputs(0.0)))
        # both requests are in the server (whichever came first runs, the other waits for the instance, unless
        # the quick unary one is already answered)
        sleepy_scheduler = server.manager.get("sleepy").scheduler
        assert await wait_until(lambda: sleepy_scheduler.in_flight + unary.done() == 2)
        started = asyncio.get_running_loop().time()
        await server.stop()
        took = asyncio.get_running_loop().time() - started
        assert took < GRACE_S / 2, f"stop took {took:.1f} s with idle streams open"
        await asyncio.wait_for(asyncio.gather(idle, busy), 5)  # both streams were ended by the server
        # the requests in flight were answered, not dropped; then each stream, cut while its client could still
        # send, ended with UNAVAILABLE (not OK: the client must not take unread requests for answered ones)
        assert idle_got == ["add_sub", "StatusCode.UNAVAILABLE"]
        assert busy_got == ["sleepy", "StatusCode.UNAVAILABLE"]
        assert (await unary).as_numpy("OUT").tolist() == [0.0]
    finally:
        never.set()
        for client in clients:
            await client.close()
        if not server._stopped.is_set():
            await server.stop()


async def test_an_http_client_holding_a_partial_body_does_not_hold_shutdown(tmp_path: Path):
    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    server = Server(local_settings(tmp_path, exit_timeout_secs=1.0))
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
    try:
        writer.write(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100000\r\n\r\n{\"inputs\": [")
        await writer.drain()
        await asyncio.sleep(0.3)  # the request is in the server, its body never completes
        started = asyncio.get_running_loop().time()
        await server.stop()
        took = asyncio.get_running_loop().time() - started
        assert took < 10.0, f"stop took {took:.1f} s with a partial HTTP body held open (aiohttp's 60 s)"
    finally:
        writer.close()
        if not server._stopped.is_set():
            await server.stop()
