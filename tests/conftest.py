"""Shared fixtures: model repositories built in tmp_path and a real in-process server on free ports."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import AsyncIterator

import pytest

from asr_server.server import Server
from asr_server.settings import ServerSettings

ROOT = Path(__file__).resolve().parent.parent
BUNDLED_REPO = ROOT / "model_repo"
PYTHON_MODELS = ROOT / "tests" / "fixtures" / "python_models"


def copy_model(repo: Path, source: Path, name: str | None = None) -> Path:
    target = repo / (name or source.name)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    if name and name != source.name:
        config = target / "config.pbtxt"
        config.write_text(config.read_text().replace(f'name: "{source.name}"', f'name: "{name}"'))
    return target


# The slow tier: tests that start subprocesses and peers (real Triton, perf_analyzer, model-analyzer, Chromium,
# sherpa-onnx's client, worker processes), export or train models, or serve the bundled recogniser end to end.
# `bash scripts/test.sh` runs everything; `bash scripts/test.sh -m "not slow"` is the quick tier for the edit
# loop. A test elsewhere can still carry @pytest.mark.slow itself.
SLOW_PATHS = (
    "tests/compat/", "tests/analyzer/", "tests/e2e/", "tests/frontends/", "tests/gpu/", "tests/deploy/",
    "tests/server/test_workers.py", "tests/faults/test_parameter_fuzz.py", "tests/scripts/test_build_model_repo.py",
    "tests/scripts/test_openvino_repo.py", "tests/scripts/test_train.py", "tests/scripts/test_relay_leg.py",
    "tests/scripts/test_gen_corpus.py", "tests/scripts/test_eval.py", "tests/scripts/test_gpu_scale.py",
    "tests/asr/test_training.py",
    "tests/asr/test_export.py", "tests/asr/test_wenet_parity.py", "tests/client/test_live.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        path = Path(str(item.fspath)).relative_to(ROOT).as_posix()
        if path.startswith(SLOW_PATHS):
            item.add_marker(pytest.mark.slow)


def local_settings(*repos: Path, **overrides) -> ServerSettings:
    """Settings that bind every endpoint to 127.0.0.1 on free ports."""
    base = dict(
        model_repositories=tuple(repos),
        grpc_address="127.0.0.1",
        grpc_port=0,
        http_address="127.0.0.1",
        http_port=0,
        metrics_address="127.0.0.1",
        metrics_port=0,
        exit_timeout_secs=2.0,
    )
    base.update(overrides)
    return ServerSettings(**base)


@contextlib.asynccontextmanager
async def running_server(*repos: Path, **overrides) -> AsyncIterator[Server]:
    server = Server(local_settings(*repos, **overrides))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def running():
    """`async with running(repo, **settings) as server` inside a test."""
    return running_server
