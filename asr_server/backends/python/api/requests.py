"""InferenceRequest: what `execute(requests)` receives and what a model builds for BLS."""

from __future__ import annotations

import json
import threading
from typing import Callable, ClassVar, Optional, Sequence, Union

from asr_server.backends.python.api.datatypes import (
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    PreferredMemory,
)
from asr_server.backends.python.api.errors import TritonModelException
from asr_server.backends.python.api.responses import (
    InferenceResponse,
    InferenceResponseSender,
    ResponseIterator,
    checked_parameters,
)
from asr_server.backends.python.api.routes import ModelRoute, calling_route
from asr_server.backends.python.api.tensors import Tensor


# Guards making a request's sender on first use: a model may ask for it from two threads at once.
_SENDER_MADE = threading.Lock()


class _Trace:
    """Triton's InferenceTrace: this server keeps no trace context."""

    def get_context(self) -> Optional[str]:
        return None


class InferenceRequest:
    """A request: what `execute(requests)` receives, and what a model builds for BLS.

    BLS: `InferenceRequest(model_name=..., requested_output_names=[...], inputs=[Tensor...]).exec()`
    runs it on the server that loaded the calling model and returns an `InferenceResponse` (or a
    `ResponseIterator` with `decoupled=True`); failures come back as `response.error()`, not raised.
    The server is the one whose route the request was built under: the route of the backend's call into
    the model that built it, else the class's own (`bound_route`, set in the copy of this API that each
    model instance imports, for the threads a model starts); see routes.py.
    """

    bound_route: ClassVar[Optional[ModelRoute]] = None

    def __init__(
        self,
        *,
        request_id: str = "",
        correlation_id: Union[int, str] = 0,
        inputs: Sequence[Tensor],
        requested_output_names: Sequence[str],
        model_name: str,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Optional[PreferredMemory] = None,
        trace: Optional[_Trace] = None,
        parameters: Optional[dict] = None,
    ) -> None:
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        for tensor in inputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(f"InferenceRequest inputs must be Tensor objects, got {type(tensor)}")
        self._request_id = str(request_id)
        self._correlation_id = correlation_id
        self._inputs = list(inputs)
        self._requested_output_names = [str(n) for n in requested_output_names]
        self._model_name = str(model_name)
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)  # microseconds
        self._parameters = json.dumps(checked_parameters(parameters, "InferenceRequest"))
        self._cancelled: Callable[[], bool] = lambda: False
        self._response_sender: Optional[InferenceResponseSender] = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._route = calling_route() or self.bound_route  # the model building this request

    @classmethod
    def _received(
        cls,
        *,
        inputs: list[Tensor],
        requested_output_names: list[str],
        model_name: str,
        model_version: int,
        request_id: str,
        correlation_id: Union[int, str],
        flags: int,
        timeout: int,
        parameters_json: str,
        cancelled: Callable[[], bool],
        response_sender: Union[InferenceResponseSender, Callable[[], InferenceResponseSender]],
        route: ModelRoute,
    ) -> "InferenceRequest":
        """A request as the backend hands it to `execute` (parameters already a JSON string). The server built
        and checked every field, so the checks and conversions of `__init__` (which guard what a model's BLS
        code passes) are skipped: this runs for every request, streamed chunks included. `response_sender`
        may be a function that makes it, called when the model first asks for it (most models never do)."""
        request = cls.__new__(cls)
        request._request_id = request_id
        request._correlation_id = correlation_id
        request._inputs = inputs
        request._requested_output_names = requested_output_names
        request._model_name = model_name
        request._model_version = int(model_version)
        request._flags = flags
        request._timeout = timeout
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        request._parameters = parameters_json
        request._cancelled = cancelled
        request._response_sender = response_sender
        request._route = route
        return request

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> Union[int, str]:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        """The request parameters as a JSON string (`json.loads(request.parameters())`)."""
        return self._parameters

    def trace(self) -> _Trace:
        return _Trace()

    def is_cancelled(self) -> bool:
        return bool(self._cancelled())

    def get_response_sender(self) -> InferenceResponseSender:
        sender = self._response_sender
        if sender is None:
            raise TritonModelException("a BLS request has no response sender")
        if not isinstance(sender, InferenceResponseSender):  # made on first use (see `_received`)
            with _SENDER_MADE:
                if not isinstance(self._response_sender, InferenceResponseSender):
                    self._response_sender = self._response_sender()
                sender = self._response_sender
        return sender

    def set_release_flags(self, flags: int) -> None:
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise TritonModelException("request rescheduling is not supported by this server")
        self._release_flags = int(flags)

    def _exec_route(self) -> ModelRoute:
        route = self._route or calling_route()
        if route is None:
            raise TritonModelException("BLS exec() called outside a loaded python model")
        return route

    def exec(self, decoupled: bool = False) -> Union[InferenceResponse, ResponseIterator]:
        """Run this request on the server and wait for its response(s)."""
        return self._exec_route().infer(self, bool(decoupled))

    async def async_exec(self, decoupled: bool = False) -> Union[InferenceResponse, ResponseIterator]:
        """`exec` for `async def execute` models: awaits without blocking the model's event loop."""
        return await self._exec_route().infer_async(self, bool(decoupled))


