"""The paced real-time stream load on the bundled streaming ensemble (in-process server)."""

from __future__ import annotations

import time

import pytest

from asr_server.analyzer import audio_data
from asr_server.analyzer.paced import paced_streams
from asr_server.analyzer.run import AnalyzerOptions
from tests.conftest import BUNDLED_REPO, ROOT

pytestmark = pytest.mark.skipif(
    not (BUNDLED_REPO / "streaming_encoder" / "1" / "streaming_encoder.onnx").exists(),
    reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh",
)


async def test_paced_streams_run_at_real_time_and_report_chunk_and_final_latency(running):
    utterances = audio_data.load_utterances(ROOT / "tests" / "data" / "demo_utts", limit=2)
    shortest = min(u.size for u in utterances) / audio_data.SAMPLE_RATE
    async with running(BUNDLED_REPO, allow_http=False) as server:
        started = time.perf_counter()
        result = await paced_streams(f"127.0.0.1:{server.grpc_port}", "streaming_wenet", utterances, streams=2,
                                     seconds=0.5, chunk_ms=640)
        elapsed = time.perf_counter() - started
    assert result.errors == 0, result.first_error
    assert elapsed >= shortest  # paced: one utterance takes at least its own duration
    assert result.audio_s >= 2 * shortest and result.chunks_per_s > 0
    assert 0 < result.chunk_p50_ms <= result.chunk_p99_ms < float("inf")
    assert 0 < result.final_p99_ms < float("inf")


def test_paced_objective_needs_audio(tmp_path):
    with pytest.raises(ValueError, match="paced_streams objective needs --audio"):
        AnalyzerOptions(model="streaming_wenet", export_path=tmp_path, repository=BUNDLED_REPO,
                        objective="paced_streams")
