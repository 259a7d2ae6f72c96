"""Slow HTTP clients (slowloris) cannot hold connections for good: dribbled headers are cut after
--http-idle-timeout-secs, a stalled body is answered 408 after --http-body-timeout-secs; a slow client that keeps
sending is served, and so is everyone else meanwhile."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import tritonclient.grpc.aio as aioclient

from asr_server.settings import ServerSettings, validate
from tests.faults.conftest import ADD_SUB_SUM, add_sub

TIMEOUT_S = 3.0  # long enough that a loaded machine's stalls of a second never reach it
BODY = json.dumps({"inputs": [{"name": f"INPUT{i}", "shape": [4], "datatype": "FP32", "data": [0, 1, 2, 3]}
                              for i in (0, 1)]}).encode()


def post_head(length: int) -> bytes:
    return (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % length)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the server sent until it closed the connection (fails if it is still open after `seconds`)."""
    return await asyncio.wait_for(reader.read(), seconds)


async def test_dribbled_headers_are_cut_and_others_are_served(repo: Path, running):
    async with running(repo, http_idle_timeout_secs=TIMEOUT_S) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        writer.write(b"GET /v2/health/live HTTP/1.1\r\n")

        async def dribble() -> None:
            # a header line every 0.1 s for longer than the test waits: bytes keep coming, the headers never end
            # (a timer that each byte restarted would never fire)
            for i in range(int(4 * TIMEOUT_S / 0.1)):
                writer.write(b"X-%d: y\r\n" % i)
                await writer.drain()
                await asyncio.sleep(0.1)

        dribbler = asyncio.create_task(dribble())
        try:
            started = asyncio.get_running_loop().time()
            answer = await closed_within(reader, 3 * TIMEOUT_S)
            took = asyncio.get_running_loop().time() - started
        finally:
            dribbler.cancel()
            writer.close()
        assert answer == b"" and took < 3 * TIMEOUT_S
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            assert await add_sub(client) == ADD_SUB_SUM
        finally:
            await client.close()


async def test_a_stalled_body_is_answered_408_and_its_connection_closed(repo: Path, running):
    async with running(repo, http_body_timeout_secs=TIMEOUT_S) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        try:
            writer.write(post_head(len(BODY)) + BODY[:20])  # and then nothing more
            await writer.drain()
            answer = await closed_within(reader, 3 * TIMEOUT_S)
        finally:
            writer.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408")
        assert "--http-body-timeout-secs" in json.loads(body)["error"]


async def test_a_slow_body_that_keeps_coming_is_served(repo: Path, running):
    async with running(repo, http_body_timeout_secs=TIMEOUT_S) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        try:
            writer.write(post_head(len(BODY)))
            size = len(BODY) // 6 + 1
            pieces = [BODY[i:i + size] for i in range(0, len(BODY), size)]
            for piece in pieces:  # a quarter of the timeout apart: 1.5x the timeout in all, never a stall
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(TIMEOUT_S / 4)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 3 * TIMEOUT_S)
        finally:
            writer.close()
        assert head.startswith(b"HTTP/1.1 200"), head


@pytest.mark.parametrize("field", ["http_idle_timeout_secs", "http_body_timeout_secs"])
def test_the_timeouts_must_be_positive(tmp_path: Path, field: str):
    with pytest.raises(ValueError, match=field.replace("_", "-")):
        validate(ServerSettings(model_repositories=(str(tmp_path),), **{field: 0.0}))
