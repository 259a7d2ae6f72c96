"""What a model answers: InferenceResponse, the responses of a decoupled BLS call, and response senders."""

from __future__ import annotations

import json
import threading
from typing import Callable, Iterable, Optional, Sequence

from asr_server.backends.python.api.datatypes import TRITONSERVER_RESPONSE_COMPLETE_FINAL
from asr_server.backends.python.api.errors import TritonError, TritonModelException
from asr_server.backends.python.api.tensors import Tensor


class InferenceResponse:
    """What a model returns for one request (or sends through a response sender)."""

    def __init__(
        self,
        output_tensors: Optional[Sequence[Tensor]] = None,
        error: Optional[TritonError] = None,
        parameters: Optional[dict] = None,
    ) -> None:
        tensors = list(output_tensors or [])
        for tensor in tensors:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"InferenceResponse output_tensors must be Tensor objects, got {type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))  # lenient: Triton only takes TritonError
        self._output_tensors = tensors
        self._error = error
        self._parameters = checked_parameters(parameters, "InferenceResponse")

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> Optional[TritonError]:
        return self._error

    def parameters(self) -> str:
        """The response parameters as a JSON string, as Triton gives them."""
        return json.dumps(self._parameters, default=str)


class ResponseIterator:
    """The responses of a decoupled BLS request (`exec(decoupled=True)`), in order."""

    def __init__(self, responses: Iterable[InferenceResponse]) -> None:
        self._responses = iter(list(responses))

    def __iter__(self) -> "ResponseIterator":
        return self

    def __next__(self) -> InferenceResponse:
        return next(self._responses)

    def cancel(self) -> None:
        """The responses have already arrived when exec() returns, so there is nothing to stop."""
        self._responses = iter(())


# deliver(response or None, final): called under the sender's lock, at most once with final=True.
_Deliver = Callable[[Optional[InferenceResponse], bool], None]


class InferenceResponseSender:
    """A request's response sender (`request.get_response_sender()`).

    A decoupled model sends any number of responses and then the final flag; a non-decoupled model may
    send exactly one response with the final flag instead of returning it. Thread-safe: a model may
    send from its own threads after `execute` returned.
    """

    def __init__(self, deliver: _Deliver, decoupled: bool, cancelled: Callable[[], bool]) -> None:
        self._deliver = deliver
        self._decoupled = decoupled
        self._cancelled = cancelled
        self._lock = threading.Lock()
        self._sent = 0
        self._closed = False

    def send(self, response: Optional[InferenceResponse] = None, flags: int = 0) -> None:
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"Expected an 'InferenceResponse' object, found type '{type(response).__name__}'."
            )
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one response."
                    )
                if response is None and final and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final "
                        "before sending a response."
                    )
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            self._closed = final
            self._sent += 1
            self._deliver(response, final)

    def is_cancelled(self) -> bool:
        return bool(self._cancelled())

    # Used by the backend: close an open sender when the model failed; True if it was still open.
    def _close_if_open(self) -> bool:
        with self._lock:
            was_open = not self._closed
            self._closed = True
            return was_open


def checked_parameters(parameters: Optional[dict], owner: str) -> dict:
    """Triton accepts only str keys and bool/int/str values in request and response parameters."""
    parameters = {} if parameters is None else parameters
    if not isinstance(parameters, dict):
        raise TritonModelException(f"{owner} parameters must be a dict, got {type(parameters).__name__}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return dict(parameters)
