"""The one interface every backend implements, and the registry that picks a backend by config.

Contract (documented once, here):
- `load()` runs once per model instance, in a worker thread; it may be slow.
- `execute(requests, senders)` runs a batch that the scheduler formed. For a model with max_batch_size > 0
  every input carries the batch dimension first; the scheduler only batches requests whose non-batch
  shapes agree, unless the backend declares `ragged_batching`.
  It returns one entry per request, in order: an `InferResponse` or a `ServerError`, so a bad request
  fails alone. Responses hold every output the model produced (the core filters to the requested ones,
  the sequence batcher takes the implicit-state outputs).
  For a decoupled model `senders[i]` is that request's sink; the backend sends zero or more responses
  through it and finally calls `senders[i](None, True)` (or a last response with final=True), and the
  returned list holds None for requests whose responses go through the sink.
- `unload()` frees resources; called once, after the last execute returned.
Backends are called from their instances' threads: they must not touch the event loop.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from pathlib import Path
from typing import Any, ClassVar, Optional, Sequence, Union

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.errors import ServerError
from asr_server.messages import InferRequest, InferResponse, ResponseSink
from asr_server.server_port import ServerPort

ExecuteResult = list[Union[InferResponse, ServerError, None]]


@dataclasses.dataclass
class ModelContext:
    """What a backend instance is told about the model it serves."""

    name: str
    version: int
    config: mc.ModelConfig  # complete (auto-completed) config
    model_dir: Path  # <repository>/<model>
    version_dir: Path  # <repository>/<model>/<version>
    instance_name: str = ""  # "<model>_<group index>_<instance index>" (Triton's naming: "<group name>_<i>")
    instance_kind: str = "KIND_CPU"  # KIND_CPU | KIND_GPU | KIND_MODEL
    device_id: int = 0
    port: Optional[ServerPort] = None  # calls back into the server (BLS); None: loaded outside a server

    @property
    def model_file(self) -> Path:
        """The version folder's model file: `default_model_filename`, else the backend's default."""
        return self.version_dir / self.config.default_model_filename


class Backend(abc.ABC):
    """One model instance of one backend kind."""

    default_model_filename: ClassVar[str] = ""
    # True when execute() can take requests of different non-batch shapes in one batch.
    ragged_batching: ClassVar[bool] = False
    # True when execute() never calls back into the server (no BLS), so that very short executions may run
    # on the event loop thread instead of the instance's thread (see scheduling/instances.py).
    inline_safe: ClassVar[bool] = False
    # True when implicit state (sequence_batching.state) may be used with this backend.
    supports_implicit_state: ClassVar[bool] = True

    def __init__(self, context: ModelContext) -> None:
        self.context = context

    @classmethod
    def model_filename_for(cls, platform: str) -> str:
        """The default model file name of a platform this backend serves (tensorflow has two)."""
        return cls.default_model_filename

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, version_dir: Path) -> mc.ModelConfig:
        """Fill what the config left out (inputs, outputs, max_batch_size) from the model file."""
        return config

    @abc.abstractmethod
    def load(self) -> None: ...

    @abc.abstractmethod
    def execute(
        self, requests: Sequence[InferRequest], senders: Optional[Sequence[ResponseSink]] = None
    ) -> ExecuteResult: ...

    def unload(self) -> None:
        """Free resources; the default has none to free."""


# backend name -> "module:Class", imported on first use so that optional frameworks (torch, tensorrt,
# openvino) are only needed by the models that use them.
_BACKEND_MODULES: dict[str, str] = {
    "onnxruntime": "asr_server.backends.onnxruntime:OnnxRuntimeBackend",
    "python": "asr_server.backends.python:PythonBackend",
    "pytorch": "asr_server.backends.pytorch:PyTorchBackend",
    "tensorrt": "asr_server.backends.tensorrt:TensorRTBackend",
    "openvino": "asr_server.backends.openvino:OpenVINOBackend",
    "tensorflow": "asr_server.backends.tensorflow:TensorFlowBackend",
}
PLATFORM_TO_BACKEND: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime",
    "tensorrt_plan": "tensorrt",
    "pytorch_libtorch": "pytorch",
    "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow",
    "openvino": "openvino",
}
# Platform a backend reports in ModelConfig when the config only named the backend (Triton fills it in).
BACKEND_TO_PLATFORM: dict[str, str] = {
    "onnxruntime": "onnxruntime_onnx",
    "tensorrt": "tensorrt_plan",
    "pytorch": "pytorch_libtorch",
}


def backend_class(name: str) -> type[Backend]:
    """Import and return the backend class for a config `backend` name."""
    try:
        target = _BACKEND_MODULES[name]
    except KeyError:
        raise ServerError(f"unknown backend '{name}'") from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:  # a registered backend whose module is not there (a plug-in not installed)
            raise ServerError(f"backend '{name}' is not supported by this server yet") from None
        raise ServerError(f"backend '{name}' needs the '{exc.name}' package, which is not installed") from None
    return getattr(module, class_name)


def register_backend(name: str, target: str) -> None:
    """Add a backend ("module:Class"); used by tests and plug-ins."""
    _BACKEND_MODULES[name] = target


def batcher_inputs(config: mc.ModelConfig) -> list[str]:
    """Tensors the sequence batcher adds to each request: control inputs, then implicit-state inputs."""
    batcher = config.sequence_batching
    return [control.name for control in batcher.control_input] + [state.input_name for state in batcher.state]


def batcher_outputs(config: mc.ModelConfig) -> list[str]:
    """Tensors the sequence batcher takes back from each response: implicit-state outputs."""
    return [state.output_name for state in config.sequence_batching.state]


def model_inputs(config: mc.ModelConfig) -> list[str]:
    """Every tensor the model is fed: config inputs, then the sequence batcher's (each name once)."""
    return list(dict.fromkeys([io.name for io in config.input] + batcher_inputs(config)))


def model_outputs(config: mc.ModelConfig) -> list[str]:
    """Every tensor the model must produce: config outputs, then implicit-state outputs (each name once)."""
    return list(dict.fromkeys([io.name for io in config.output] + batcher_outputs(config)))


def context_parameters(config: mc.ModelConfig) -> dict[str, Any]:
    """The config's `parameters` as {key: string_value}."""
    return {key: value.string_value for key, value in config.parameters.items()}
