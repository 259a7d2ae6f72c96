"""Helpers shared by the fault tests: a repository with a healthy model beside the faulty ones, and clients."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPO, copy_model

ADD_SUB_SUM = [0.0, 2.0, 4.0, 6.0]  # OUTPUT0 of add_sub for INPUT0 = INPUT1 = [0, 1, 2, 3]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository holding add_sub, the healthy model every fault test checks is still serving."""
    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    return tmp_path


def add_sub_inputs() -> list:
    a = np.arange(4, dtype=np.float32)
    inputs = [aioclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    return inputs


async def add_sub(client) -> list:
    return (await client.infer("add_sub", add_sub_inputs(), client_timeout=10)).as_numpy("OUTPUT0").tolist()


def seconds_input(seconds: float, batched: bool = False) -> list:
    tensor = aioclient.InferInput("SECONDS", [1, 1] if batched else [1], "FP32")
    tensor.set_data_from_numpy(np.full([1, 1] if batched else [1], seconds, np.float32))
    return [tensor]


async def outcome(coro):
    """The result of a call, or ('error', status, message) when it fails."""
    try:
        return await coro
    except InferenceServerException as exc:
        return ("error", exc.status(), exc.message())


