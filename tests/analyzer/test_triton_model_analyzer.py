"""NVIDIA's own Model Analyzer (PyPI triton-model-analyzer 1.58) in remote launch mode against our server.

Remote mode talks to a running server started with --model-control-mode=explicit: it loads each config variant
it generates with RepositoryModelLoad and a config override (under the model's own name), measures it with
perf_analyzer and reads the server's Prometheus metrics. Here: our server in this process, identity_fp32 on the
CPU, the smallest automatic search (1 instance, max batch 1, concurrency 1). Fetch the tool with
`bash scripts/get_model_analyzer.sh` (and perf_analyzer with scripts/get_perf_analyzer.sh); skipped without.
"""

from __future__ import annotations

import asyncio
import csv
from pathlib import Path

import pytest

from asr_server.analyzer import perf
from asr_server.analyzer.results import MODEL_ANALYZER_COLUMNS
from tests.conftest import BUNDLED_REPO, ROOT, copy_model

MODEL_ANALYZER = ROOT / ".tools" / "model_analyzer" / "bin" / "model-analyzer"
try:
    PERF_ANALYZER = perf.find_binary()
except FileNotFoundError:
    PERF_ANALYZER = None

pytestmark = [
    pytest.mark.skipif(not MODEL_ANALYZER.exists(), reason="run bash scripts/get_model_analyzer.sh"),
    pytest.mark.skipif(PERF_ANALYZER is None, reason="run bash scripts/get_perf_analyzer.sh"),
    pytest.mark.slow,
]

CONFIG = """\
profile_models:
  identity_fp32:
    cpu_only: true
    perf_analyzer_flags:
      shape: INPUT0:16
run_config_search_max_instance_count: 1
run_config_search_max_model_batch_size: 1
run_config_search_max_concurrency: 1
"""


@pytest.mark.timeout(600)
async def test_model_analyzer_remote_mode_profiles_our_server(tmp_path: Path, running):
    repo = tmp_path / "repo"
    copy_model(repo, BUNDLED_REPO / "identity_fp32")
    (tmp_path / "ma.yaml").write_text(CONFIG)
    # perf_analyzer needs its libraries beside it: model-analyzer runs whatever path it is given
    wrapper = tmp_path / "perf_analyzer"
    wrapper.write_text(f"#!/bin/sh\nLD_LIBRARY_PATH={PERF_ANALYZER.parent.parent / 'lib'} exec {PERF_ANALYZER} \"$@\"\n")
    wrapper.chmod(0o755)
    export = tmp_path / "out"
    export.mkdir()  # model-analyzer wants the parent of its checkpoint directory to exist
    async with running(repo, model_control_mode="explicit") as server:
        proc = await asyncio.create_subprocess_exec(
            str(MODEL_ANALYZER), "profile", "-f", str(tmp_path / "ma.yaml"), "--triton-launch-mode", "remote",
            "--triton-grpc-endpoint", f"127.0.0.1:{server.grpc_port}",
            "--triton-http-endpoint", f"127.0.0.1:{server.http_port}",
            "--triton-metrics-url", f"http://127.0.0.1:{server.metrics_port}/metrics", "--client-protocol", "grpc",
            "--model-repository", str(repo), "--output-model-repository-path", str(export / "models"),
            "--export-path", str(export), "--checkpoint-directory", str(export / "ckpt"),
            "--perf-analyzer-path", str(wrapper), "--dcgm-disable",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=tmp_path)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=540)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    with (export / "results" / "metrics-model-inference.csv").open() as f:
        table = [row for row in csv.reader(f) if row]  # it ends the file with an empty line
    assert table[0] == list(MODEL_ANALYZER_COLUMNS)  # the columns our analyzer writes first, from the real tool
    configs = {row[3] for row in table[1:]}
    assert "identity_fp32_config_default" in configs and len(configs) >= 2  # it loaded a variant of its own
    assert all(float(row[7]) > 0 for row in table[1:])
