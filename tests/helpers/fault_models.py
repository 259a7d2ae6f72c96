"""Python model folders that misbehave on purpose, for the fault and shutdown tests.

- `sleepy`: sleeps SECONDS (FP32 [1]) in execute, then answers it back as OUT: a slow or hanging model
  (bounded, so a test never leaves a thread behind for long). Optional dynamic batching with a queue policy.
  Each execute() first appends a byte to `.<name>.started` beside the model's folder (not in it: in poll
  mode a file changed there would reload the model): `executions(folder)` tells a test that the instance is
  busy now, where a sleep could only guess.
- `crash_at_load`: initialize() raises.
- `gated_load`: initialize() appends a byte to `.<name>.loading` beside the model's folder, then waits (60 s at
  most) until a gate file exists: a load that lasts exactly as long as a test needs (`loads(folder)` counts).
"""

from __future__ import annotations

from pathlib import Path

SLEEPY_PY = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        folder = args["model_repository"].rstrip("/")
        self.started = os.path.join(os.path.dirname(folder), "." + os.path.basename(folder) + ".started")

    def execute(self, requests):
        with open(self.started, "ab") as marker:
            marker.write(b".")
        responses = []
        for request in requests:
            seconds = pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()
            time.sleep(float(seconds.reshape(-1)[0]))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", seconds.astype(np.float32))]))
        return responses
"""

CRASH_AT_LOAD_PY = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("crashed while loading")

    def execute(self, requests):
        return []
"""


GATED_LOAD_PY = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

GATE = {gate!r}


class TritonPythonModel:
    def initialize(self, args):
        folder = args["model_repository"].rstrip("/")
        with open(os.path.join(os.path.dirname(folder), "." + os.path.basename(folder) + ".loading"), "ab") as f:
            f.write(b".")
        deadline = time.monotonic() + 60
        while not os.path.exists(GATE) and time.monotonic() < deadline:
            time.sleep(0.05)  # another process opens the gate: nothing to wait on but the file

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.zeros(1, np.float32))]) for _ in requests]
"""


def sleepy(repo: Path, name: str = "sleepy", batching: str = "") -> Path:
    """`batching`: a dynamic_batching { ... } body; given, the model batches (max_batch_size 4)."""
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    max_batch = 4 if batching else 0
    config = (f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch}\n'
              'input [ { name: "SECONDS", data_type: TYPE_FP32, dims: [ 1 ] } ]\n'
              'output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] } ]\n'
              'instance_group [ { kind: KIND_CPU, count: 1 } ]\n')
    if batching:
        config += f"dynamic_batching {{ {batching} }}\n"
    (folder / "config.pbtxt").write_text(config)
    (folder / "1" / "model.py").write_text(SLEEPY_PY)
    return folder


def executions(folder: Path) -> int:
    """How many times a `sleepy` model in `folder` has begun execute() (each batch counts once)."""
    marker = folder.parent / f".{folder.name}.started"
    return marker.stat().st_size if marker.exists() else 0


def _x_to_y_model(repo: Path, name: str, code: str) -> Path:
    """A python model folder: FP32 [1] X -> FP32 [1] Y, no batching, `code` as its model.py."""
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]\n'
        'output [ { name: "Y", data_type: TYPE_FP32, dims: [ 1 ] } ]\n')
    (folder / "1" / "model.py").write_text(code)
    return folder


def crash_at_load(repo: Path, name: str = "crash_at_load") -> Path:
    return _x_to_y_model(repo, name, CRASH_AT_LOAD_PY)


def gated_load(repo: Path, gate: Path, name: str = "gated_load") -> Path:
    """A model whose every load waits until the file `gate` exists."""
    return _x_to_y_model(repo, name, GATED_LOAD_PY.format(gate=str(gate)))


def loads(folder: Path) -> int:
    """How many times a `gated_load` model in `folder` has begun loading (in any process)."""
    marker = folder.parent / f".{folder.name}.loading"
    return marker.stat().st_size if marker.exists() else 0
