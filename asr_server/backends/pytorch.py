"""The pytorch backend (Triton's `pytorch` / `pytorch_libtorch`): TorchScript `model.pt` files.

torch is optional: it is imported when a pytorch model loads. Tensors follow Triton's conventions:
inputs go to forward() positionally, ordered by their `__<index>` suffix (INPUT__0, INPUT__1, ...), else
by forward()'s argument names, else in config order; outputs named `<name>__<index>` take that element
of the returned tuple, other names take the elements in config order, and a returned dict maps by key.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any, Sequence

import numpy as np

from asr_server.backends.base import context_parameters, model_inputs, model_outputs
from asr_server.backends.onnxruntime import TensorBatchBackend, _int_parameter
from asr_server.errors import internal, invalid_argument

log = logging.getLogger(__name__)

# torch's intra-op pool is process-wide: several models share it, so keep it small unless a config
# asks for more with INTRA_OP_THREAD_COUNT.
DEFAULT_TORCH_THREADS = max(1, min(4, (os.cpu_count() or 1) // 4))
_INDEX_SUFFIX = re.compile(r"__(\d+)$")
_threads_lock = threading.Lock()
_default_threads_set = False


def import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise internal(
            f"the pytorch backend needs torch, which is not installed here ({exc}); "
            "install the 'torch' extra: pip install 'asr-server[torch]'"
        ) from None
    return torch


class PyTorchBackend(TensorBatchBackend):
    """One TorchScript module per model instance."""

    default_model_filename = "model.pt"

    module: Any = None

    def load(self) -> None:
        torch = import_torch()
        context = self.context
        parameters = context_parameters(context.config)
        _configure_threads(torch, _int_parameter(parameters, "INTRA_OP_THREAD_COUNT", 0))
        self._inference_mode = parameters.get("INFERENCE_MODE", "true").lower() not in ("false", "0", "off")
        # Triton's DISABLE_OPTIMIZED_EXECUTION: TorchScript's profiling executor re-optimises (and on CUDA
        # compiles fused kernels) for each new input shape, so the first calls at each batch size can take
        # seconds; "true" runs the plain interpreter instead (measured in bench/gpu_bench.py).
        self._optimized = parameters.get("DISABLE_OPTIMIZED_EXECUTION", "false").lower() not in ("true", "1", "on")
        self.device = self._device(torch)
        path = context.model_file
        if not path.is_file():
            raise internal(f"unable to find '{path}' for model '{context.name}'")
        try:
            self.module = torch.jit.load(str(path), map_location=self.device)
        except Exception as exc:
            raise internal(f"failed to load model '{context.name}': {exc}") from exc
        self.module.eval()
        self._input_order = order_inputs(model_inputs(self.context.config), _forward_argument_names(self.module))
        self._output_names = model_outputs(self.context.config)

    def unload(self) -> None:
        self.module = None

    def _feed_names(self) -> Sequence[str]:
        return self._input_order

    def _prepare_input(self, name: str, array: np.ndarray) -> np.ndarray:
        if array.dtype == np.object_:
            raise invalid_argument(f"input '{name}' of model '{self.context.name}': the pytorch backend takes no BYTES")
        # torch.from_numpy shares memory and warns on read-only buffers (e.g. arrays over wire bytes).
        return array if array.flags.writeable and array.flags.c_contiguous else np.array(array)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = import_torch()
        tensors = [torch.from_numpy(feeds[name]).to(self.device) for name in self._input_order]
        with torch.inference_mode(self._inference_mode), torch.jit.optimized_execution(self._optimized):
            result = self.module(*tensors)
        return {name: value.detach().cpu().numpy() for name, value in self._name_outputs(result).items()}

    def _name_outputs(self, result: Any) -> dict[str, Any]:
        if isinstance(result, dict):
            return dict(result)
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        named = {}
        for position, name in enumerate(self._output_names):
            match = _INDEX_SUFFIX.search(name)
            index = int(match.group(1)) if match else position
            if index >= len(values):
                raise internal(
                    f"model '{self.context.name}' returned {len(values)} output(s), no element {index} for '{name}'"
                )
            named[name] = values[index]
        return named

    def _device(self, torch: Any) -> Any:
        context = self.context
        if context.instance_kind == "KIND_GPU":
            if torch.cuda.is_available():
                return torch.device("cuda", context.device_id)
            log.warning("instance %s of model '%s' asks for a GPU but torch sees none: using the CPU",
                        context.instance_name, context.name)
        return torch.device("cpu")


def order_inputs(names: Sequence[str], forward_arguments: Sequence[str]) -> list[str]:
    """The order in which inputs are passed to forward() (see the module docstring)."""
    indices = [_INDEX_SUFFIX.search(name) for name in names]
    if names and all(indices):
        return [name for _, name in sorted(zip((int(m.group(1)) for m in indices), names))]
    if set(names) == set(forward_arguments):
        return list(forward_arguments)
    return list(names)


def _forward_argument_names(module: Any) -> list[str]:
    try:
        arguments = module.forward.schema.arguments
    except AttributeError:  # not a scripted forward; fall back to the config's order
        return []
    return [argument.name for argument in arguments if argument.name != "self"]


def _configure_threads(torch: Any, requested: int) -> None:
    global _default_threads_set
    with _threads_lock:
        if requested > 0:
            torch.set_num_threads(requested)
        elif not _default_threads_set and torch.get_num_threads() > DEFAULT_TORCH_THREADS:
            torch.set_num_threads(DEFAULT_TORCH_THREADS)
        _default_threads_set = True
