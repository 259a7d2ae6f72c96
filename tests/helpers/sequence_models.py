"""Model folders for sequence-batching tests: an ONNX accumulator with implicit state, and python models
that keep per-sequence state keyed by correlation id (as WeNet's Triton python models do)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from onnx import TensorProto, helper

from tests.helpers.onnx_models import write_model

ACCUMULATOR_CONFIG = """
name: "{name}"
backend: "onnxruntime"
max_batch_size: 64
input [ {{ name: "INPUT", data_type: TYPE_FP32, dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT", data_type: TYPE_FP32, dims: [ 1 ] }} ]
sequence_batching {{
  max_sequence_idle_microseconds: {idle_us}
  oldest {{ max_candidate_sequences: 64 preferred_batch_size: [ 16 ] max_queue_delay_microseconds: 2000 }}
  state [ {{
    input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ]
    initial_state {{ data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "zero" }}
  }} ]
}}
"""


def accumulator(repo: Path, name: str = "accumulator", idle_us: int = 5_000_000) -> Path:
    """OUTPUT = STATE_OUT = STATE_IN + INPUT: the running sum of a sequence, kept as implicit state."""
    model_dir = repo / name
    model_dir.mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(ACCUMULATOR_CONFIG.format(name=name, idle_us=idle_us))
    nodes = [
        helper.make_node("Add", ["STATE_IN", "INPUT"], ["SUM"]),
        helper.make_node("Identity", ["SUM"], ["OUTPUT"]),
        helper.make_node("Identity", ["SUM"], ["STATE_OUT"]),
    ]
    shape = ["batch", 1]
    write_model(
        model_dir / "1" / "model.onnx",
        nodes,
        [("INPUT", TensorProto.FLOAT, shape), ("STATE_IN", TensorProto.FLOAT, shape)],
        [("OUTPUT", TensorProto.FLOAT, shape), ("STATE_OUT", TensorProto.FLOAT, shape)],
    )
    return model_dir


def python_model(repo: Path, name: str, config: str, source: str) -> Path:
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(config))
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(source))
    return model_dir


SEQUENCE_CONTROLS = """
    control_input [
      { name: "START", control [ { kind: CONTROL_SEQUENCE_START, int32_false_true: [ 0, 1 ] } ] },
      { name: "END", control [ { kind: CONTROL_SEQUENCE_END, int32_false_true: [ 0, 1 ] } ] },
      { name: "CORRID", control [ { kind: CONTROL_SEQUENCE_CORRID, data_type: TYPE_UINT64 } ] }
    ]
"""

# Keeps a running sum per correlation id in a dict (created on START, dropped on END).
PY_ACCUMULATOR_SOURCE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "X").as_numpy().reshape(-1)[0]
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy().reshape(-1)[0]
            end = pb_utils.get_input_tensor_by_name(request, "END").as_numpy().reshape(-1)[0]
            corrid = int(pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().reshape(-1)[0])
            if start:
                self.sums[corrid] = 0.0
            self.sums[corrid] += float(value)
            out = np.array([[self.sums[corrid]]], dtype=np.float32)
            if end:
                del self.sums[corrid]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", out)]))
        return responses
'''

PY_ACCUMULATOR_CONFIG = """
    name: "{name}"
    backend: "python"
    max_batch_size: 16
    input [ {{ name: "X", data_type: TYPE_FP32, dims: [ 1 ] }} ]
    output [ {{ name: "SUM", data_type: TYPE_FP32, dims: [ 1 ] }} ]
    sequence_batching {{
      max_sequence_idle_microseconds: 5000000
      oldest {{ max_candidate_sequences: 64 max_queue_delay_microseconds: 1000 }}
    """ + SEQUENCE_CONTROLS.replace("{", "{{").replace("}", "}}") + """
    }}
    instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
"""


def py_accumulator(repo: Path, name: str = "py_accumulator", instances: int = 1) -> Path:
    return python_model(repo, name, PY_ACCUMULATOR_CONFIG.format(name=name, instances=instances),
                        PY_ACCUMULATOR_SOURCE)
