"""Triton's `inference.GRPCInferenceService`, on the stubs that ship in tritonclient.

Each method converts the message, calls the core and converts back; errors become a gRPC status through
the one table in `status.py`. Stream errors travel in `error_message` and the stream stays open.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
from typing import AsyncIterator, Optional, Union

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from asr_server.core import InferenceCore
from asr_server.errors import ErrorCode, ServerError, as_server_error, invalid_argument
from asr_server.protocol import converters
from asr_server.protocol import parameters
from asr_server.protocol.runtime_settings import RuntimeSettings
from asr_server.protocol.status import GRPC_STATUS
from asr_server.repository.manager import LoadedVersion
from asr_server.messages import InferRequest, InferResponse
from asr_server.workers import FORWARDED_HEADER

log = logging.getLogger(__name__)
# Answers a ModelStreamInfer stream may hold that its client has not taken yet (requests in flight included);
# past it the stream's requests are not read until the client reads. Bounds a stream's memory by this many
# responses, whatever the client does.
MAX_STREAM_BACKLOG = 32


def _log_error(method: str, error: ServerError) -> None:
    if error.is_client_error:
        log.warning("%s: %s", method, error.message)  # a client mistake: one line, no traceback
    else:
        log.error("%s: %s", method, error.message)


def unary(method):
    """Turn a ServerError (or any exception) into the matching gRPC status."""

    @functools.wraps(method)
    async def wrapper(self, request, context):
        try:
            return await method(self, request, context)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status, never a crash
            error = as_server_error(exc)
            if not isinstance(exc, ServerError):
                log.exception("%s failed", method.__name__)
            _log_error(method.__name__, error)
            await context.abort(GRPC_STATUS[error.code], error.message)

    return wrapper


def forwarded_by_sibling(metadata, token: Optional[str]) -> bool:
    """A control request another worker passed on (asr_server/workers.py): it carries the workers' secret
    token. It goes no further; a client's request with any other value is a client's (and goes to all)."""
    if not token:
        return False
    return any(key == FORWARDED_HEADER and isinstance(value, str) and hmac.compare_digest(value, token)
               for key, value in (metadata or ()))


class InferenceService(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, core: InferenceCore, settings: RuntimeSettings) -> None:
        self.core = core
        self.settings = settings
        self._stream_readers: set[asyncio.Task] = set()  # one per open ModelStreamInfer
        self._closing = False

    def _forwarded(self, context) -> bool:
        return forwarded_by_sibling(context.invocation_metadata(), getattr(self.core.peers, "token", None))

    def close_streams(self) -> None:
        """Shutdown: open streams stop reading new requests and end once their accepted ones are answered,
        so an idle stream does not hold the server for the whole exit timeout."""
        self._closing = True
        for reader in list(self._stream_readers):
            reader.cancel()

    # ---- health and metadata --------------------------------------------------------------------
    @unary
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=self.core.live)

    @unary
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.core.server_ready())

    @unary
    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=self.core.model_ready(request.name, request.version))

    @unary
    async def ServerMetadata(self, request, context):
        meta = self.core.server_metadata()
        return pb.ServerMetadataResponse(name=meta["name"], version=meta["version"], extensions=meta["extensions"])

    @unary
    async def ModelMetadata(self, request, context):
        return converters.metadata_to_pb(self.core.model_metadata(request.name, request.version))

    @unary
    async def ModelConfig(self, request, context):
        return pb.ModelConfigResponse(config=self.core.model_config(request.name, request.version))

    @unary
    async def ModelStatistics(self, request, context):
        response = pb.ModelStatisticsResponse()
        for name, version, stats in self.core.statistics(request.name, request.version):
            response.model_stats.append(converters.statistics_to_pb(name, version, stats))
        return response

    # ---- inference ------------------------------------------------------------------------------
    @unary
    async def ModelInfer(self, request, context):
        infer_request = converters.request_from_pb(request, self.core.shared_memory)
        infer_request.cancelled = context.cancelled
        response = await self.core.infer(infer_request)
        return converters.response_to_pb(response, infer_request.outputs, self.core.shared_memory)

    async def ModelStreamInfer(self, request_iterator, context) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Requests are handled concurrently; responses go out as they complete."""
        outbox: asyncio.Queue = asyncio.Queue()
        tasks: set[asyncio.Task] = set()
        done_reading = asyncio.Event()
        half_closed = asyncio.Event()  # the client ended its requests (set: nothing it sent goes unread)
        room = asyncio.Event()  # set when the stream holds fewer than MAX_STREAM_BACKLOG unsent answers
        room.set()

        unsent = [0]  # answers in the outbox (its None items only wake the writer up)
        waiting = [0]  # requests answered by a callback (one response each) whose answer has not come

        def backlog() -> int:
            return len(tasks) + waiting[0] + unsent[0]

        def put(answer: pb.ModelStreamInferResponse) -> None:
            unsent[0] += 1
            outbox.put_nowait(answer)

        async def handle(message: pb.ModelInferRequest, request: InferRequest) -> None:
            try:
                async for item in self._stream_one(message, request):
                    unsent[0] += 1
                    await outbox.put(item)
            except Exception as exc:  # noqa: BLE001 - a failed request must not end the stream
                unsent[0] += 1
                await outbox.put(self._stream_error(message, as_server_error(exc)))

        finished = [False]  # the stream is over: late answers are dropped (nor written to shared memory)

        def answer_of(message: pb.ModelInferRequest, request: InferRequest):
            def answered(item: Union[InferResponse, ServerError]) -> None:
                waiting[0] -= 1
                if finished[0]:
                    return
                try:
                    put(self._one_answer(message, request, item))
                except Exception as exc:  # noqa: BLE001 - e.g. an output too big for the wire: this answer fails
                    put(self._stream_error(message, as_server_error(exc)))
            return answered

        def start(message: pb.ModelInferRequest) -> None:
            """A model with one response per request is answered by a callback; a decoupled one by a task."""
            try:
                request = converters.request_from_pb(message, self.core.shared_memory)
                request.cancelled = context.cancelled
                loaded = self._loaded(request)
                if loaded is None or not loaded.decoupled:  # None: `submit` raises why
                    waiting[0] += 1
                    try:
                        self.core.submit(request, answer_of(message, request), loaded)
                    except BaseException:
                        waiting[0] -= 1
                        raise
                    return
            except Exception as exc:  # noqa: BLE001 - a refused request must not end the stream
                put(self._stream_error(message, as_server_error(exc)))
                return
            task = asyncio.get_running_loop().create_task(handle(message, request))
            tasks.add(task)
            task.add_done_callback(lambda t: (tasks.discard(t), outbox.put_nowait(None)))

        async def read() -> None:
            try:
                async for message in request_iterator:
                    while backlog() >= MAX_STREAM_BACKLOG:
                        # A client that does not read its answers: stop reading its requests (gRPC's flow
                        # control then holds the client back) instead of queueing answers without bound.
                        room.clear()
                        await room.wait()
                    start(message)
                half_closed.set()
            finally:
                done_reading.set()
                outbox.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read())
        self._stream_readers.add(reader)
        reader.add_done_callback(self._stream_readers.discard)
        if self._closing:
            reader.cancel()
        try:
            # until nothing more can come: requests all read, none in a task or waiting for its callback
            while not (done_reading.is_set() and not tasks and not waiting[0] and outbox.empty()):
                item = await outbox.get()
                room.set()
                if item is not None:
                    unsent[0] -= 1
                    yield item
            if self._closing and not half_closed.is_set():
                # Cut by shutdown while the client could still send: what it sent after the last answer was
                # not read, so the stream must not end as if all went well (Triton's UNAVAILABLE).
                context.set_code(grpc.StatusCode.UNAVAILABLE)
                context.set_details("the server is shutting down: the stream was closed after the answers to "
                                    "the requests it had read; later ones were not read")
        finally:
            finished[0] = True
            reader.cancel()
            for task in list(tasks):
                task.cancel()

    def _one_answer(self, message: pb.ModelInferRequest, request: InferRequest,
                    item: Union[InferResponse, ServerError]) -> pb.ModelStreamInferResponse:
        """The streamed answer of a request to a model with one response per request (flagged final, as
        Triton flags every streamed response)."""
        if isinstance(item, ServerError):
            return self._stream_error(message, item)
        answer = pb.ModelStreamInferResponse()
        converters.response_to_pb(item, request.outputs, self.core.shared_memory, final_flag=True,
                                  into=answer.infer_response)
        return answer

    async def _stream_one(self, message: pb.ModelInferRequest,
                          infer_request: InferRequest) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Every answer of a request to a decoupled model."""
        params = message.parameters
        send_empty_final = "triton_enable_empty_final_response" in params and bool(
            params["triton_enable_empty_final_response"].bool_param
        )
        async for item in self.core.stream(infer_request):
            if isinstance(item, ServerError):
                yield self._stream_error(message, item)
                continue
            if item is None:  # a decoupled model closed the request without a last response
                if send_empty_final:
                    empty = InferResponse(infer_request.model_name, infer_request.model_version, id=infer_request.id)
                    yield pb.ModelStreamInferResponse(
                        infer_response=converters.response_to_pb(empty, final_flag=True)
                    )
                continue
            final_flag = item.final  # the core marks a one-response model's answer final
            yield pb.ModelStreamInferResponse(
                infer_response=converters.response_to_pb(
                    item, infer_request.outputs, self.core.shared_memory, final_flag=final_flag
                )
            )

    def _loaded(self, request: InferRequest) -> Optional[LoadedVersion]:
        """The model version serving `request`, or None when there is none."""
        try:
            return self.core.manager.get(request.model_name, request.model_version)
        except ServerError:
            return None

    @staticmethod
    def _stream_error(message: pb.ModelInferRequest, error: ServerError) -> pb.ModelStreamInferResponse:
        _log_error("ModelStreamInfer", error)
        return pb.ModelStreamInferResponse(
            error_message=error.message,
            infer_response=pb.ModelInferResponse(
                model_name=message.model_name, model_version=message.model_version, id=message.id
            ),
        )

    # ---- repository -----------------------------------------------------------------------------
    @unary
    async def RepositoryIndex(self, request, context):
        response = pb.RepositoryIndexResponse()
        for row in self.core.repository_index(ready_only=request.ready):
            response.models.add(**row)
        return response

    @unary
    async def RepositoryModelLoad(self, request, context):
        override = converters.config_override_json(request.parameters)
        files = converters.load_files(request.parameters)
        await self.core.load_model(request.model_name, override, files, forward=not self._forwarded(context))
        return pb.RepositoryModelLoadResponse()

    @unary
    async def RepositoryModelUnload(self, request, context):
        await self.core.unload_model(request.model_name, converters.unload_dependents(request.parameters),
                                     forward=not self._forwarded(context))
        return pb.RepositoryModelUnloadResponse()

    # ---- shared memory --------------------------------------------------------------------------
    @unary
    async def SystemSharedMemoryStatus(self, request, context):
        response = pb.SystemSharedMemoryStatusResponse()
        for region in self.core.shared_memory.status(request.name):
            status = response.regions[region.name]
            status.name, status.key, status.offset, status.byte_size = (
                region.name, region.key, region.offset, region.byte_size
            )
        return response

    @unary
    async def SystemSharedMemoryRegister(self, request, context):
        await self.core.register_shared_memory(request.name, request.key, request.offset, request.byte_size,
                                               forward=not self._forwarded(context))
        return pb.SystemSharedMemoryRegisterResponse()

    @unary
    async def SystemSharedMemoryUnregister(self, request, context):
        await self.core.unregister_shared_memory(request.name, forward=not self._forwarded(context))
        return pb.SystemSharedMemoryUnregisterResponse()

    @unary
    async def CudaSharedMemoryStatus(self, request, context):
        if request.name:
            raise ServerError(f"Unable to find cuda shared memory region: '{request.name}'", ErrorCode.NOT_FOUND)
        return pb.CudaSharedMemoryStatusResponse()

    @unary
    async def CudaSharedMemoryRegister(self, request, context):
        raise ServerError(
            "failed to register CUDA shared memory region: this server has no CUDA device", ErrorCode.UNAVAILABLE
        )

    @unary
    async def CudaSharedMemoryUnregister(self, request, context):
        if request.name:
            raise ServerError(f"Unable to find cuda shared memory region: '{request.name}'", ErrorCode.NOT_FOUND)
        return pb.CudaSharedMemoryUnregisterResponse()

    # ---- logging and tracing --------------------------------------------------------------------
    @unary
    async def LogSettings(self, request, context):
        values = {}
        for key in request.settings:
            value = request.settings[key]
            kind = value.WhichOneof("parameter_choice")
            values[key] = getattr(value, kind) if kind is not None else None
        current = self.settings.update_log(parameters.log_changes(values, self.settings.update_log({})))
        response = pb.LogSettingsResponse()
        for key, value in current.items():
            target = response.settings[key]
            if isinstance(value, bool):
                target.bool_param = value
            elif isinstance(value, int):
                target.uint32_param = value
            else:
                target.string_param = str(value)
        return response

    @unary
    async def TraceSetting(self, request, context):
        if request.model_name:
            self.core.manager.get(request.model_name)  # unknown model -> NOT_FOUND
        changes = {key: list(request.settings[key].value) for key in request.settings}
        try:
            current = self.settings.update_trace(request.model_name, changes) if changes else self.settings.trace(
                request.model_name
            )
        except KeyError as exc:
            raise invalid_argument(f"unknown trace setting {exc.args[0]!r}") from None
        response = pb.TraceSettingResponse()
        for key, values in current.items():
            response.settings[key].value.extend(values)
        return response


def add_to_server(server: grpc.aio.Server, core: InferenceCore, settings: RuntimeSettings) -> InferenceService:
    service = InferenceService(core, settings)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(service, server)
    return service
