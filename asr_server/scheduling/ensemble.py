"""Triton ensembles: a request flows through `ensemble_scheduling.step`s, tensors passed in memory.

A step runs once every tensor its input_map names exists; steps whose inputs are ready run concurrently.
Each step is an ordinary request to its composing model (so that model's own scheduler batches it with
others), carrying the ensemble request's sequence id and flags. A decoupled step may answer several times:
the steps after it then run once per response, and each completed set of ensemble outputs is one
response of the (decoupled) ensemble. A failing step fails the ensemble request with the step named.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Optional

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.errors import ErrorCode, ServerError, as_server_error
from asr_server.scheduling.base import Scheduler
from asr_server.scheduling.pending import Pending
from asr_server.model_stats import ModelStatistics
from asr_server.messages import InferRequest, InferResponse, RequestedOutput, Tensor
from asr_server.server_port import ServerPort


@dataclasses.dataclass(frozen=True)
class Step:
    index: int
    model_name: str
    model_version: str
    inputs: dict[str, str]  # composing model input -> ensemble tensor
    outputs: dict[str, str]  # composing model output -> ensemble tensor


def ensemble_steps(config: mc.ModelConfig) -> list[Step]:
    return [
        Step(
            index=i,
            model_name=step.model_name,
            model_version="" if step.model_version < 0 else str(step.model_version),
            inputs=dict(step.input_map),
            outputs=dict(step.output_map),
        )
        for i, step in enumerate(config.ensemble_scheduling.step)
    ]


class EnsembleScheduler(Scheduler):
    """A Scheduler without instances of its own (`pool` None): each request runs through the steps, each
    step a request to its composing model through the server's port."""

    def __init__(self, config: mc.ModelConfig, port: Optional[ServerPort], stats: ModelStatistics) -> None:
        super().__init__(pool=None)
        self.config = config
        self.name = config.name
        self.steps = ensemble_steps(config)
        self.output_names = [o.name for o in config.output]
        self.decoupled = config.model_transaction_policy.decoupled
        self.port = port  # the steps run on the server through it
        self.stats = stats

    @property
    def dependencies(self) -> set[str]:
        return {s.model_name for s in self.steps}

    def _submit(self, pending: Pending) -> None:
        self._spawn(self._run(pending))

    async def _run(self, pending: Pending) -> None:
        start = time.monotonic_ns()
        request = pending.request
        tensors = {t.name: t for t in request.inputs}
        sent = 0
        try:
            async for outputs in self._flow(request, tensors, frozenset()):
                if sent and not self.decoupled:
                    raise ServerError(
                        f"ensemble '{self.name}' produced more than one response; only a decoupled ensemble may",
                        ErrorCode.INTERNAL,
                    )
                last = InferResponse(self.name, "", request.id, outputs=outputs, final=False)
                if self.decoupled:
                    pending.channel.deliver_on_loop(last, False)
                sent += 1
            if self.decoupled:
                pending.channel.deliver_on_loop(None, True)
            elif sent == 0:
                raise ServerError(f"ensemble '{self.name}' produced no response", ErrorCode.INTERNAL)
            else:
                last.final = True
                pending.channel.deliver_on_loop(last, True)
            self.stats.record_request(True, time.monotonic_ns() - start, infer_ns=time.monotonic_ns() - start)
        except Exception as exc:  # noqa: BLE001 - the ensemble request fails, the server goes on
            self.stats.record_request(False, time.monotonic_ns() - start)
            pending.channel.deliver_on_loop(as_server_error(exc), True)

    async def _flow(self, request: InferRequest, tensors: dict[str, Tensor], done: frozenset):
        """Yield the ensemble outputs of every branch of the data flow starting from `tensors`."""
        if all(name in tensors for name in self.output_names):
            yield [_renamed(tensors[name], name) for name in self.output_names]
            return
        ready = [s for s in self.steps if s.index not in done and all(t in tensors for t in s.inputs.values())]
        if not ready:
            missing = [n for n in self.output_names if n not in tensors]
            raise ServerError(f"ensemble '{self.name}' cannot produce output(s) {missing}", ErrorCode.INTERNAL)
        results = await asyncio.gather(*(self._run_step(step, request, tensors) for step in ready))
        done = done | {s.index for s in ready}
        # Every combination of the ready steps' responses continues as its own branch.
        branches = [dict(tensors)]
        for step, responses in zip(ready, results):
            branches = [
                {**branch, **{step.outputs[t.name]: t for t in response.outputs if t.name in step.outputs}}
                for branch in branches
                for response in responses
            ]
        for branch in branches:
            async for outputs in self._flow(request, branch, done):
                yield outputs

    async def _run_step(self, step: Step, request: InferRequest, tensors: dict[str, Tensor]) -> list[InferResponse]:
        step_request = InferRequest(
            model_name=step.model_name,
            model_version=step.model_version,
            id=request.id,
            inputs=[_renamed(tensors[source], target) for target, source in step.inputs.items()],
            outputs=[RequestedOutput(name) for name in step.outputs],
            parameters=request.parameters,
            sequence=request.sequence,
            priority=request.priority,
            timeout_us=request.timeout_us,
            cancelled=request.cancelled,
        )
        try:
            if self.port is None:
                raise ServerError("ensembles need a server to run their steps", ErrorCode.UNAVAILABLE)
            return await self.port.infer_async(step_request)
        except ServerError as error:
            raise ServerError(
                f"in ensemble '{self.name}', step {step.index} ('{step.model_name}'): {error.message}", error.code
            ) from None


def _renamed(tensor: Tensor, name: str) -> Tensor:
    return tensor if tensor.name == name else Tensor(name, tensor.datatype, tensor.data, tensor.parameters)
