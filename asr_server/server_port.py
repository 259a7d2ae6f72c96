"""The typed port through which the layers below the core call back into the server.

Two callers run inference on other models of the same server: a python model's BLS requests
(`backends/python/bls.py`) and an ensemble's steps (`scheduling/ensemble.py`). They sit below the core and
must not import it, so the core's side is this interface: the server builds one implementation
(`core.CorePort`) and hands it to the model manager, which hands it on once per model, to each backend
instance (`ModelContext.port`) and to the scheduler factory (for ensembles).
"""

from __future__ import annotations

from typing import Protocol

from asr_server.messages import InferRequest, InferResponse


class ServerPort(Protocol):
    """In-process inference on the server that loaded the caller."""

    def infer(self, request: InferRequest) -> list[InferResponse]:
        """Every response of `request` (one, or zero or more from a decoupled model); raises the first error
        as a ServerError. Blocks the calling thread: for model instance threads and a model's own threads, never
        for the server's event loop."""
        ...

    async def infer_async(self, request: InferRequest) -> list[InferResponse]:
        """The same, awaitable on any event loop: the server's own (ensembles) or a python model's
        (`async def execute` models)."""
        ...
