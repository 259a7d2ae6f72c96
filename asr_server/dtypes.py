"""Datatype names: Triton wire names ("FP32"), config enum names ("TYPE_FP32") and numpy dtypes.

tritonclient's `np_to_triton_dtype` / `triton_to_np_dtype` are the reference mapping; this module adds the
config enum names and the byte sizes the validators need.
"""

from __future__ import annotations

import functools

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

# Bytes per element; BYTES has no fixed size.
ELEMENT_SIZE = {
    "BOOL": 1, "INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "INT32": 4, "UINT32": 4,
    "INT64": 8, "UINT64": 8, "FP16": 2, "BF16": 2, "FP32": 4, "FP64": 8,
}
ALL_WIRE_TYPES = tuple(ELEMENT_SIZE) + ("BYTES",)


def config_to_wire(data_type: int) -> str:
    """model_config_pb2.DataType enum value -> wire name ("TYPE_STRING" -> "BYTES")."""
    name = mc.DataType.Name(data_type)
    if name == "TYPE_STRING":
        return "BYTES"
    if name == "TYPE_INVALID":
        return "INVALID"
    return name[len("TYPE_"):]


@functools.lru_cache(maxsize=64)  # called for every tensor of every request; bounded: names come from clients
def numpy_dtype(wire: str) -> np.dtype:
    """The numpy dtype that holds tensors of this wire type (object for BYTES)."""
    return np.dtype(triton_to_np_dtype(wire))


def wire_name(dtype: np.dtype) -> str:
    """numpy dtype -> wire name; object and bytes/str arrays are BYTES."""
    dtype = np.dtype(dtype)
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    name = np_to_triton_dtype(dtype)
    if name is None:
        raise ValueError(f"no Triton datatype for numpy dtype {dtype}")
    return name
