"""WebSocket streaming in WeNet's and sherpa-onnx's dialects, message for message as their clients send them
(WeNet's websocket_client: a JSON start, 0.5 s int16 frames, a JSON end; sherpa-onnx's online client: 8000
float32 samples per frame, then "Done"), on the bundled model; malformed frames and dropped sockets."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import numpy as np
import pytest

from asr_client.audio import load_audio
from tests.conftest import BUNDLED_REPO, ROOT

pytestmark = pytest.mark.skipif(
    not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
    reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh",
)
DATA = ROOT / "tests" / "data" / "demo_utts"
FIRST, SECOND = "test_b_000000", "test_a_000004"
FIRST_TEXT = "can you bring two chairs to the beach"


def audio(name: str) -> np.ndarray:
    return load_audio(DATA / f"{name}.flac").samples


async def received(ws) -> list:
    out = []
    async for message in ws:
        out.append(message.data)
    return out


async def wenet_session(url: str, samples: np.ndarray, continuous: bool) -> list[dict]:
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url) as ws:
            await ws.send_str(json.dumps({"signal": "start", "nbest": 1, "continuous_decoding": continuous}))
            pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
            for start in range(0, len(pcm), 8000):  # WeNet's client: 0.5 s per message
                await ws.send_bytes(pcm[start:start + 8000].tobytes())
            await ws.send_str(json.dumps({"signal": "end"}))
            replies = []
            async for message in ws:
                replies.append(json.loads(message.data))
                if replies[-1].get("type") == "speech_end":
                    break
            return replies


async def test_wenet_dialect_partials_finals_word_pieces_and_speech_end(running):
    async with running(BUNDLED_REPO, allow_grpc=False) as server:
        url = f"ws://127.0.0.1:{server.http_port}/"
        replies = await wenet_session(url, audio(FIRST), continuous=False)
        kinds = [r["type"] for r in replies]
        assert kinds[0] == "server_ready" and kinds[-2:] == ["final_result", "speech_end"]
        assert "partial_result" in kinds and all(r["status"] == "ok" for r in replies)
        final = json.loads(replies[-2]["nbest"])  # nbest is a JSON string, as WeNet sends it
        assert final[0]["sentence"] == FIRST_TEXT
        pieces = final[0]["word_pieces"]
        assert [p["word"] for p in pieces] == FIRST_TEXT.split()
        assert all(isinstance(p["start"], int) and p["start"] <= p["end"] for p in pieces)  # integer ms
        partial = json.loads(next(r for r in replies if r["type"] == "partial_result")["nbest"])
        assert set(partial[0]) == {"sentence"}
        # continuous decoding: two sentences with a pause are two final_results, then speech_end
        two = np.concatenate([audio(FIRST), np.zeros(16000, np.float32), audio(SECOND)])
        replies = await wenet_session(url, two, continuous=True)
        finals = [json.loads(r["nbest"])[0]["sentence"] for r in replies if r["type"] == "final_result"]
        assert finals[0] == FIRST_TEXT and len([f for f in finals if f]) == 2 and replies[-1]["type"] == "speech_end"


async def test_sherpa_dialect_float_frames_done_and_done_bang(running):
    async with running(BUNDLED_REPO, allow_grpc=False) as server:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"ws://127.0.0.1:{server.http_port}") as ws:
                samples = audio(FIRST).astype("<f4")
                for start in range(0, len(samples), 8000):  # sherpa-onnx's client: --samples-per-message 8000
                    await ws.send_bytes(samples[start:start + 8000].tobytes())
                await ws.send_str("Done")
                messages = []
                async for message in ws:
                    messages.append(message.data)
                    if message.data == "Done!":
                        break
        results = [json.loads(m) for m in messages[:-1]]
        assert messages[-1] == "Done!" and results[-1]["is_final"] and results[-1]["is_eof"]
        assert results[-1]["text"] == FIRST_TEXT
        assert set(results[0]) == {"text", "tokens", "timestamps", "ys_probs", "lm_probs", "context_scores",
                                   "segment", "words", "start_time", "is_final", "is_eof"}
        assert len(results[-1]["tokens"]) == len(results[-1]["timestamps"]) > 0


async def test_bad_frames_get_a_clear_error_and_free_the_stream_others_go_on(running):
    async with running(BUNDLED_REPO, allow_grpc=False) as server:
        url = f"ws://127.0.0.1:{server.http_port}/"
        async with aiohttp.ClientSession() as session:
            cases = [
                (lambda ws: ws.send_str("hello"), "JSON signals"),
                (lambda ws: ws.send_str(json.dumps({"signal": "start", "nbest": "two"})), "integer is expected"),
                (lambda ws: ws.send_str(json.dumps({"signal": "dance"})), "Unexpected signal"),
                (lambda ws: ws.send_bytes(b"\x00" * 7), "multiple of 4"),
            ]
            for send, expected in cases:
                async with session.ws_connect(url) as ws:
                    await send(ws)
                    text = " ".join(str(m.data) for m in [m async for m in ws])
                    assert expected in text, (expected, text)
            # a WeNet stream with an odd byte count, and a socket dropped mid-stream
            async with session.ws_connect(url) as ws:
                await ws.send_str(json.dumps({"signal": "start"}))
                await ws.send_bytes(b"\x00" * 9)
                text = " ".join(str(m.data) for m in [m async for m in ws])
                assert "odd number of bytes" in text and '"failed"' in text
            dropped = await session.ws_connect(url)
            await dropped.send_str(json.dumps({"signal": "start"}))
            await dropped.send_bytes(np.zeros(8000, "<i2").tobytes())
            await dropped.close()
            # another stream is not disturbed
            replies = await wenet_session(url, audio(FIRST), continuous=False)
            assert json.loads(replies[-2]["nbest"])[0]["sentence"] == FIRST_TEXT
            async with session.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as reply:
                metrics = await reply.text()
            for _ in range(50):  # every socket's sequence is freed (the dropped one by its abort)
                live = [line for line in metrics.splitlines() if line.startswith("asr_server_live_sequences")
                        and 'model="streaming_wenet"' in line]
                if live and live[0].endswith(" 0"):
                    break
                await asyncio.sleep(0.1)
                async with session.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as reply:
                    metrics = await reply.text()
            assert live and live[0].endswith(" 0"), live


async def test_the_page_is_served_at_the_root(running):
    async with running(BUNDLED_REPO, allow_grpc=False) as server:
        async with aiohttp.ClientSession() as session:
            for path, kind, marker in (("/", "text/html", "AudioWorklet"), ("/app.js", "javascript", "speech_end"),
                                       ("/pcm-worklet.js", "javascript", "registerProcessor")):
                async with session.get(f"http://127.0.0.1:{server.http_port}{path}") as reply:
                    body = await reply.text()
                    assert reply.status == 200 and kind in reply.headers["Content-Type"], path
                    assert marker in body or path == "/", path


async def test_restrictions_and_models_that_do_not_stream(running):
    async with running(BUNDLED_REPO, allow_grpc=False, http_restricted_apis=("inference:key=secret",)) as server:
        base = f"127.0.0.1:{server.http_port}"
        async with aiohttp.ClientSession() as session:
            # --http-restricted-api inference covers the WebSocket and the OpenAI endpoint as it covers /infer
            with pytest.raises(aiohttp.WSServerHandshakeError) as info:
                await session.ws_connect(f"ws://{base}/")
            assert info.value.status == 403
            async with session.post(f"http://{base}/v1/audio/transcriptions", data=b"x") as reply:
                assert reply.status == 403
            async with session.get(f"http://{base}/") as reply:  # the page itself is not inference
                assert reply.status == 200
            async with session.ws_connect(f"ws://{base}/?model=attention_rescoring",
                                          headers={"key": "secret"}) as ws:
                await ws.send_str(json.dumps({"signal": "start"}))
                text = " ".join(str(m.data) for m in [m async for m in ws])
            assert "does not stream" in text


SLOW_STREAM_CONFIG = """
    name: "slow_stream"
    backend: "python"
    max_batch_size: 4
    input [ { name: "WAV", data_type: TYPE_FP32, dims: [ -1 ] },
            { name: "WAV_LENS", data_type: TYPE_INT32, dims: [ 1 ] } ]
    output [ { name: "TRANSCRIPTS", data_type: TYPE_STRING, dims: [ 1 ] } ]
    sequence_batching {
      max_sequence_idle_microseconds: 5000000
      %s
    }
    instance_group [ { kind: KIND_CPU, count: 1 } ]
