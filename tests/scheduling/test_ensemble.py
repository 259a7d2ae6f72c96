"""Ensembles over gRPC: a pipeline of three models (a sequence-batched python model, an ONNX model, a
python formatter) with sequences flowing through it, a failing step, and a step model that is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as aioclient

from tests.helpers.grpc_streams import stream_all, x_input
from tests.helpers.onnx_models import identity_model, model_folder
from tests.helpers.sequence_models import py_accumulator, python_model


FORMAT_CONFIG = """
    name: "formatter"
    backend: "python"
    max_batch_size: 16
    input [ { name: "VALUE", data_type: TYPE_FP32, dims: [ 1 ] } ]
    output [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
    dynamic_batching { }
"""
FORMAT_SOURCE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            text = np.array([[f"sum={v:g}".encode() for v in row] for row in values], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
        return responses
'''
IDENTITY_CONFIG = """
name: "identity"
backend: "onnxruntime"
max_batch_size: 16
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
dynamic_batching { }
"""
ENSEMBLE_CONFIG = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 16
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "py_accumulator" model_version: -1 input_map { key: "X" value: "X" }
      output_map { key: "SUM" value: "running_sum" } },
    { model_name: "identity" model_version: -1 input_map { key: "INPUT0" value: "running_sum" }
      output_map { key: "OUTPUT0" value: "copied" } },
    { model_name: "formatter" model_version: -1 input_map { key: "VALUE" value: "copied" }
      output_map { key: "TEXT" value: "TEXT" } }
  ]
}
"""


def pipeline_repo(root: Path) -> Path:
    py_accumulator(root)
    model_folder(root, "identity", IDENTITY_CONFIG, identity_model, shape=["batch", 1])
    python_model(root, "formatter", FORMAT_CONFIG, FORMAT_SOURCE)
    (root / "pipeline" / "1").mkdir(parents=True)
    (root / "pipeline" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    return root


async def test_ensemble_of_three_models_with_sequences(tmp_path: Path, running, client_of):
    pipeline_repo(tmp_path)
    requests = []
    for step in range(3):
        for seq in range(4):
            requests.append(dict(
                model_name="pipeline", inputs=x_input(seq + 1, "X"), request_id=f"{seq}:{step}",
                sequence_id=500 + seq, sequence_start=step == 0, sequence_end=step == 2,
            ))
    async with running(tmp_path, allow_http=False) as server:
        client = client_of(server)
        meta = await client.get_model_metadata("pipeline", as_json=True)
        assert meta["platform"] == "ensemble"
        results = await stream_all(client, requests)
        assert all(e is None for _, e in results), [str(e) for _, e in results if e][:2]
        got = {r.get_response().id: r.as_numpy("TEXT")[0, 0] for r, _ in results}
        for seq in range(4):
            for step in range(3):
                assert got[f"{seq}:{step}"] == f"sum={(seq + 1) * (step + 1)}".encode()
        # A failing step is reported on the ensemble request, naming the step; the stream goes on.
        bad = aioclient.InferInput("X", [1, 1], "FP32")
        bad.set_data_from_numpy(np.array([[1.0]], np.float32))
        results = await stream_all(client, [
            dict(model_name="pipeline", inputs=[bad], sequence_id=9),
            dict(model_name="pipeline", inputs=x_input(2, "X"), sequence_id=10, sequence_start=True, sequence_end=True),
        ])
        errors = [str(e) for _, e in results if e is not None]
        assert len(errors) == 1 and "step 0 ('py_accumulator')" in errors[0] and "START flag" in errors[0]
        ok = [r for r, e in results if e is None]
        assert ok[0].as_numpy("TEXT")[0, 0] == b"sum=2"
        stats = (await client.get_inference_statistics("pipeline", as_json=True))["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] == "13"
        assert stats["inference_stats"]["fail"]["count"] == "1"


async def test_ensemble_with_missing_step_model_is_unavailable(tmp_path: Path, running, client_of):
    (tmp_path / "pipeline" / "1").mkdir(parents=True)
    (tmp_path / "pipeline" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    async with running(tmp_path, allow_http=False, exit_on_error=False) as server:
        client = client_of(server)
        index = {m["name"]: m for m in (await client.get_model_repository_index(as_json=True))["models"]}
        assert index["pipeline"]["state"] == "UNAVAILABLE"
        # Triton 2.51's words since cf1dc33 (an ensemble's load loads its steps, or names those it cannot)
        assert "contains models that are not available or ambiguous" in index["pipeline"]["reason"]
        assert "formatter" in index["pipeline"]["reason"]
