"""A python model instance run in a process of its own, as Triton's python backend runs every instance in a
stub process: the model's Python work then runs beside the server's (and the other instances') instead of
taking turns with them under one interpreter lock.

Opt-in per model with the config parameter ``instance_process`` = "1" (``PythonBackend`` reads it); Triton
passes unknown parameters to the model, so the same repository loads there unchanged. The backend keeps
everything else: it builds the ``pb_utils`` requests and turns the answers into server responses; only the
model's ``initialize``/``execute``/``finalize`` move. ``ProcessModel`` stands in for the model object: its
``execute`` sends each request's inputs, parameters and sequence fields through a socket pair and rebuilds
the responses the child's model returned.

What a child cannot do: BLS (its requests would have to come back to this server; it fails with a clear
error), decoupled or ``async def execute`` models (refused at load). A child that dies fails the batches sent
to it afterwards; the model is then reloaded like any model that fails.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Optional, Sequence

from asr_server.backends.python import triton_python_backend_utils as pb_utils
from asr_server.truthy import truthy

PARAMETER = "instance_process"  # config parameter: "1" runs each instance of the model in its own process
START_TIMEOUT_S = 300.0  # importing a model's dependencies (numba, onnxruntime) and initialize()


class ChildModelError(RuntimeError):
    """An exception the model raised in its process (its type name and message, for Triton's wording)."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name

    def __str__(self) -> str:  # the backend words it as "<type>: <message>"
        return self.args[0]


def wants_process(parameters) -> bool:
    """True when a model config's parameters ask for its instances in their own processes."""
    if PARAMETER not in parameters:
        return False
    return truthy(parameters[PARAMETER].string_value)


def _request_fields(request: pb_utils.InferenceRequest) -> dict:
    return {"inputs": [(t.name(), t.as_numpy()) for t in request.inputs()],
            "requested_output_names": list(request.requested_output_names()),
            "request_id": request.request_id(), "correlation_id": request.correlation_id(),
            "flags": request.flags(), "timeout": request.timeout(), "parameters": request.parameters(),
            "cancelled": request.is_cancelled()}


def _response_fields(response: Optional[pb_utils.InferenceResponse]) -> Optional[dict]:
    if response is None:
        return None
    error = response.error()
    return {"tensors": [(t.name(), t.as_numpy()) for t in response.output_tensors()],
            "error": None if error is None else (error.message(), error.code()),
            "parameters": dict(response._parameters)}


def _response(fields: Optional[dict]) -> Optional[pb_utils.InferenceResponse]:
    if fields is None:
        return None
    if fields["error"] is not None:
        message, code = fields["error"]
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
    return pb_utils.InferenceResponse([pb_utils.Tensor(name, array) for name, array in fields["tensors"]],
                                      parameters=fields["parameters"] or None)


def _answer(returned, sent: list):
    """What goes back for one request: its response's fields (or the one it sent instead of returning it), or
    the type name of whatever else the model returned in its place."""
    if returned is None:
        return _response_fields(sent[0] if sent else None)
    if isinstance(returned, pb_utils.InferenceResponse):
        return _response_fields(returned)
    return type(returned).__name__


def _stand_in(type_name: str) -> Any:
    """An object of a class named like the one the model returned, so the backend's error names that type."""
    return type(type_name, (), {})()


class _NoRoute:
    """The child's route: a model run in its own process has no server to send BLS requests to."""

    def __init__(self, model_dir: str) -> None:
        self.model_dir = model_dir

    def _refuse(self) -> None:
        raise pb_utils.TritonModelException(
            f"BLS is not available to a model run in its own process (parameter {PARAMETER}): "
            "remove the parameter, or run the models it calls inside it")

    def infer(self, request, decoupled):
        self._refuse()

    async def infer_async(self, request, decoupled):
        self._refuse()


def _serve(connection, path: str, model_name: str, model_version: int, args: dict) -> None:
    """The child process: load the model, then answer ("execute", requests) and ("finalize",) until told to
    stop or the pipe closes (the server went away)."""
    import asyncio

    from asr_server import gc_freeze
    from asr_server.backends.python.api.routes import use_route
    from asr_server.backends.python.importer import import_model_module, instance_api, model_class

    route = _NoRoute(str(Path(path).parent))
    api = instance_api(route)
    try:
        module = import_model_module(Path(path), model_name, api)
        with use_route(route):
            model = model_class(module, Path(path))()
            if hasattr(model, "initialize"):
                model.initialize(args)
        if asyncio.iscoroutinefunction(getattr(model, "execute", None)):
            raise TypeError(f"an `async def execute` model cannot run in its own process ({PARAMETER})")
        gc_freeze.settle()  # as the server does after a load: the collector leaves the loaded model alone
        connection.send(("ready", None))
    except BaseException as exc:  # noqa: BLE001 - reported to the server, which fails the load
        connection.send(("failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        return
    while True:
        try:
            message = connection.recv()
        except EOFError:
            message = ("finalize",)
        if message[0] == "finalize":
            try:
                if hasattr(model, "finalize"):
                    with use_route(route):
                        model.finalize()
            finally:
                try:
                    connection.send(("done", None))
                except OSError:
                    pass
            return
        requests, captured = _child_requests(api, route, message[1], model_name, model_version)
        connection.send(_execute(model, route, requests, captured))


def _child_requests(api, route, batch: list[dict], model_name: str, model_version: int) -> tuple[list, list]:
    """The pb_utils requests a batch's fields stand for, and per request the list its sender fills (a model
    may answer through the sender instead of returning the response)."""
    requests, captured = [], []
    for fields in batch:
        sent: list = []
        captured.append(sent)

        def deliver(response, final, sent=sent):
            if response is not None:
                sent.append(response)

        def cancelled(value=fields["cancelled"]):
            return value

        requests.append(api.InferenceRequest._received(
            inputs=[pb_utils.Tensor(name, array) for name, array in fields["inputs"]],
            requested_output_names=fields["requested_output_names"], model_name=model_name,
            model_version=model_version, request_id=fields["request_id"], correlation_id=fields["correlation_id"],
            flags=fields["flags"], timeout=fields["timeout"], parameters_json=fields["parameters"],
            cancelled=cancelled, response_sender=pb_utils.InferenceResponseSender(deliver, False, cancelled),
            route=route))
    return requests, captured


def _execute(model, route, requests: list, captured: list) -> tuple:
    """The answer to one ("execute", ...) message: ("responses", [...]), ("returned", type name) for a model
    that returned no list, or ("raised", (type name, message))."""
    from asr_server.backends.python.api.routes import use_route

    try:
        with use_route(route):
            returned = model.execute(requests)
        if returned is None:
            returned = [None] * len(requests)
        if not isinstance(returned, (list, tuple)):
            return "returned", type(returned).__name__
        return "responses", [_answer(r, captured[i] if i < len(captured) else []) for i, r in enumerate(returned)]
    except Exception as exc:  # noqa: BLE001 - the backend fails the batch with Triton's wording
        return "raised", (type(exc).__name__, str(exc))


def main() -> None:
    """The child's entry point (``python -c "...import main; main()" FD``, FD its end of the socket pair); the
    model to load comes first through it."""
    connection = Connection(int(sys.argv[1]))
    path, model_name, model_version, args = connection.recv()
    _serve(connection, path, model_name, model_version, args)


class ProcessModel:
    """The model object the backend calls, its model running in a child process (see the module doc).

    The child is a plain subprocess of this interpreter talking over a socket pair (multiprocessing's
    Process cannot start from a daemonic process, and a server is often run as one)."""

    def __init__(self, path: Path, model_name: str, model_version: int, args: dict) -> None:
        ours, theirs = socket.socketpair()
        self._process = subprocess.Popen(
            [sys.executable, "-c", "from asr_server.backends.python.process_model import main; main()",
             str(theirs.fileno())],
            pass_fds=(theirs.fileno(),))
        theirs.close()
        self._connection = Connection(ours.detach())
        self._connection.send((str(path), model_name, model_version, args))
        if not self._connection.poll(START_TIMEOUT_S):
            self._stop()
            raise RuntimeError(f"the model's process did not start within {START_TIMEOUT_S:g} s")
        status, detail = self._connection.recv()
        if status != "ready":
            self._stop()
            raise RuntimeError(f"the model failed to load in its own process: {detail}")

    @property
    def pid(self) -> Optional[int]:
        return self._process.pid

    def execute(self, requests: Sequence[pb_utils.InferenceRequest]) -> Any:
        try:
            self._connection.send(("execute", [_request_fields(r) for r in requests]))
            kind, body = self._connection.recv()
        except (EOFError, OSError, BrokenPipeError) as exc:
            raise ChildModelError("ProcessExited", f"the model's process (pid {self.pid}) is gone: {exc}") from exc
        if kind == "raised":  # under the model's own exception type name, as Triton words it
            type_name, message = body
            raise type(type_name, (ChildModelError,), {})(type_name, message)
        if kind == "returned":  # not a list: the backend answers as for a model that returned this type
            return _stand_in(body)
        return [_stand_in(fields) if isinstance(fields, str) else _response(fields) for fields in body]

    def finalize(self) -> None:
        try:
            self._connection.send(("finalize",))
            if self._connection.poll(30):
                self._connection.recv()
        except (EOFError, OSError):
            pass
        finally:
            self._stop()

    def _stop(self) -> None:
        self._connection.close()  # the child reads EOF and finalizes
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=5)
