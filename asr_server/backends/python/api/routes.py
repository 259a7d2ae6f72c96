"""Routes: how a model's BLS requests and `get_model_dir()` reach the server instance that loaded it.

The python backend hands each model instance its route when it creates it, and uses it in two explicit ways:
- around every call into the model (initialize, execute, finalize, an `async def execute` coroutine) it sets
  the route in a context variable (`use_route`); requests built during the call take it, including those
  built by code outside the model folder that imports the shared module by name when it runs
  (`asr_server/asr/serving/triton_helpers.py`);
- the instance imports model.py with its own copy of this API whose `InferenceRequest` and `get_model_dir`
  fall back to its route (`asr_server/backends/python/importer.py`), so the threads a model starts reach
  their own server too (Triton's stub process serves one model, so its module-level API is bound the same way).
Nothing else finds a route: a request built outside both (a shared helper's own thread) fails to `exec()`.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import TYPE_CHECKING, Iterator, Optional, Protocol, Union

from asr_server.backends.python.api.errors import TritonModelException

if TYPE_CHECKING:
    from asr_server.backends.python.api.requests import InferenceRequest
    from asr_server.backends.python.api.responses import InferenceResponse, ResponseIterator


class ModelRoute(Protocol):
    """Implemented by the python backend, one per model instance (`backends/python/bls.py`)."""

    model_dir: str  # the version folder holding model.py (what Triton's get_model_dir returns)

    def infer(self, request: "InferenceRequest", decoupled: bool) -> Union["InferenceResponse", "ResponseIterator"]:
        """Run a BLS request; never raises, errors come back inside the response."""

    async def infer_async(
        self, request: "InferenceRequest", decoupled: bool
    ) -> Union["InferenceResponse", "ResponseIterator"]: ...


# Set by the backend around initialize/execute/finalize; copied into the tasks a coroutine model starts.
_calling_route: contextvars.ContextVar[Optional[ModelRoute]] = contextvars.ContextVar(
    "triton_python_model_route", default=None
)


@contextlib.contextmanager
def use_route(route: ModelRoute) -> Iterator[None]:
    """The route of the model the backend is calling into, for the duration of the call."""
    token = _calling_route.set(route)
    try:
        yield
    finally:
        _calling_route.reset(token)


def calling_route() -> Optional[ModelRoute]:
    """The route the backend set around the current call into a model, or None."""
    return _calling_route.get()


def get_model_dir() -> str:
    """The version folder of the calling model (where its model.py lives)."""
    route = calling_route()
    if route is None:
        raise TritonModelException("get_model_dir() called outside a loaded python model")
    return route.model_dir
