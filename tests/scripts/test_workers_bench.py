"""bench/workers.py's perf_analyzer load: the repository it serves declares only what the fixed-answer model
makes, the chunk it sends is a 640 ms one, and a few paced sequences hold (skipped without perf_analyzer)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.analyzer.perf import BUNDLED_BINARY
from asr_server.child_process import stop_process
from bench.stream_overhead import no_op_repository
from bench.workers import load_perf_analyzer, perf_analyzer_input, start_server, transcripts_only


def test_the_perf_analyzer_repository_declares_transcripts_only_and_the_input_is_one_chunk(tmp_path: Path):
    repo = no_op_repository(tmp_path / "repo")
    transcripts_only(repo)
    config = text_format.Parse((repo / "streaming_wenet" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert [o.name for o in config.output] == ["TRANSCRIPTS"] and config.sequence_batching.control_input
    data = json.loads(perf_analyzer_input(tmp_path).read_text())["data"][0]
    assert data["WAV"]["shape"] == [10240] and len(data["WAV"]["content"]) == 10240 and data["WAV_LENS"] == [10240]


@pytest.mark.skipif(not BUNDLED_BINARY.exists(), reason="perf_analyzer not fetched (bash scripts/get_perf_analyzer.sh)")
def test_a_few_paced_sequences_from_perf_analyzer_hold(tmp_path: Path):
    repo = no_op_repository(tmp_path / "repo")
    transcripts_only(repo)
    args = SimpleNamespace(perf_binary=BUNDLED_BINARY, perf_input=perf_analyzer_input(tmp_path), perf_processes=2,
                           seconds=2.0)
    process, url = start_server(repo, 1)
    try:
        p99, failed, cpu = load_perf_analyzer(url, args, 8)
    finally:
        stop_process(process, 60)
    assert failed == 0 and 0 < p99 < 300 and cpu > 0
