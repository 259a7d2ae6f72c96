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
