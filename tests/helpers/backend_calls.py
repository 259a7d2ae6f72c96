"""Calling a backend object directly in tests: requests from numpy arrays, and a spy on its framework runs."""

from __future__ import annotations

import numpy as np

from asr_server import dtypes
from asr_server.messages import InferRequest, Tensor


def request(name: str = "m", **inputs: np.ndarray) -> InferRequest:
    """A request to model `name` with one tensor per keyword (datatype from the array's dtype)."""
    return InferRequest(name, inputs=[Tensor(k, dtypes.wire_name(v.dtype), v) for k, v in inputs.items()])


def count_runs(backend) -> list[int]:
    """Record the batch size of every framework call of a TensorBatchBackend (the list fills as it runs)."""
    sizes: list[int] = []
    original = backend._run

    def spy(feeds):
        sizes.append(next(iter(feeds.values())).shape[0])
        return original(feeds)

    backend._run = spy  # type: ignore[method-assign]
    return sizes
