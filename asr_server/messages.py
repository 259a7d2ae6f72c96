"""Wire-independent request and response types shared by the core, schedulers and backends.

Nothing here knows about protobuf or JSON: `asr_server/protocol/converters.py` builds these from the wire
and back. Tensors hold numpy arrays; BYTES tensors hold `np.object_` arrays of `bytes`.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Callable, Optional, Union

import numpy as np

SequenceId = Union[int, str]

# Triton's request flags (tritonserver.h), also seen by python models through request.flags().
FLAG_SEQUENCE_START = 1
FLAG_SEQUENCE_END = 2
UINT64_MAX = 2**64 - 1  # Triton's correlation ids are uint64 or strings


@dataclasses.dataclass
class Tensor:
    """One named tensor. `data.shape == shape` always holds after validation."""

    name: str
    datatype: str  # Triton name: "FP32", "INT64", "BYTES", ...
    data: np.ndarray
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape  # numpy's shape is already a tuple of Python ints


@dataclasses.dataclass(frozen=True)
class SequenceControl:
    """The sequence fields of a request (Triton's sequence_id / sequence_start / sequence_end)."""

    id: SequenceId = 0  # 0 or "" means "not part of a sequence"
    start: bool = False
    end: bool = False

    @property
    def active(self) -> bool:
        return self.id not in (0, "")

    @property
    def flags(self) -> int:
        return (FLAG_SEQUENCE_START if self.start else 0) | (FLAG_SEQUENCE_END if self.end else 0)

    def id_problem(self, model: str) -> Optional[str]:
        """Why this correlation id is refused, or None. It is an unsigned 64-bit integer or a string; a float
        or a bool (which a JSON or protobuf parameter can carry) would reach the model's CORRID control or its
        state dict unchecked."""
        if type(self.id) is int and 0 <= self.id <= UINT64_MAX:  # the common case, first
            return None
        if isinstance(self.id, str):
            return None
        if isinstance(self.id, bool) or not isinstance(self.id, numbers.Integral):
            return (f"sequence_id for model '{model}' must be an unsigned integer or a string, "
                    f"got {type(self.id).__name__} {self.id!r}")
        if not 0 <= int(self.id) <= UINT64_MAX:
            return (f"sequence_id {int(self.id)} for model '{model}' is out of range: it must be between 0 and "
                    f"{UINT64_MAX}")
        return None


@dataclasses.dataclass(frozen=True)
class RequestedOutput:
    """An output the client asked for, with its per-output parameters (shared-memory placement)."""

    name: str
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class InferResponse:
    """One response; decoupled models may send several per request, the last with `final=True`."""

    model_name: str
    model_version: str
    id: str = ""
    outputs: list[Tensor] = dataclasses.field(default_factory=list)
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    final: bool = True  # False for the non-last responses of a decoupled model

    def output(self, name: str) -> Tensor:
        for tensor in self.outputs:
            if tensor.name == name:
                return tensor
        raise KeyError(name)


# Called by a decoupled model for every response it produces; `None` with final=True closes the request.
ResponseSink = Callable[[Optional[InferResponse], bool], None]


@dataclasses.dataclass
class InferRequest:
    """One inference request as the core sees it, after conversion from the wire."""

    model_name: str
    model_version: str = ""  # "" or "-1": the policy's latest ready version
    id: str = ""
    inputs: list[Tensor] = dataclasses.field(default_factory=list)
    outputs: list[RequestedOutput] = dataclasses.field(default_factory=list)  # empty: all outputs
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)  # non-reserved request parameters
    sequence: SequenceControl = SequenceControl()
    priority: int = 0
    timeout_us: int = 0  # 0: no per-request queue timeout
    # Set by the core: a cancelled request (client went away) is dropped by schedulers and models.
    cancelled: Callable[[], bool] = lambda: False

    def input(self, name: str) -> Tensor:
        for tensor in self.inputs:
            if tensor.name == name:
                return tensor
        raise KeyError(name)

    def find_input(self, name: str) -> Optional[Tensor]:
        for tensor in self.inputs:
            if tensor.name == name:
                return tensor
        return None

    @property
    def batch_size(self) -> int:
        """Leading dimension of the first input (only meaningful for models with max_batch_size > 0)."""
        return int(self.inputs[0].data.shape[0]) if self.inputs and self.inputs[0].data.ndim else 1
