"""The WebSocket and OpenAI front ends against clients that misbehave: one that stops reading its answers, one
that sends empty frames forever, forms with endless fields, and audio that is NaN or declares hours of 192 kHz,
8-channel sound. A fake core answers every chunk, so that what is tested is the front ends' own bounds."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import socket
import struct

import aiohttp
import numpy as np
import pytest
import soundfile
from aiohttp import web
from tritonclient.grpc import model_config_pb2 as mc

from asr_client.audio import AudioError, decode_audio_bytes
from asr_server.errors import ErrorCode, ServerError
from asr_server.messages import InferResponse, Tensor
from asr_server.protocol import websocket_asr
from asr_server.protocol.http_app import make_app
from asr_server.protocol.runtime_settings import RuntimeSettings


class FakeCore:
    """What the front ends ask of the core: the two ASR models' configs and an answer to each request, whose
    partial transcript is `text_bytes` long (a long one fills a client's receive buffer after a few chunks)."""

    def __init__(self, text_bytes: int = 10) -> None:
        self.requests = []
        self.text = "w" * text_bytes
        streaming = mc.ModelConfig(name="streaming_wenet")
        streaming.sequence_batching.max_sequence_idle_microseconds = 5_000_000
        offline = mc.ModelConfig(name="attention_rescoring")
        for config in (streaming, offline):
            config.output.add(name="TRANSCRIPTS")
            config.output.add(name="DETAILS")
        configs = {"streaming_wenet": streaming, "attention_rescoring": offline}

        class Manager:
            def get(self, name, version=""):
                if name not in configs:
                    raise ServerError(f"Request for unknown model: '{name}' is not found", ErrorCode.NOT_FOUND)
                return type("Loaded", (), {"config": configs[name]})()

        self.manager = Manager()

    async def infer(self, request):
        self.requests.append(request)
        details = json.dumps({"text": self.text, "segment": 0}).encode()
        return InferResponse(request.model_name, "1", outputs=[
            Tensor("TRANSCRIPTS", "BYTES", np.array([self.text.encode()], dtype=np.object_)),
            Tensor("DETAILS", "BYTES", np.array([details], dtype=np.object_))])


@pytest.fixture
async def serve():
    runners = []

    async def start(core: FakeCore, **settings) -> tuple[web.Application, int]:
        app = make_app(core, RuntimeSettings(), **settings)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return app, runner.addresses[0][1]

    yield start
    for runner in runners:
        await runner.cleanup()


def ws_frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame (RFC 6455), as a client that controls its own socket writes it."""
    mask = os.urandom(4)
    size = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([0x80 | size]) if size < 126 else
                                     bytes([0x80 | 126]) + struct.pack(">H", size))
    masked = np.frombuffer(payload, np.uint8) ^ np.resize(np.frombuffer(mask, np.uint8), size)
    return head + mask + masked.tobytes()


async def test_a_websocket_client_that_stops_reading_is_cut_and_its_sequence_ends(serve, monkeypatch):
    monkeypatch.setattr(websocket_asr, "SEND_TIMEOUT_S", 1.0)
    monkeypatch.setattr(websocket_asr, "CLOSE_WAIT_S", 0.5)
    core = FakeCore(text_bytes=100_000)
    app, port = await serve(core)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and never read: the server's sends block
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")
        writer.write(ws_frame(1, json.dumps({"signal": "start"}).encode()))
        for _ in range(40):
            writer.write(ws_frame(2, np.zeros(4800, "<i2").tobytes()))  # 0.3 s each
            try:
                await asyncio.wait_for(writer.drain(), 1.0)
            except asyncio.TimeoutError:
                break  # the server stopped reading the socket, as it should while its answers wait
        # then silent and never reading: before, the socket and its sequence stayed open for good (the reading
        # loop waited on the blocked sends, so the idle limit never fired); now cut, the sequence ended (END)
        for _ in range(300):
            if not app[websocket_asr.SESSIONS] and any(r.sequence.end for r in core.requests):
                break
            await asyncio.sleep(0.05)
        assert not app[websocket_asr.SESSIONS]
        assert any(r.sequence.end for r in core.requests)
    finally:
        writer.transport.abort()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def test_empty_binary_frames_add_nothing(serve, monkeypatch):
    sessions = []
    made = websocket_asr.SocketSession.__init__

    def remember(self, *args, **kwargs):
        made(self, *args, **kwargs)
        sessions.append(self)

    monkeypatch.setattr(websocket_asr.SocketSession, "__init__", remember)
    core = FakeCore()
    _, port = await serve(core)
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(f"ws://127.0.0.1:{port}/") as ws:
            await ws.send_str(json.dumps({"signal": "start"}))
            assert json.loads(await ws.receive_str())["type"] == "server_ready"
            for _ in range(2000):
                await ws.send_bytes(b"")
            for _ in range(100):  # until the server has read them all (the frames are small)
                await asyncio.sleep(0.02)
            assert sessions[0].pending == [] and sessions[0].pending_samples == 0  # before: 2,000 entries
            await ws.send_bytes(np.zeros(8000, "<i2").tobytes())
            await ws.send_str(json.dumps({"signal": "end"}))
            kinds = []
            async for message in ws:
                kinds.append(json.loads(message.data).get("type"))
    assert kinds[-1] == "speech_end"
    # the one frame with audio, then the END with nothing gathered: no request per empty frame
    assert [r.inputs[0].data.size for r in core.requests] == [8000, 0]


def wav_bytes(samples: np.ndarray, rate: int = 16000, subtype: str = "FLOAT", fmt: str = "WAV") -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, rate, subtype=subtype, format=fmt)
    return out.getvalue()


async def test_openai_forms_are_bounded_and_nan_audio_is_a_client_error(serve):
    core = FakeCore()
    _, port = await serve(core, max_body_bytes=1 << 20)
    url = f"http://127.0.0.1:{port}/v1/audio/transcriptions"
    tone = (0.1 * np.sin(np.arange(16000) / 5)).astype(np.float32)
    async with aiohttp.ClientSession() as session:
        form = aiohttp.FormData()
        for index in range(100):  # sent chunked: no Content-Length to check
            form.add_field("timestamp_granularities[]", "x" * 60_000)
        form.add_field("file", wav_bytes(tone), filename="a.wav")
        async with session.post(url, data=form(), chunked=True) as response:
            assert response.status == 413 and "more than 32 fields" in (await response.json())["error"]["message"]
        two = aiohttp.FormData()
        for _ in range(2):
            two.add_field("file", wav_bytes(tone), filename="a.wav")
        async with session.post(url, data=two) as response:
            assert response.status == 400 and (await response.json())["error"]["param"] == "file"
        bad = tone.copy()
        bad[100] = np.nan
        nan_form = aiohttp.FormData()
        nan_form.add_field("file", wav_bytes(bad), filename="a.wav")
        async with session.post(url, data=nan_form) as response:
            body = await response.json()
            assert response.status == 400 and "not finite" in body["error"]["message"], body
    assert not core.requests


def test_uploads_decode_block_by_block_to_the_same_samples():
    """A file of many channels at a high rate is mixed down and resampled as it is decoded (memory: the
    16 kHz result and a block), and gives what decoding it whole gives."""
    rng = np.random.default_rng(0)
    channels = (0.05 * rng.standard_normal((192_000 * 2, 8))).astype(np.float32)
    flac = wav_bytes(channels, rate=192_000, subtype="PCM_24", fmt="FLAC")
    audio = decode_audio_bytes(flac, "many.flac", max_seconds=60)
    whole, rate = soundfile.read(io.BytesIO(flac), dtype="float32", always_2d=True)
    import soxr

    expected = soxr.resample(whole.mean(axis=1, dtype=np.float64).astype(np.float32), rate, 16000, quality="HQ")
    assert (audio.source_rate, audio.source_channels, audio.samples.shape) == (192_000, 8, (32_000,))
    np.testing.assert_allclose(audio.samples, np.clip(expected, -1, 1), atol=1e-6)
    with pytest.raises(AudioError, match="lasts"):
        decode_audio_bytes(flac, "many.flac", max_seconds=1)
