"""The ASR pipelines called from front ends other than Triton's (WebSocket, OpenAI's API): WeNet's tensors
(WAV [1, n] FP32 at 16 kHz, WAV_LENS [1, 1] INT32 -> TRANSCRIPTS, DETAILS) built here and sent through the
same core as a gRPC request, so the models, batching, limits and errors are the same.

``recognize`` is one offline request; a ``StreamCall`` is one sequence on a streaming model, chunk by chunk,
ended (and its state freed) by ``finish`` or ``abort``.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from asr_client.audio import SAMPLE_RATE  # noqa: F401 - the frontends take it from here
from asr_server.core import InferenceCore
from asr_server.errors import ServerError
from asr_server.messages import InferRequest, RequestedOutput, SequenceControl, Tensor

# Sequence ids of these front ends' streams: drawn high in the range an INT64 or UINT64 CORRID holds
# ([2^40, 2^62)), where the ids gRPC clients pick (counting up from small numbers) do not reach.
_IDS = itertools.count(random.SystemRandom().randrange(1 << 40, 1 << 61))


@dataclass(frozen=True)
class Recognized:
    text: str
    details: Optional[dict]  # words, times, n-best (when the model has DETAILS); None otherwise


def model_has_details(core: InferenceCore, model: str) -> bool:
    loaded = core.manager.get(model, "")
    return any(o.name == "DETAILS" for o in loaded.config.output)


def model_streams(core: InferenceCore, model: str) -> bool:
    """A sequence-batched model, or an ensemble one of whose steps is (ServerError when there is no such
    model)."""
    config = core.manager.get(model, "").config
    if config.HasField("ensemble_scheduling"):
        return any(step.model_name != model and _streams_quietly(core, step.model_name)
                   for step in config.ensemble_scheduling.step)
    return config.HasField("sequence_batching")


def _streams_quietly(core: InferenceCore, model: str) -> bool:
    try:
        return model_streams(core, model)
    except ServerError:
        return False


def sequence_idle_seconds(core: InferenceCore, model: str) -> float:
    """How long the model keeps an idle sequence (its own, or its streaming steps'); 0: no limit known."""
    config = core.manager.get(model, "").config
    if config.HasField("ensemble_scheduling"):
        idles = [sequence_idle_seconds(core, step.model_name) for step in config.ensemble_scheduling.step
                 if step.model_name != model and _streams_quietly(core, step.model_name)]
        return min([i for i in idles if i > 0], default=0.0)
    return config.sequence_batching.max_sequence_idle_microseconds / 1e6


def _request(model: str, samples: np.ndarray, details: bool, parameters: Optional[Mapping[str, Any]],
             sequence: SequenceControl = SequenceControl(), request_id: str = "") -> InferRequest:
    wav = np.ascontiguousarray(samples, dtype=np.float32).reshape(1, -1)
    outputs = [RequestedOutput("TRANSCRIPTS")] + ([RequestedOutput("DETAILS")] if details else [])
    params = dict(parameters or {})
    if details:
        params["details"] = True
    return InferRequest(model_name=model, id=request_id,
                        inputs=[Tensor("WAV", "FP32", wav), Tensor("WAV_LENS", "INT32", np.array([[wav.shape[1]]],
                                                                                                  np.int32))],
                        outputs=outputs, parameters=params, sequence=sequence)


def _read(response) -> Recognized:
    text = response.output("TRANSCRIPTS").data.reshape(-1)[0]
    text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else str(text)
    details = None
    for tensor in response.outputs:
        if tensor.name == "DETAILS":
            value = tensor.data.reshape(-1)[0]
            details = json.loads(value.decode("utf-8") if isinstance(value, bytes) else str(value))
    return Recognized(text, details)


async def recognize(core: InferenceCore, model: str, samples: np.ndarray,
                    parameters: Optional[Mapping[str, Any]] = None, details: bool = True,
                    request_id: str = "") -> Recognized:
    """One offline request: (n,) float32 16 kHz samples -> transcript (and DETAILS when ``details``)."""
    return _read(await core.infer(_request(model, samples, details, parameters, request_id=request_id)))


class StreamCall:
    """One stream on a sequence-batched model. The first ``send`` is the START (it carries ``parameters``);
    ``finish`` sends the END with the last audio; ``abort`` ends a stream the client dropped, so its state is
    freed now rather than when the sequence batcher's idle timeout finds it."""

    def __init__(self, core: InferenceCore, model: str, parameters: Optional[Mapping[str, Any]] = None,
                 details: bool = True):
        self.core, self.model, self.parameters, self.details = core, model, dict(parameters or {}), details
        self.sequence_id = next(_IDS)
        self.started = self.ended = False
        self.chunks = 0

    async def send(self, samples: np.ndarray, last: bool = False) -> Recognized:
        control = SequenceControl(self.sequence_id, start=not self.started, end=last)
        request = _request(self.model, samples, self.details, self.parameters if not self.started else None,
                           control, request_id=f"{self.sequence_id}:{self.chunks}")
        self.started, self.chunks = True, self.chunks + 1
        if last:
            self.ended = True
        return _read(await self.core.infer(request))

    async def finish(self, samples: Optional[np.ndarray] = None) -> Recognized:
        return await self.send(np.zeros(0, np.float32) if samples is None else samples, last=True)

    async def abort(self) -> None:
        if self.started and not self.ended:
            try:
                await self.send(np.zeros(0, np.float32), last=True)
            except ServerError:
                pass  # the stream had failed already: nothing is held for it
