"""A Triton python model that runs an ONNX graph with onnxruntime: a test-only stand-in for the onnxruntime
backend, which the real Triton fetched here (the nvidia-pytriton wheel) does not ship.

`as_python_model(folder)` turns a model folder written for `backend: "onnxruntime"` into the same model on
`backend: "python"`: the config keeps its inputs, outputs and batching; this file becomes its 1/model.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported by the test to convert folders, not as a model
    pb_utils = None


def as_python_model(folder: Path) -> None:
    config = folder / "config.pbtxt"
    text = config.read_text()
    graph = re.search(r'default_model_filename: "([^"]+)"', text).group(1)
    text = text.replace('backend: "onnxruntime"', 'backend: "python"')
    text = re.sub(r'default_model_filename: "[^"]+"\n', "", text)
    text += f'parameters [ {{ key: "onnx_file" value: {{ string_value: "{graph}" }} }} ]\n'
    config.write_text(text)
    (folder / "1" / "model.py").write_text(Path(__file__).read_text())


class TritonPythonModel:
    def initialize(self, args):
        import onnxruntime

        config = json.loads(args["model_config"])
        graph = config["parameters"]["onnx_file"]["string_value"]
        path = Path(args["model_repository"]) / args["model_version"] / graph
        self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}
            values = self.session.run(self.outputs, feeds)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor(name, np.ascontiguousarray(v)) for name, v in zip(self.outputs, values)]))
        return responses
