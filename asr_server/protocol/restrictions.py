"""Triton's restricted protocols / APIs: `--grpc-restricted-protocol` and `--http-restricted-api`.

`--grpc-restricted-protocol=<group>[,<group>...]:<key>=<value>` (repeatable): a gRPC call to a method of one of
those groups must carry the header `triton-grpc-protocol-<key>: <value>`, else it is refused with UNAVAILABLE
"This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'". `--http-restricted-api` is the
same for HTTP with the header `<key>`, refused with 403 "This API is restricted, expecting header '<key>'".
Wording, codes and flag errors checked against tritonserver 2.51.

The checks are a gRPC server interceptor and an aiohttp middleware, so the handlers stay as they are.
"""

from __future__ import annotations

import dataclasses
import hmac
from typing import Any, Callable, Iterable, Optional

import grpc
from aiohttp import web

from asr_server.errors import ErrorCode, ServerError
from asr_server.protocol.status import GRPC_STATUS

GROUPS = (
    "health", "metadata", "inference", "shared-memory", "model-config", "model-repository", "statistics", "trace",
    "logging",
)
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"

# gRPC method of inference.GRPCInferenceService -> protocol group (as Triton's grpc_server.cc groups them).
GRPC_METHOD_GROUPS = {
    "ServerLive": "health", "ServerReady": "health", "ModelReady": "health",
    "ServerMetadata": "metadata", "ModelMetadata": "metadata",
    "ModelInfer": "inference", "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository", "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory", "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory", "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory", "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}


@dataclasses.dataclass(frozen=True)
class Restriction:
    groups: tuple[str, ...]  # protocol / API groups this header guards
    header: str  # the full header name, lower case (gRPC: triton-grpc-protocol-<key>)
    value: str  # the value the header must have


def parse(flags: Iterable[str], grpc_side: bool) -> dict[str, Restriction]:
    """group -> Restriction from the repeated flag values; ValueError with tritonserver's words when malformed."""
    option, kind = ("--grpc-restricted-protocol", "protocol") if grpc_side else ("--http-restricted-api", "api")
    by_group: dict[str, Restriction] = {}
    for flag in flags:
        groups_text, colon, setting = flag.partition(":")
        key, equals, value = setting.partition("=")
        if not colon or not equals or not groups_text or not key:
            raise ValueError(f"{option} option format is '<config name>:<setting>=<value>'. Got {flag}")
        groups = tuple(g.strip() for g in groups_text.split(","))
        header = (GRPC_HEADER_PREFIX + key).lower() if grpc_side else key  # gRPC metadata keys are lower case
        restriction = Restriction(groups, header, value)
        for group in groups:
            if group not in GROUPS:
                raise ValueError(f"unknown restricted {kind} '{group}'")
            if group in by_group:
                raise ValueError(f"restricted {kind} '{group}' can not be specified in multiple config groups")
            by_group[group] = restriction
    return by_group


def _grpc_refusal(restriction: Restriction) -> ServerError:
    return ServerError(f"This protocol is restricted, expecting header '{restriction.header}'", ErrorCode.UNAVAILABLE)


def _allowed(restriction: Restriction, given: Optional[str]) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), restriction.value.encode())


class RestrictedProtocolInterceptor(grpc.aio.ServerInterceptor):
    """Refuses a call to a restricted method group before its handler runs. `trusted(metadata)`: a caller
    let through whatever the restrictions (a sibling worker forwarding what a client was allowed to do)."""

    def __init__(self, restrictions: dict[str, Restriction],
                 trusted: Optional[Callable[[Any], bool]] = None) -> None:
        self.restrictions = restrictions
        self.trusted = trusted

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method.rsplit("/", 1)[-1]
        restriction = self.restrictions.get(GRPC_METHOD_GROUPS.get(method, ""))
        if restriction is None:
            return await continuation(handler_call_details)
        metadata = handler_call_details.invocation_metadata or ()
        headers = dict(metadata)
        if _allowed(restriction, headers.get(restriction.header)) or (
                self.trusted is not None and self.trusted(metadata)):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        return _refusing(handler, _grpc_refusal(restriction))


def _refusing(handler: grpc.RpcMethodHandler, error: ServerError) -> grpc.RpcMethodHandler:
    """A handler of the same kind (unary or streaming) that ends the call with `error`."""

    async def refuse(request_or_iterator, context):
        await context.abort(GRPC_STATUS[error.code], error.message)

    async def refuse_streaming(request_or_iterator, context):
        await context.abort(GRPC_STATUS[error.code], error.message)
        yield  # pragma: no cover - makes this an async generator, as streaming handlers are

    codecs = dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse_streaming, **codecs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, **codecs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse_streaming, **codecs)
    return grpc.unary_unary_rpc_method_handler(refuse, **codecs)


def http_group(request: web.Request) -> Optional[str]:
    """The API group of a routed HTTP request, from its route template (None outside Triton's groups)."""
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else ""
    if route.startswith("/v2/health/") or route.endswith("/ready"):
        return "health"
    if route.startswith("/v2/repository/"):
        return "model-repository"
    if route.startswith(("/v2/systemsharedmemory", "/v2/cudasharedmemory")):
        return "shared-memory"
    if route.startswith("/v2/logging"):
        return "logging"
    if route.endswith("/trace/setting"):
        return "trace"
    if route.endswith("/stats"):
        return "statistics"
    if route.endswith("/config"):
        return "model-config"
    if route.endswith("/infer") or route.startswith("/v1/audio/"):
        return "inference"
    if route == "/" and request.headers.get("Upgrade", "").lower() == "websocket":
        return "inference"  # a WebSocket stream runs inference like /infer (the page itself is not restricted)
    if route in ("/v2", "/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        return "metadata"
    return None


def http_middleware(restrictions: dict[str, Restriction]):
    """aiohttp middleware refusing requests to restricted API groups with Triton's 403 answer."""

    @web.middleware
    async def restricted_api(request: web.Request, handler):
        restriction = restrictions.get(http_group(request) or "")
        if restriction is not None and not _allowed(restriction, request.headers.get(restriction.header)):
            raise web.HTTPForbidden(text=f"This API is restricted, expecting header '{restriction.header}'")
        return await handler(request)

    return restricted_api
