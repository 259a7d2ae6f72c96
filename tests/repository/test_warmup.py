"""model_warmup (Triton's): samples run on every instance after it loads, before the model is READY."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient

from tests.helpers.onnx_models import model_folder
from tests.helpers.sequence_models import python_model

# Records what every execute call of the instance saw: (request id, X as a list).
RECORDER_SOURCE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = []

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            self.seen.append((request.request_id(), x.tolist()))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
        return responses
'''

RECORDER_CONFIG = '''
name: "recorder"
backend: "python"
max_batch_size: 4
input [ { name: "X", data_type: TYPE_FP32, dims: [ 2 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 2 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
model_warmup [ { name: "zeros" batch_size: 3 count: 2
                 inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } },
               { name: "from_file" batch_size: 1
                 inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 2 ] input_data_file: "x.bin" } } } ]
'''

IDENTITY_CONFIG = '''
name: "identity"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 3 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 3 ] } ]
model_warmup [ { name: "sample" batch_size: 2
                 inputs { key: "%s" value: { data_type: TYPE_FP32 dims: [ 3 ] %s } } } ]
'''


async def test_every_instance_runs_the_samples_before_the_model_is_ready(tmp_path: Path, running):
    model_dir = python_model(tmp_path, "recorder", RECORDER_CONFIG, RECORDER_SOURCE)
    (model_dir / "warmup").mkdir()
    (model_dir / "warmup" / "x.bin").write_bytes(np.array([1.5, -2.0], np.float32).tobytes())
    async with running(tmp_path, allow_http=False) as server:
        instances = server.manager.get("recorder").pool.instances
        expected = [("warmup:zeros", [[0.0, 0.0]] * 3)] * 2 + [("warmup:from_file", [[1.5, -2.0]])]
        assert [i.backend._model.seen for i in instances] == [expected, expected]
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        x = aioclient.InferInput("X", [1, 2], "FP32")
        x.set_data_from_numpy(np.array([[1.0, 2.0]], np.float32))
        result = await client.infer("recorder", [x])
        assert result.as_numpy("Y").tolist() == [[2.0, 4.0]]
        await client.close()


@pytest.mark.parametrize("input_name, data, reason", [
    ("INPUT0", "random_data: true", None),
    ("INPUT0", 'input_data_file: "short.bin"', "holds 2 values, input 'INPUT0' of shape [2, 3] needs 6"),
    ("INPUT0", 'input_data_file: "../../escape.bin"', "input_data_file must be inside 'warmup/'"),
    ("NOPE", "zero_data: true", "unexpected inference input 'NOPE'"),
])
async def test_a_malformed_sample_fails_the_load_with_its_reason(tmp_path: Path, running, input_name, data, reason):
    model_dir = model_folder(tmp_path, "identity", IDENTITY_CONFIG % (input_name, data))
    (model_dir / "warmup").mkdir()
    (model_dir / "warmup" / "short.bin").write_bytes(np.zeros(2, np.float32).tobytes())
    (tmp_path / "escape.bin").write_bytes(np.zeros(6, np.float32).tobytes())
    async with running(tmp_path, allow_http=False, exit_on_error=False) as server:
        entry = server.manager.models["identity"]
        if reason is None:
            assert entry.versions, entry.reason
        else:
            assert not entry.versions and reason in entry.reason, entry.reason


async def test_a_sample_the_model_fails_fails_the_load_in_tritons_words(tmp_path: Path, running):
    failing = RECORDER_SOURCE.replace("self.seen.append", "raise ValueError('no warm-up for me'); self.seen.append")
    config = RECORDER_CONFIG[:RECORDER_CONFIG.index("model_warmup")] + (
        'model_warmup [ { name: "zeros" batch_size: 1 '
        'inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } } ]\n')
    python_model(tmp_path, "recorder", config, failing)
    async with running(tmp_path, allow_http=False, exit_on_error=False) as server:
        entry = server.manager.models["recorder"]
        assert not entry.versions
        assert "failed to run warmup sample 'zeros'" in entry.reason and "no warm-up for me" in entry.reason
