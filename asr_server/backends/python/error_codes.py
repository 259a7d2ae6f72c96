"""Error codes between a python model's TritonError and the server's ServerError, one table each way."""

from __future__ import annotations

from asr_server.backends.python import triton_python_backend_utils as pb_utils
from asr_server.errors import ErrorCode, ServerError

_SERVER_CODE_BY_TRITON_CODE = {
    pb_utils.TritonError.UNKNOWN: ErrorCode.INTERNAL,
    pb_utils.TritonError.INTERNAL: ErrorCode.INTERNAL,
    pb_utils.TritonError.NOT_FOUND: ErrorCode.NOT_FOUND,
    pb_utils.TritonError.INVALID_ARG: ErrorCode.INVALID_ARGUMENT,
    pb_utils.TritonError.UNAVAILABLE: ErrorCode.UNAVAILABLE,
    pb_utils.TritonError.UNSUPPORTED: ErrorCode.UNIMPLEMENTED,
    pb_utils.TritonError.ALREADY_EXISTS: ErrorCode.ALREADY_EXISTS,
    pb_utils.TritonError.CANCELLED: ErrorCode.CANCELLED,
}
_TRITON_CODE_BY_SERVER_CODE = {
    ErrorCode.INVALID_ARGUMENT: pb_utils.TritonError.INVALID_ARG,
    ErrorCode.NOT_FOUND: pb_utils.TritonError.NOT_FOUND,
    ErrorCode.ALREADY_EXISTS: pb_utils.TritonError.ALREADY_EXISTS,
    ErrorCode.UNAVAILABLE: pb_utils.TritonError.UNAVAILABLE,
    ErrorCode.UNIMPLEMENTED: pb_utils.TritonError.UNSUPPORTED,
    ErrorCode.RESOURCE_EXHAUSTED: pb_utils.TritonError.UNAVAILABLE,
    ErrorCode.FAILED_PRECONDITION: pb_utils.TritonError.INVALID_ARG,
    ErrorCode.DEADLINE_EXCEEDED: pb_utils.TritonError.UNAVAILABLE,
    ErrorCode.CANCELLED: pb_utils.TritonError.CANCELLED,
    ErrorCode.INTERNAL: pb_utils.TritonError.INTERNAL,
}


def server_error(error: pb_utils.TritonError) -> ServerError:
    return ServerError(error.message(), _SERVER_CODE_BY_TRITON_CODE.get(error.code(), ErrorCode.INTERNAL))


def triton_error(error: BaseException) -> pb_utils.TritonError:
    if isinstance(error, pb_utils.TritonError):
        return error
    if isinstance(error, ServerError):
        return pb_utils.TritonError(error.message, _TRITON_CODE_BY_SERVER_CODE.get(error.code, 1))
    return pb_utils.TritonError(f"{type(error).__name__}: {error}")
