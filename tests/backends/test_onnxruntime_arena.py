"""Triton's `memory.enable_memory_arena_shrinkage` parameter reaches ONNX Runtime's run options: without it
the CPU arena keeps a long offline request's memory for good (bundled repo: +377 MB resident after two 59 s
utterances; with "cpu:0" on the offline encoder and decoder, +35 MB)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient

from tests.helpers.onnx_models import identity_model, model_folder

CONFIG = """
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
parameters [ {{ key: "memory.enable_memory_arena_shrinkage" value: {{ string_value: "{value}" }} }} ]
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 3 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 3 ] }} ]
"""


def inputs(batch: int) -> list:
    x = aioclient.InferInput("INPUT0", [batch, 3], "FP32")
    x.set_data_from_numpy(np.arange(batch * 3, dtype=np.float32).reshape(batch, 3))
    return [x]


async def test_arena_shrinkage_parameter_is_passed_to_every_run(tmp_path: Path, running):
    model_folder(tmp_path, "shrinking", CONFIG.format(name="shrinking", value="cpu:0"), identity_model)
    # A device this CPU-only session has no arena for: ORT refuses the run, which shows the option reaches it.
    model_folder(tmp_path, "no_such_arena", CONFIG.format(name="no_such_arena", value="gpu:7"), identity_model)
    async with running(tmp_path, allow_http=False) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        for batch in (1, 8, 2):  # shapes change between runs, as offline audio lengths do
            out = (await client.infer("shrinking", inputs(batch))).as_numpy("OUTPUT0")
            np.testing.assert_array_equal(out, np.arange(batch * 3, dtype=np.float32).reshape(batch, 3))
        with pytest.raises(Exception) as refused:
            await client.infer("no_such_arena", inputs(1))
        assert "gpu:7" in str(refused.value)
        await client.close()
