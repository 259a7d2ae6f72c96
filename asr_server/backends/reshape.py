"""A config's `reshape`: what the model sees (reshape.shape) versus what clients see (dims), as Triton applies it.

Triton hands every backend, the python backend included, inputs in their `reshape` shape, and reports outputs
that carry a `reshape` in their config `dims`. A model that drops the batch dimension entirely (a 0-d output,
as WeNet's streaming scorer returns its transcript) gets the config dims alone, without a batch dimension.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.errors import invalid_argument

WILDCARD_DIM = -1


def reshape_dims(
    array: np.ndarray, from_dims: Sequence[int], to_dims: Sequence[int], batching: bool, name: str
) -> np.ndarray:
    """Reshape from one declared shape to another (config dims <-> `reshape.shape`).

    Variable-size (-1) dims take their sizes, in order, from the array's dims where `from_dims` has -1;
    validation made both sides agree on the fixed stretches between them. The batch dim, when the model
    batches and the array has one, is kept.
    """
    has_batch = batching and array.ndim > 0
    batch = array.shape[:1] if has_batch else ()
    if WILDCARD_DIM in to_dims:
        actual = array.shape[1:] if has_batch else array.shape
        variable_sizes = [size for size, dim in zip(actual, from_dims) if dim == WILDCARD_DIM]
        target = [variable_sizes.pop(0) if dim == WILDCARD_DIM and variable_sizes else dim for dim in to_dims]
    else:
        target = to_dims
    try:
        return array.reshape(*batch, *target)
    except ValueError:
        raise invalid_argument(
            f"unable to reshape '{name}' of shape {list(array.shape)} to {list(to_dims)}"
        ) from None


@dataclasses.dataclass(frozen=True)
class Reshape:
    """One tensor's reshape with its dims read out of the config once: a streamed chunk's output is reshaped
    on every chunk, and reading a protobuf's repeated fields each time cost more than the reshape."""

    name: str
    from_dims: tuple[int, ...]
    to_dims: tuple[int, ...]

    @classmethod
    def to_model(cls, io: mc.ModelInput) -> Optional["Reshape"]:
        """config dims -> reshape.shape; None without a reshape."""
        return cls(io.name, tuple(io.dims), tuple(io.reshape.shape)) if io.HasField("reshape") else None

    @classmethod
    def to_client(cls, io: mc.ModelOutput) -> Optional["Reshape"]:
        """reshape.shape -> config dims; None without a reshape."""
        return cls(io.name, tuple(io.reshape.shape), tuple(io.dims)) if io.HasField("reshape") else None

    def __call__(self, array: np.ndarray, batching: bool) -> np.ndarray:
        return reshape_dims(array, self.from_dims, self.to_dims, batching, self.name)
