"""One error type for the whole server, with a protocol-neutral code.

The protocol layer maps `ErrorCode` to a gRPC status or an HTTP status in one table each
(`asr_server/protocol/status.py`); nothing below the protocol layer knows about either.
Messages follow Triton's wording so that clients written against Triton see the same text.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    """The kinds of failure a client can be told about (names follow gRPC's canonical codes)."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    UNAVAILABLE = "UNAVAILABLE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"
    INTERNAL = "INTERNAL"


class ServerError(Exception):
    """An error with a neutral code; the message is what the client reads."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INTERNAL) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    @property
    def is_client_error(self) -> bool:
        """Client mistakes are logged in one line, without a traceback."""
        return self.code not in (ErrorCode.INTERNAL, ErrorCode.UNAVAILABLE)

    def __repr__(self) -> str:
        return f"ServerError({self.message!r}, {self.code.name})"


def invalid_argument(message: str) -> ServerError:
    return ServerError(message, ErrorCode.INVALID_ARGUMENT)


def not_found(message: str) -> ServerError:
    return ServerError(message, ErrorCode.NOT_FOUND)


def unavailable(message: str) -> ServerError:
    return ServerError(message, ErrorCode.UNAVAILABLE)


def internal(message: str) -> ServerError:
    return ServerError(message, ErrorCode.INTERNAL)


def unknown_model(name: str) -> ServerError:
    return not_found(f"Request for unknown model: '{name}' is not found")


def as_server_error(exc: BaseException) -> ServerError:
    """Wrap any exception raised by model code so that it reaches the client as INTERNAL."""
    if isinstance(exc, ServerError):
        return exc
    return internal(f"{type(exc).__name__}: {exc}")
