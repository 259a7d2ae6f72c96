"""A Triton python model that runs an ONNX graph with onnxruntime: a test-only stand-in for the onnxruntime
backend, which the real Triton fetched here (the nvidia-pytriton wheel) does not ship.

`as_python_model(folder)` turns a model folder written for `backend: "onnxruntime"` into the same model on
`backend: "python"`: the config keeps its inputs, outputs and batching; this file becomes its 1/model.py.

A model with implicit state (`sequence_batching { state [...] }`, the streaming encoder) cannot keep it on
the python backend: Triton 2.51 feeds a python model the initial state on every request and drops the state
outputs it returns (implicit state is an onnxruntime/tensorrt/pytorch backend feature). Its shim therefore
keeps each sequence's state itself, keyed by CORRID, reset on START and dropped on END (the config's `state`
block becomes these three control inputs): the same results, with the state in the model instead of Triton.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported by the test to convert folders, not as a model
    pb_utils = None


def as_python_model(folder: Path) -> None:
    # imported here: this file is also the model.py that Triton's python stub runs, where they may be missing
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    path = folder / "config.pbtxt"
    config = text_format.Parse(path.read_text(), mc.ModelConfig())
    config.backend = "python"
    config.parameters["onnx_file"].string_value = config.default_model_filename
    config.ClearField("default_model_filename")
    batching = config.sequence_batching
    if batching.state:
        config.parameters["state"].string_value = ",".join(f"{s.input_name}:{s.output_name}" for s in batching.state)
        del batching.state[:]
        kinds = mc.ModelSequenceBatching.Control
        for name, kind in (("START", kinds.CONTROL_SEQUENCE_START), ("END", kinds.CONTROL_SEQUENCE_END)):
            batching.control_input.add(name=name).control.add(kind=kind, int32_false_true=[0, 1])
        batching.control_input.add(name="CORRID").control.add(kind=kinds.CONTROL_SEQUENCE_CORRID,
                                                              data_type=mc.TYPE_UINT64)
    path.write_text(text_format.MessageToString(config))
    (folder / "1" / "model.py").write_text(Path(__file__).read_text())


class TritonPythonModel:
    def initialize(self, args):
        import onnxruntime

        config = json.loads(args["model_config"])
        graph = config["parameters"]["onnx_file"]["string_value"]
        path = Path(args["model_repository"]) / args["model_version"] / graph
        self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        # The graph's own inputs and outputs: the config's, plus for a model with implicit state
        # (sequence_batching.state) the state inputs Triton feeds and the state outputs it keeps.
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        state = config["parameters"].get("state", {}).get("string_value", "")
        self.state_map = dict(pair.split(":") for pair in state.split(",")) if state else {}  # input -> output
        # A new sequence's state: zeros of the graph's state shapes, one row (the batch axis is symbolic).
        self.initial = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], _numpy_type(i.type))
                        for i in self.session.get_inputs() if i.name in self.state_map}
        self.states: dict[int, dict] = {}  # CORRID -> {state input name: value}

    def execute(self, requests):
        responses = []
        for request in requests:
            tensors = {name: pb_utils.get_input_tensor_by_name(request, name) for name in self.inputs}
            feeds = {name: t.as_numpy() for name, t in tensors.items() if t is not None}
            if self.state_map:
                key = int(_control(request, "CORRID"))
                state = self.initial if _control(request, "START") else self.states.get(key, self.initial)
                feeds.update(state)
            values = dict(zip(self.outputs, self.session.run(self.outputs, feeds)))
            if self.state_map:
                if _control(request, "END"):
                    self.states.pop(key, None)
                else:
                    self.states[key] = {i: values.pop(o) for i, o in self.state_map.items()}
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor(name, np.ascontiguousarray(v)) for name, v in values.items()
                 if name not in self.state_map.values()]))
        return responses


def _control(request, name: str):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]


def _numpy_type(onnx_type: str):
    return {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
            "tensor(float16)": np.float16}[onnx_type]
