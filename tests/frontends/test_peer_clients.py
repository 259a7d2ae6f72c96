"""Clients nobody here wrote, unchanged, against our WebSocket: sherpa-onnx's own C++ online WebSocket client
(PyPI sherpa-onnx-bin, in the dev extra) transcribes the demo utterances exactly as the gRPC streaming path does.
(WeNet's C++ client is not packaged anywhere installable: tests/frontends/test_websocket.py sends its messages
one for one.)"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import pytest
import soundfile

from asr_client.audio import load_audio
from asr_client.streaming import StreamingClient, StreamOptions
from tests.conftest import BUNDLED_REPO, ROOT

CLIENT = shutil.which("sherpa-onnx-online-websocket-client") or str(
    Path(sys.executable).with_name("sherpa-onnx-online-websocket-client"))
pytestmark = [
    pytest.mark.skipif(not Path(CLIENT).exists(), reason="sherpa-onnx-bin is not installed (pip install "
                       "sherpa-onnx-bin==2.0.1; the dev extra has it)"),
    pytest.mark.skipif(not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
                       reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh"),
]
DATA = ROOT / "tests" / "data" / "demo_utts"


async def sherpa_client(port: int, wav: Path) -> dict:
    proc = await asyncio.create_subprocess_exec(
        CLIENT, "--server-ip=127.0.0.1", f"--server-port={port}", "--seconds-per-message=0.01", str(wav),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    lines = [line.split(" ", 1)[1] for line in out.decode().splitlines() if "OnMessage" in line and "{" in line]
    assert proc.returncode == 0 and lines, out.decode()[-2000:]
    return json.loads(lines[-1])


async def test_sherpa_onnx_cpp_client_gets_the_grpc_transcripts(running, tmp_path):
    names = sorted(p.stem for p in DATA.glob("*.flac"))
    async with running(BUNDLED_REPO) as server:
        async with StreamingClient(f"127.0.0.1:{server.grpc_port}", StreamOptions()) as grpc_client:
            for name in names:
                samples = load_audio(DATA / f"{name}.flac").samples
                wav = tmp_path / f"{name}.wav"
                soundfile.write(wav, samples, 16000, subtype="PCM_16")
                last = await sherpa_client(server.http_port, wav)
                expected = (await grpc_client.transcribe(samples)).text
                assert last["is_final"] and last["is_eof"] and last["text"] == expected, name