"""

# Answers "chunk N" for the N-th chunk of each sequence, 0.3 s after it runs: slower than the frames come.
SLOW_STREAM_SOURCE = '''
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = {}

    def execute(self, requests):
        time.sleep(0.3)
        responses = []
        for request in requests:
            key = int(pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().reshape(-1)[0])
            if pb_utils.get_input_tensor_by_name(request, "START").as_numpy().reshape(-1)[0]:
                self.seen[key] = 0
            self.seen[key] += 1
            text = np.array([[f"chunk {self.seen[key]}".encode()]], dtype=np.object_)
            if pb_utils.get_input_tensor_by_name(request, "END").as_numpy().reshape(-1)[0]:
                del self.seen[key]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TRANSCRIPTS", text)]))
        return responses
'''


async def test_a_sockets_next_chunks_reach_the_model_while_an_earlier_answer_is_computed(running, tmp_path):
    """The socket's frames are read and sent on while the model works on an earlier chunk (as a gRPC stream's
    requests are), at most MAX_IN_FLIGHT of them; the answers still come back in order."""
    from asr_server.protocol.websocket_asr import MAX_IN_FLIGHT
    from tests.helpers.sequence_models import SEQUENCE_CONTROLS, python_model
    from tests.helpers.waiting import wait_until

    python_model(tmp_path, "slow_stream", SLOW_STREAM_CONFIG % SEQUENCE_CONTROLS, SLOW_STREAM_SOURCE)
    frames = MAX_IN_FLIGHT + 4
    async with running(tmp_path, allow_grpc=False) as server:
        scheduler = server.manager.get("slow_stream").scheduler
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"ws://127.0.0.1:{server.http_port}/?model=slow_stream") as ws:
                for _ in range(frames):
                    await ws.send_bytes(np.zeros(8000, "<f4").tobytes())
                # while the first chunk runs (0.3 s), later ones wait in the model's queue, not in the socket
                assert await wait_until(lambda: scheduler.queued >= 2, 10.0, 0.01)
                seen = []  # queued while the socket's chunks are answered (one more runs meanwhile)

                async def watch():
                    while True:
                        seen.append(scheduler.queued)
                        await asyncio.sleep(0.005)

                watcher = asyncio.create_task(watch())
                await ws.send_str("Done")
                texts = []
                async for message in ws:
                    if message.data == "Done!":
                        break
                    texts.append(json.loads(message.data)["text"])
                watcher.cancel()
    assert max(seen) + 1 <= MAX_IN_FLIGHT  # never more unanswered than that
    assert texts == [f"chunk {i}" for i in range(1, frames + 2)]  # the frames' chunks, then Done's empty one
