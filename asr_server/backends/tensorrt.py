"""The tensorrt backend (Triton's `tensorrt` / `tensorrt_plan`): serialised TensorRT 10 engines (`*.plan`).

UNVERIFIED: no machine this was written on had TensorRT or a GPU. The module imports everywhere; `load()`
raises a Triton-worded error when the `tensorrt` package, torch with CUDA, or a GPU is missing.

Per instance: one deserialised engine, one execution context and one CUDA stream on the instance's device.
Device buffers are torch CUDA tensors (torch is already the project's GPU dependency; cuda-python is not
needed). Each execution picks the first optimisation profile whose batch range holds the batch
(scripts/build_trt.py writes 1..max, or two ranges with --split-batch), sets every input's shape, binds
input and output addresses and runs `execute_async_v3` on the instance's stream.
Implicit state still travels through the sequence batcher as host arrays (copied per step); keeping it on
the device between steps is not done.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np

from asr_server.backends.onnxruntime import TensorBatchBackend
from asr_server.errors import internal, invalid_argument
from asr_server.gpu.profiles import pick_profile

log = logging.getLogger(__name__)


def import_tensorrt(model: str) -> tuple[Any, Any]:
    """(tensorrt, torch) or a load error worded as Triton words a model its backend cannot serve."""
    try:
        import tensorrt
    except ImportError:
        raise internal(f"unable to load model '{model}': the tensorrt backend needs TensorRT 10 (python "
                       "package 'tensorrt'), which is not installed on this server") from None
    try:
        import torch
    except ImportError:
        raise internal(f"unable to load model '{model}': the tensorrt backend needs torch with CUDA "
                       "for its device buffers, which is not installed") from None
    if not torch.cuda.is_available():
        raise internal(f"unable to load model '{model}': the tensorrt backend needs a CUDA GPU, "
                       "and this server sees none")
    return tensorrt, torch


class TensorRTBackend(TensorBatchBackend):
    """One TensorRT engine, execution context and CUDA stream per model instance."""

    default_model_filename = "model.plan"
    inline_safe = False  # a GPU call with copies is not short enough for the event loop thread

    engine: Any = None

    def load(self) -> None:
        context = self.context
        trt, torch = import_tensorrt(context.name)
        self._torch = torch
        if context.instance_kind not in ("KIND_GPU", "KIND_AUTO", "KIND_MODEL"):
            raise internal(f"unable to load model '{context.name}': a tensorrt model needs a KIND_GPU instance "
                           f"group, not {context.instance_kind}")
        path = context.model_file
        if not path.is_file():
            raise internal(f"unable to find '{path}' for model '{context.name}'")
        self.device = torch.device("cuda", context.device_id)
        torch.cuda.set_device(self.device)
        self._logger = trt.Logger(trt.Logger.WARNING)
        runtime = trt.Runtime(self._logger)
        self.engine = runtime.deserialize_cuda_engine(path.read_bytes())
        if self.engine is None:
            raise internal(f"unable to load model '{context.name}': TensorRT could not deserialise '{path}' "
                           "(built by another TensorRT version or for another GPU?)")
        self.execution = self.engine.create_execution_context()
        self.stream = torch.cuda.Stream(device=self.device)
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        inputs = trt.TensorIOMode.INPUT
        self._inputs = [n for n in names if self.engine.get_tensor_mode(n) == inputs]
        self._outputs = [n for n in names if self.engine.get_tensor_mode(n) != inputs]
        self._dtypes = {n: _torch_dtype(torch, trt, self.engine.get_tensor_dtype(n)) for n in names}
        first = self._inputs[0]
        self._profile_batches = [(self.engine.get_tensor_profile_shape(first, p)[0][0],
                                  self.engine.get_tensor_profile_shape(first, p)[2][0])
                                 for p in range(self.engine.num_optimization_profiles)]
        self._profile = -1

    def unload(self) -> None:
        self.execution = self.engine = self.stream = None

    def _feed_names(self) -> Sequence[str]:
        return self._inputs

    def _prepare_input(self, name: str, array: np.ndarray) -> np.ndarray:
        if array.dtype == np.object_:
            raise invalid_argument(f"input '{name}' of model '{self.context.name}': the tensorrt backend takes no BYTES")
        return np.ascontiguousarray(array)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = self._torch
        batch = next(iter(feeds.values())).shape[0]
        try:
            profile = pick_profile(self._profile_batches, batch)
        except ValueError as exc:
            raise invalid_argument(f"model '{self.context.name}': {exc}") from None
        with torch.cuda.stream(self.stream):
            if profile != self._profile:
                self.execution.set_optimization_profile_async(profile, self.stream.cuda_stream)
                self._profile = profile
            keep = []  # device tensors must live until the stream finished with them
            for name in self._inputs:
                tensor = torch.from_numpy(feeds[name]).to(self.device, self._dtypes[name], non_blocking=True)
                keep.append(tensor)
                if not self.execution.set_input_shape(name, tuple(tensor.shape)):
                    raise invalid_argument(f"model '{self.context.name}': input '{name}' shape "
                                           f"{tuple(tensor.shape)} is outside the engine's profile")
                self.execution.set_tensor_address(name, tensor.data_ptr())
            outputs = {}
            for name in self._outputs:
                shape = tuple(self.execution.get_tensor_shape(name))
                outputs[name] = torch.empty(shape, dtype=self._dtypes[name], device=self.device)
                self.execution.set_tensor_address(name, outputs[name].data_ptr())
            if not self.execution.execute_async_v3(self.stream.cuda_stream):
                raise internal(f"model '{self.context.name}': TensorRT execution failed")
            host = {name: value.to("cpu", non_blocking=False) for name, value in outputs.items()}
        self.stream.synchronize()
        del keep
        return {name: value.numpy() for name, value in host.items()}


def _torch_dtype(torch: Any, trt: Any, dtype: Any) -> Any:
    table = {trt.float32: torch.float32, trt.float16: torch.float16, trt.int32: torch.int32,
             trt.int64: torch.int64, trt.bool: torch.bool, trt.int8: torch.int8}
    if dtype not in table:
        raise internal(f"TensorRT tensor type {dtype} is not supported by this backend")
    return table[dtype]
