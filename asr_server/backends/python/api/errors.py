"""The errors a python model raises or reports (TritonError), and its logger."""

from __future__ import annotations

import enum
import logging


class TritonError(Exception):
    """An error a model reports, in a response (`InferenceResponse(error=...)`) or when raised.

    Triton's TritonError is not an exception; this one is, so that the errors this module raises
    (a `TritonModelException`) are also TritonErrors that carry a code.
    """

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        if message is None:
            raise TypeError("TritonError message must not be None")
        super().__init__(message)
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._message!r}, code={self._code})"


class TritonModelException(TritonError):
    """Raised by this module when a model misuses the API (Triton raises it for the same cases)."""


_model_log = logging.getLogger("asr_server.python_model")


class Logger:
    """Triton's model logger, writing to Python logging (`asr_server.python_model`)."""

    class LogLevel(enum.IntEnum):
        INFO = 0
        WARNING = 1
        ERROR = 2
        VERBOSE = 3

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    _LEVELS = {
        LogLevel.INFO: logging.INFO,
        LogLevel.WARNING: logging.WARNING,
        LogLevel.ERROR: logging.ERROR,
        LogLevel.VERBOSE: logging.DEBUG,
    }

    @staticmethod
    def log(message: str, level: "Logger.LogLevel" = LogLevel.INFO) -> None:
        _model_log.log(Logger._LEVELS.get(level, logging.INFO), "%s", message)

    @staticmethod
    def log_info(message: str) -> None:
        _model_log.info("%s", message)

    @staticmethod
    def log_warn(message: str) -> None:
        _model_log.warning("%s", message)

    @staticmethod
    def log_error(message: str) -> None:
        _model_log.error("%s", message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _model_log.debug("%s", message)

