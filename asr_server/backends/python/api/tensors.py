"""The API's Tensor: a named numpy array, with DLPack in and out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from asr_server.backends.python.api.datatypes import numpy_to_triton_type
from asr_server.backends.python.api.errors import TritonModelException

if TYPE_CHECKING:
    from asr_server.backends.python.api.requests import InferenceRequest
    from asr_server.backends.python.api.responses import InferenceResponse

_DLPACK_CPU = 1  # DLDeviceType kDLCPU


class _CapsuleHolder:
    """Lets numpy consume a bare DLPack capsule (numpy only takes objects with `__dlpack__`)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DLPACK_CPU, 0)


class Tensor:
    """A named tensor. `as_numpy()` returns the array it holds: shape (d0, d1, ...), any numpy dtype
    that Triton has a datatype for; BYTES tensors are `np.object_` arrays (of `bytes`, or `str`
    that the backend encodes as UTF-8 when the tensor leaves the model)."""

    def __init__(self, name: str, numpy_array: Any) -> None:
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        array = np.asarray(numpy_array)
        if numpy_to_triton_type(array.dtype) is None:
            raise TritonModelException(f"tensor '{name}': numpy dtype {array.dtype} has no Triton datatype")
        self._name = str(name)
        # Not np.ascontiguousarray: it turns a 0-d array into 1-d, and Triton keeps a 0-d output 0-d.
        self._array = array if array.flags.c_contiguous else np.array(array, order="C")

    @classmethod
    def _of_server_array(cls, name: str, array: np.ndarray) -> "Tensor":
        """A request input the server decoded and validated (a named, C-ordered array of a Triton dtype):
        wrapped without `__init__`'s checks, which every input of every streamed chunk would repeat."""
        if not array.flags.c_contiguous:
            return cls(name, array)
        tensor = cls.__new__(cls)
        tensor._name, tensor._array = name, array
        return tensor

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def triton_dtype(self) -> int:
        """The TRITONSERVER_DataType code (FP32 = 11, BYTES = 13, ...)."""
        return numpy_to_triton_type(self._array.dtype)

    def shape(self) -> list[int]:
        return [int(d) for d in self._array.shape]

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule sharing this tensor's memory (not for BYTES tensors); of a copy when the array is
        read-only (request inputs decoded from the wire, the shared control inputs), since a DLPack consumer
        such as torch may write to what it receives."""
        return self._exported().__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._exported().__dlpack__(**kwargs)

    def _exported(self) -> np.ndarray:
        if self._array.dtype.kind in ("O", "S", "U"):
            raise TritonModelException("DLPack does not have support for string tensors.")
        return self._array if self._array.flags.writeable else self._array.copy()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DLPACK_CPU, 0)

    @staticmethod
    def from_dlpack(name: str, dlpack_tensor: Any) -> "Tensor":
        """A tensor from a DLPack capsule or from any object with `__dlpack__` (a torch tensor).

        Device tensors are copied to host memory: this server's tensors are numpy arrays.
        """
        source = dlpack_tensor
        if not hasattr(source, "__dlpack__"):
            source = _CapsuleHolder(source)
        elif hasattr(source, "__dlpack_device__") and source.__dlpack_device__()[0] != _DLPACK_CPU:
            if not hasattr(source, "cpu"):
                raise TritonModelException(f"tensor '{name}': only CPU DLPack tensors are supported")
            source = source.cpu()
        try:
            array = np.from_dlpack(source)
        except (TypeError, ValueError, BufferError, RuntimeError) as exc:
            raise TritonModelException(f"tensor '{name}': cannot read DLPack tensor: {exc}") from exc
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, dtype={self._array.dtype}, shape={self.shape()})"


def get_input_tensor_by_name(inference_request: "InferenceRequest", name: str) -> Optional[Tensor]:
    """The request's input called `name`, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: "InferenceResponse", name: str) -> Optional[Tensor]:
    """The response's output called `name`, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None

