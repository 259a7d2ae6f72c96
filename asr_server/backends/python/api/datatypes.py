"""Flags, memory kinds and datatypes of Triton's python_backend API (values from tritonserver.h)."""

from __future__ import annotations

import enum
from typing import Any, Optional

import numpy as np
from tritonclient.utils import deserialize_bytes_tensor as _deserialize_bytes
from tritonclient.utils import serialize_byte_tensor as _serialize_bytes

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class MemoryType(enum.IntEnum):
    """Where a tensor should live; this server keeps every tensor in CPU memory."""

    TRITONSERVER_MEMORY_GPU = 1
    TRITONSERVER_MEMORY_CPU = 0


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU


class PreferredMemory:
    """Accepted for BLS requests; outputs always come back in CPU memory here."""

    def __init__(self, preferred_memory_type: MemoryType, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


# --------------------------------------------------------------------------------------------------
# Datatypes

TRITON_STRING_TO_NUMPY: dict[str, type] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType codes (what `Tensor.triton_dtype()` and the *_triton_type helpers use).
_NUMPY_BY_TRITONSERVER_CODE: dict[int, type] = {
    1: np.bool_, 2: np.uint8, 3: np.uint16, 4: np.uint32, 5: np.uint64, 6: np.int8, 7: np.int16,
    8: np.int32, 9: np.int64, 10: np.float16, 11: np.float32, 12: np.float64, 13: np.object_,
}
_TRITONSERVER_CODE_BY_DTYPE: dict[np.dtype, int] = {
    np.dtype(t): code for code, t in _NUMPY_BY_TRITONSERVER_CODE.items()
}
_TRITONSERVER_TYPE_BYTES = 13


def triton_string_to_numpy(triton_type_string: str) -> type:
    """Config enum name ("TYPE_FP32") -> numpy scalar type (np.float32)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Optional[type]:
    """TRITONSERVER_DataType code -> numpy scalar type; None for codes numpy cannot hold (BF16)."""
    return _NUMPY_BY_TRITONSERVER_CODE.get(data_type)


def numpy_to_triton_type(data_type: Any) -> Optional[int]:
    """numpy dtype -> TRITONSERVER_DataType code; bytes and str arrays are BYTES."""
    dtype = np.dtype(data_type)
    if dtype.kind in ("O", "S", "U"):
        return _TRITONSERVER_TYPE_BYTES
    return _TRITONSERVER_CODE_BY_DTYPE.get(dtype)


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes:
    """BYTES array -> the wire form: each element as (4-byte little-endian length, bytes), C order."""
    if input_tensor.size == 0:
        return b""
    return _serialize_bytes(input_tensor).item()


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """The wire form -> a flat `np.object_` array of `bytes`."""
    return _deserialize_bytes(encoded_tensor)

