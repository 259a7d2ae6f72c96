"""The bundled demo model, served from model_repo/, on held-out utterances (tests/data/demo_utts).

Needs the exported graphs, which `scripts/setup_env.sh` (or scripts/build_demo_repo.sh) writes.
The accuracy bound is a regression guard at the level the bundled model measured (see its MODEL_CARD.md).
"""

from __future__ import annotations

import asyncio

import pytest
import tritonclient.grpc.aio as aioclient

from client.audio import load_audio
from client.offline import recognize
from client.report import error_rates
from client.streaming import StreamingClient, StreamOptions
from tests.conftest import BUNDLED_REPO, ROOT

DATA = ROOT / "tests" / "data" / "demo_utts"
MAX_OFFLINE_WER = 0.95  # regression bound; MODEL_CARD.md has the measured figures

pytestmark = pytest.mark.skipif(
    not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
    reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh",
)


def utterances():
    texts = dict(line.split(" ", 1) for line in (DATA / "text").read_text().splitlines())
    out = []
    for line in (DATA / "wav.scp").read_text().splitlines():
        utt, path = line.split()
        out.append((utt, load_audio(DATA / path).samples, texts[utt]))
    return out


@pytest.fixture
async def url(running):
    async with running(BUNDLED_REPO, allow_http=False) as server:
        yield f"127.0.0.1:{server.grpc_port}"


async def test_offline_and_streaming_transcripts_of_held_out_utterances(url):
    items = utterances()
    client = aioclient.InferenceServerClient(url)
    offline = await asyncio.gather(*(recognize(client, samples) for _, samples, _ in items))
    await client.close()
    rates = error_rates([(ref, r.text) for (_, _, ref), r in zip(items, offline)])
    assert rates.wer <= MAX_OFFLINE_WER, rates
    # Streaming with very different chunkings gives the same final transcript.
    finals = {}
    for options in (StreamOptions(chunk_ms=100), StreamOptions(chunk_ms=640), StreamOptions(wenet_chunks=True)):
        async with StreamingClient(url, options) as streaming:
            results = [await streaming.transcribe(samples) for _, samples, _ in items[:3]]
        finals[str(options)] = [r.text for r in results]
        assert all(len(r.partials) >= 2 for r in results)
    assert len({tuple(v) for v in finals.values()}) == 1, finals
