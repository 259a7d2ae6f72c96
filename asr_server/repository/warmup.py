"""Triton's `model_warmup`: sample requests each instance runs after it loads, before the model is READY.

A model whose first calls at a new shape are slow (TorchScript's optimiser on a GPU stalled ~6 s in the H200
check; ONNX Runtime plans per shape) answers its first real clients at full speed once warmed. As in Triton,
the samples go straight to the instance (no scheduler, no sequence state), `count` times each, in order, and a
sample that fails fails the load. Inputs: `zero_data`, `random_data` or `input_data_file` (raw bytes under
`<model>/warmup/`); BYTES inputs are empty strings for zero data and short random strings otherwise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import Backend
from asr_server.dtypes import config_to_wire, numpy_dtype
from asr_server.errors import ServerError, invalid_argument
from asr_server.messages import InferRequest, Tensor

WARMUP_FOLDER = "warmup"  # Triton reads input_data_file from <model>/warmup/


def sample_requests(config: mc.ModelConfig, model_dir: Path) -> list[tuple[str, InferRequest, int]]:
    """(sample name, request, count) for every warmup sample of the config; refuses malformed samples."""
    declared = {t.name: t for t in config.input}
    samples = []
    rng = np.random.default_rng(0)
    for sample in config.model_warmup:
        label = f"warmup sample '{sample.name}' of model '{config.name}'"
        batch = max(1, sample.batch_size) if config.max_batch_size > 0 else None
        if batch is not None and batch > config.max_batch_size:
            raise invalid_argument(f"{label}: batch_size {batch} exceeds max_batch_size {config.max_batch_size}")
        inputs = []
        for name, spec in sample.inputs.items():
            if name not in declared:
                raise invalid_argument(f"{label}: unexpected inference input '{name}'")
            wire = config_to_wire(spec.data_type)
            dims = [int(d) for d in spec.dims]
            if any(d < 0 for d in dims):
                raise invalid_argument(f"{label}: input '{name}' needs concrete dims, got {dims}")
            shape = ([batch] if batch is not None else []) + dims
            inputs.append(Tensor(name, wire, _data(label, name, spec, wire, shape, model_dir, rng)))
        samples.append((sample.name, InferRequest(model_name=config.name, id=f"warmup:{sample.name}",
                                                  inputs=inputs), max(1, sample.count)))
    return samples


def _data(label: str, name: str, spec, wire: str, shape: list[int], model_dir: Path, rng) -> np.ndarray:
    kind = spec.WhichOneof("input_data_type")
    if wire == "BYTES":
        if kind == "input_data_file":
            raise invalid_argument(f"{label}: input_data_file is not supported for BYTES input '{name}'")
        size = int(np.prod(shape))
        items = [b"" if kind == "zero_data" else rng.bytes(8) for _ in range(size)]
        return np.array(items, dtype=np.object_).reshape(shape)
    dtype = numpy_dtype(wire)
    if kind == "input_data_file":
        path = (model_dir / WARMUP_FOLDER / spec.input_data_file).resolve()
        if (model_dir / WARMUP_FOLDER).resolve() not in path.parents:
            raise invalid_argument(f"{label}: input_data_file must be inside '{WARMUP_FOLDER}/'")
        raw = np.frombuffer(path.read_bytes(), dtype=dtype)
        if raw.size != int(np.prod(shape)):
            raise invalid_argument(f"{label}: '{spec.input_data_file}' holds {raw.size} values, input '{name}' "
                                   f"of shape {shape} needs {int(np.prod(shape))}")
        return raw.reshape(shape).copy()
    if kind == "random_data":
        if dtype == np.bool_:
            return rng.integers(0, 2, size=shape).astype(np.bool_)
        if np.issubdtype(dtype, np.integer):
            return rng.integers(0, 8, size=shape).astype(dtype)
        return rng.standard_normal(size=shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


def warm_up(backend: Backend, samples: list[tuple[str, InferRequest, int]], decoupled: bool) -> None:
    """Run every sample `count` times on one loaded instance (in its thread's stead: called before the
    instance serves anything); the first failure raises with Triton's wording."""
    for name, request, count in samples:
        for _ in range(count):
            senders = [lambda *args, **kwargs: None] if decoupled else None  # responses are thrown away
            try:
                results = backend.execute([request], senders)
            except Exception as exc:  # noqa: BLE001 - any failure of a sample fails the load
                raise ServerError(f"failed to run warmup sample '{name}': {exc}") from exc
            for result in results or []:
                if isinstance(result, ServerError):
                    raise ServerError(f"failed to run warmup sample '{name}': {result.message}")
