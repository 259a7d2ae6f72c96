"""An instance's route: carries the BLS requests of one model instance to the server that loaded it."""

from __future__ import annotations

from typing import Sequence, Union

from asr_server.backends.base import ModelContext
from asr_server.backends.python import triton_python_backend_utils as pb_utils
from asr_server.backends.python.convert import bls_request, pb_error_response, pb_response
from asr_server.errors import ServerError, internal
from asr_server.messages import InferResponse

BlsResult = Union[pb_utils.InferenceResponse, pb_utils.ResponseIterator]


class InstanceRoute:
    """One instance's `api.routes.ModelRoute`: its BLS requests go to the context's ServerPort."""

    def __init__(self, context: ModelContext) -> None:
        self._context = context
        self.model_dir = str(context.version_dir)

    def infer(self, request: pb_utils.InferenceRequest, decoupled: bool) -> BlsResult:
        port = self._context.port
        if port is None:
            return self._result_of_error(self._no_port_error(), decoupled)
        try:
            responses = port.infer(bls_request(request))
        except Exception as exc:  # noqa: BLE001 - Triton reports BLS failures inside the response
            return self._result_of_error(exc, decoupled)
        return self._result(request, responses, decoupled)

    async def infer_async(self, request: pb_utils.InferenceRequest, decoupled: bool) -> BlsResult:
        # Runs on the instance's own loop (`async def execute` models); the port bridges to the server's.
        port = self._context.port
        if port is None:
            return self._result_of_error(self._no_port_error(), decoupled)
        try:
            responses = await port.infer_async(bls_request(request))
        except Exception as exc:  # noqa: BLE001 - Triton reports BLS failures inside the response
            return self._result_of_error(exc, decoupled)
        return self._result(request, responses, decoupled)

    def _no_port_error(self) -> ServerError:
        return internal(f"BLS is not available: model '{self._context.name}' was loaded outside a server")
    @staticmethod
    def _result_of_error(error: BaseException, decoupled: bool) -> BlsResult:
        response = pb_error_response(error)
        return pb_utils.ResponseIterator([response]) if decoupled else response

    def _result(
        self, request: pb_utils.InferenceRequest, responses: Sequence[InferResponse], decoupled: bool
    ) -> BlsResult:
        converted = [pb_response(r) for r in responses]
        if decoupled:
            return pb_utils.ResponseIterator(converted)
        if len(converted) != 1:
            return pb_error_response(
                internal(
                    f"BLS request to model '{request._model_name}' produced {len(converted)} responses; "
                    "use exec(decoupled=True) for decoupled models"
                )
            )
        return converted[0]
