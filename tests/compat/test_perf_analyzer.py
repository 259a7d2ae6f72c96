"""NVIDIA's perf_analyzer (from the tritonclient 2.51 wheel) against our server.

perf_analyzer reads ModelMetadata, ModelConfig (sequence batching, decoupled) and ModelStatistics, so a
complete run with its "Server:" section shows those are complete. Fetch it with
`bash scripts/get_perf_analyzer.sh`; without it these tests skip.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from tests.conftest import BUNDLED_REPO, ROOT, copy_model
from tests.helpers.sequence_models import accumulator

TOOL = ROOT / ".tools" / "perf_analyzer"
BINARY = TOOL / "bin" / "perf_analyzer"

pytestmark = pytest.mark.skipif(
    not BINARY.exists(), reason="perf_analyzer not fetched (run: bash scripts/get_perf_analyzer.sh)"
)


async def perf_analyzer(port: int, *args: str) -> str:
    # A fixed request count, not time windows: these tests check what the server reports, and on a loaded CI
    # machine time windows can fail perf_analyzer's stability check (it exits 2) whatever the threshold.
    env = dict(os.environ, LD_LIBRARY_PATH=str(TOOL / "lib"))
    proc = await asyncio.create_subprocess_exec(
        str(BINARY), "-i", "grpc", "-u", f"127.0.0.1:{port}", "--request-count", "200", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    return text


def server_counts(text: str) -> list[int]:
    """The 'Successful request count' lines of perf_analyzer's Server sections."""
    return [int(n) for n in re.findall(r"Successful request count: (\d+)", text)]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    copy_model(tmp_path, BUNDLED_REPO / "identity_fp32")
    accumulator(tmp_path)
    return tmp_path


async def test_unary_and_streaming_runs_report_server_statistics(repo: Path, running):
    async with running(repo, allow_http=False) as server:
        text = await perf_analyzer(server.grpc_port, "-m", "identity_fp32", "--shape", "INPUT0:16",
                                   "--concurrency-range", "2")
        assert "Throughput:" in text and server_counts(text) and server_counts(text)[0] > 0
        text = await perf_analyzer(server.grpc_port, "-m", "add_sub", "--streaming", "--concurrency-range", "2")
        assert server_counts(text) and server_counts(text)[0] > 0


async def test_sequence_model_with_implicit_state(repo: Path, running):
    async with running(repo, allow_http=False) as server:
        text = await perf_analyzer(server.grpc_port, "-m", "accumulator", "--streaming", "--sequence-length", "4",
                                   "--concurrency-range", "4")
        assert re.search(r"Sequence count: [1-9]\d*", text), text
        inferences = int(re.search(r"Inference count: (\d+)", text).group(1))
        executions = int(re.search(r"Execution count: (\d+)", text).group(1))
        assert server_counts(text)[0] == inferences > 0
        assert executions < inferences  # concurrent sequences shared batches
